"""Benchmark (prints figures, asserts nothing): Horovod's build as hvd_horovod runs it, with debug info (Horovod's
own RelWithDebInfo, -O3 -g) and without (the role's default, hvd_horovod_debug_info false: its toolchain file), in
turns: the wall time of `pip wheel`, the wheel's size and its PyTorch library's size.

On this machine, not in a node: a venv of the CPython here with the CPU lab's PyTorch (tests/lab/stacks.py's pin:
PIP_FIND_LINKS's wheel where it holds it, else the index), the sdist of the role's pinned version checked against its pinned sha256, the role's patches for
PyTorch >= 2.1, the role's build environment (plugins/filter/hvd_horovod.py: PyTorch, the MPI and Gloo controllers,
Gloo CPU operations, make -j<cores>) and the role's own toolchain file (rendered from tasks/build.yml). Needs g++,
cmake >= 3.21 and Open MPI's headers here (apt-get install g++ cmake libopenmpi-dev python3-venv python3-dev).

Run from the checkout after tests/setup.sh:  .venv/bin/python bench/horovod_build.py [ROUNDS]   (default 2 each)
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from benchargs import arguments  # noqa: E402
from tests.lab.stacks import TORCH  # noqa: E402  (the CPU lab's pin: PIP_FIND_LINKS's wheel here)

ROLE = ROOT / "roles" / "hvd_horovod"


def _role() -> tuple[str, str, list[dict], str]:
    """The role's pinned version and sdist sha256, its cxx17 patches and its toolchain file's content."""
    import jinja2
    import yaml

    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    version = defaults["hvd_horovod_version"]
    sha256 = re.search(r"[0-9a-f]{64}", defaults["hvd_horovod_sdist_sha256"]).group(0)
    patches = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__hvd_horovod_patch_catalogue"]["cxx17"]
    task = next(t for t in yaml.safe_load((ROLE / "tasks" / "build.yml").read_text())
                if "ansible.builtin.copy" in t and "toolchain" in t["name"])
    toolchain = jinja2.Environment(trim_blocks=True).from_string(task["ansible.builtin.copy"]["content"]).render()
    return version, sha256, patches, toolchain


def _build_env(jobs: int) -> dict[str, str]:
    from ansible_collections.hvd.cluster.plugins.filter.hvd_horovod import hvd_horovod_build_vars

    return {k: str(v) for k, v in hvd_horovod_build_vars(["pytorch"], ["mpi", "gloo"], "gloo", "none", jobs).items()}


def main() -> None:
    args = arguments(__doc__)
    rounds = int(args[0]) if args else 2
    missing = [tool for tool in ("g++", "cmake", "mpicc") if not shutil.which(tool)]
    if missing:
        sys.exit(f"missing here: {', '.join(missing)} (apt-get install g++ cmake libopenmpi-dev python3-venv python3-dev)")
    version, sha256, patches, toolchain = _role()
    work = Path(tempfile.mkdtemp(prefix="hvd-bench-horovod-"))
    try:
        venv = work / "venv"
        subprocess.run(["python3", "-m", "venv", str(venv)], check=True)  # the CPython of this machine, not .venv's
        pip = [str(venv / "bin" / "pip"), "-q", "--disable-pip-version-check"]
        subprocess.run(pip + ["install", TORCH, "packaging", "wheel", "setuptools", "pyyaml", "cloudpickle",
                              "psutil"], check=True)
        subprocess.run(pip + ["download", "--no-deps", "--no-binary", ":all:", "-d", str(work),
                              f"horovod=={version}"], check=True)
        sdist = work / f"horovod-{version}.tar.gz"
        if hashlib.sha256(sdist.read_bytes()).hexdigest() != sha256:
            sys.exit(f"{sdist.name}: not the sha256 the role pins ({sha256})")
        with tarfile.open(sdist) as archive:
            archive.extractall(work, filter="data")
        src = work / f"horovod-{version}"
        for patch in patches:
            path = src / patch["path"]
            path.write_text(re.sub(patch["regexp"], patch["replace"], path.read_text()))
        (work / "no-debug-info.cmake").write_text(toolchain)
        torch = subprocess.run([str(venv / "bin" / "python"), "-c", "import torch; print(torch.__version__)"],
                               capture_output=True, text=True).stdout.strip()
        jobs = os.cpu_count() or 2
        print(f"Horovod {version}, PyTorch {torch}, make -j{jobs}, load {os.getloadavg()[0]:.1f} at the start")
        print("| build | wall | wheel | PyTorch library |")
        print("| --- | --- | --- | --- |")
        for _ in range(rounds):
            for debug in (True, False):
                env = {**os.environ, **_build_env(jobs)}
                env.pop("CMAKE_TOOLCHAIN_FILE", None)
                if not debug:
                    env["CMAKE_TOOLCHAIN_FILE"] = str(work / "no-debug-info.cmake")
                shutil.rmtree(src / "build", ignore_errors=True)
                out = work / ("debug" if debug else "plain")
                shutil.rmtree(out, ignore_errors=True)
                start = time.monotonic()
                done = subprocess.run(pip + ["wheel", "--no-deps", "--no-build-isolation", "-w", str(out), str(src)],
                                      env=env, capture_output=True, text=True)
                took = time.monotonic() - start
                if done.returncode != 0:
                    sys.exit((done.stdout + done.stderr)[-3000:])
                wheel = next(out.glob("horovod-*.whl"))
                with zipfile.ZipFile(wheel) as archive:
                    lib = next(i.file_size for i in archive.infolist() if "torch/mpi_lib_v2" in i.filename)
                label = "-O3 -g (Horovod's own)" if debug else "-O3 (hvd_horovod_debug_info: false)"
                print(f"| {label} | {took:.1f} s | {wheel.stat().st_size / 2**20:.2f} MiB | {lib / 2**20:.1f} MiB |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
