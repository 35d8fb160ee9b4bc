"""Benchmark (prints figures, asserts nothing): the controller's copy of an artifact to a node over SSH, with and
without OpenSSH's -C (zlib) compression, which Ansible's default `ssh_args` turn on and ansible.cfg turns off.

The artifact is the largest packed env in the controller cache (a zstd archive, as every artifact hvdcluster sends
is), else 200 MiB of random bytes. One bare node container (tests/lab); each way three times, `scp` as Ansible's
file transfer runs it, wall time and the ssh client's CPU time.

Run from the checkout after tests/setup.sh:  .venv/bin/python bench/ssh_copy.py
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchargs import arguments  # noqa: E402
from hvdcluster import paths  # noqa: E402
from tests.lab.cluster import Lab  # noqa: E402
from tests.lab.images import build_image  # noqa: E402


def _artifact(scratch: Path) -> Path:
    envs = sorted((paths.controller_cache() / "envs").glob("env-*.tar.zst"), key=lambda p: p.stat().st_size)
    if envs:
        return envs[-1]
    made = scratch / "random.bin"
    made.write_bytes(os.urandom(200 * 2**20))
    return made


def _copy(lab: Lab, artifact: Path, compress: bool) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    subprocess.run(["scp", "-q", *(["-C"] if compress else []), "-o", "BatchMode=yes", "-o",
                    "StrictHostKeyChecking=accept-new", "-o", f"UserKnownHostsFile={lab.workdir / 'known_hosts'}",
                    "-i", str(lab.key), "-P", str(lab.port(1)), str(artifact), "root@127.0.0.1:/tmp/artifact"],
                   check=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    lab.exec(1, "rm", "-f", "/tmp/artifact")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    arguments(__doc__)  # -h/--help: the docstring, before any lab is started
    build_image()
    with tempfile.TemporaryDirectory(prefix="hvd-bench-ssh-") as tmp:
        scratch = Path(tmp)
        artifact = _artifact(scratch)
        lab = Lab("benchssh", 1, scratch / "lab", stack={})
        lab.up()
        try:
            size = artifact.stat().st_size / 1e6
            print(f"artifact: {artifact.name}, {size:.1f} MB")
            print("| ssh | wall (best of 3) | MB/s | ssh client CPU |")
            print("| --- | --- | --- | --- |")
            for compress in (True, False):
                runs = [_copy(lab, artifact, compress) for _ in range(3)]
                wall, cpu = min(runs)
                print(f"| {'-C' if compress else 'no -C'} | {wall:.2f} s | {size / wall:.0f} | {cpu:.2f} s |")
        finally:
            lab.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
