"""Benchmark (prints figures, asserts nothing): a conda env made as hvd_pyenv makes it, against a venv, same packages.

  channel, cold      tests/conda_channel.py building the local channel (CPython from Debian's source tarball, pip,
                     hvd-probe) with rattler-build: the figure its last cold build recorded
  channel, cached    the same call when the channel is in the test cache
  venv, cold         python3 -m venv + pip install of the packages (this machine's wheelhouse offers torch)
  conda, cold        rattler solve + install from the local channel (python, pip, hvd-probe), then the same pip
                     install into it; conda-pack's check of the result
  packed             each env packed as hvd_pyenv packs it (tar --zstd), its size

Both run on this machine (not in containers), in fresh folders, with the same pip and the same wheelhouse.
Run from the checkout after tests/setup.sh:  .venv/bin/python bench/conda_env.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchargs import arguments  # noqa: E402
from tests.conda_channel import build  # noqa: E402
from tests.lab.stacks import BASE_PACKAGES  # noqa: E402

PACKAGES = BASE_PACKAGES
TOOLS = ["py-rattler==0.28.0", "conda-pack==0.9.2", "zstandard==0.25.0"]


def timed(argv: list[str], **kwargs) -> float:
    started = time.monotonic()
    subprocess.run(argv, check=True, capture_output=True, **kwargs)
    return time.monotonic() - started


def packed_mib(prefix: Path, out: Path) -> float:
    subprocess.run(["tar", "-C", str(prefix), "--zstd", "-cf", str(out), "."], check=True)
    return out.stat().st_size / 2**20


def main() -> None:
    arguments(__doc__)  # -h/--help: the docstring, before any lab is started
    started = time.monotonic()
    channel = build()
    cached = time.monotonic() - started
    cold = json.loads((channel / ".complete").read_text()).get("seconds")
    print(f"channel: cold build {cold} s (recorded when it was built), cached {cached:.2f} s ({channel})")
    links = ["--find-links", os.environ["PIP_FIND_LINKS"]] if os.environ.get("PIP_FIND_LINKS") else []
    with tempfile.TemporaryDirectory(prefix="hvd-bench-conda-") as tmp:
        work = Path(tmp)
        venv = work / "venv"
        seconds = timed([sys.executable, "-m", "venv", str(venv)])
        seconds += timed([str(venv / "bin" / "pip"), "install", "-q", *links, *PACKAGES])
        print(f"venv:  cold {seconds:6.1f} s, packed {packed_mib(venv, work / 'venv.tar.zst'):7.1f} MiB")

        tools = work / "tools"
        setup = timed([sys.executable, "-m", "venv", str(tools)])
        setup += timed([str(tools / "bin" / "pip"), "install", "-q", *TOOLS])
        env = work / "env"
        request = {"prefix": str(env), "channels": [channel.as_uri()], "specs": ["hvd-probe"], "python": "3.11",
                   "cache": str(work / "pkgs"), "lock": str(work / "lock.txt"), "report": str(work / "report.json")}
        (work / "conda.json").write_text(json.dumps(request))
        solve = timed([str(tools / "bin" / "python"), "-I", str(ROOT / "roles/hvd_pyenv/files/conda_env.py"),
                       str(work / "conda.json")])
        pip = timed([str(env / "bin" / "pip"), "install", "-q", *links, *PACKAGES])
        check = timed([str(tools / "bin" / "conda-pack"), "-p", str(env), "-d", str(env), "-o",
                       str(work / "check.tar"), "--format", "tar", "-q"])
        (work / "check.tar").unlink()
        total = solve + pip + check
        print(f"conda: cold {total:6.1f} s (solve+install {solve:.1f} s, pip {pip:.1f} s, conda-pack check "
              f"{check:.1f} s), packed {packed_mib(env, work / 'env.tar.zst'):7.1f} MiB; tools venv once {setup:.1f} s")


if __name__ == "__main__":
    main()
