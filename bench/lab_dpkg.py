"""Benchmark (prints figures, asserts nothing): what dpkg's fsync per file costs the lab's nodes. The largest apt run
of the tier (Debian's CUDA toolkit, `nvidia-cuda-toolkit`, what the golden image's first `up` installs through
hvd_gpu_component) in a fresh node, with dpkg as Debian's own container images set it (`force-unsafe-io`, the node
image's /etc/dpkg/dpkg.cfg.d/docker-apt-speedup) and with that file removed (dpkg's default: every unpacked file
synced before it is renamed into place), in turns: the wall time of the install.

One node of the kernel image (hvdcluster/node:debian12-kernel, the golden suite's), the node's own apt sources with
contrib and non-free added, the packages downloaded before the clock starts (the network is not what is measured).

Run from the checkout after tests/setup.sh:  .venv/bin/python bench/lab_dpkg.py [ROUNDS]   (default 2 each)
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchargs import arguments  # noqa: E402
from tests.lab.cluster import Lab  # noqa: E402
from tests.lab.images import build_kernel_image  # noqa: E402

SOURCES = "/etc/apt/sources.list.d/debian.sources"
SPEEDUP = "/etc/dpkg/dpkg.cfg.d/docker-apt-speedup"
APT = "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "
PACKAGES = "nvidia-cuda-toolkit"
# (name, steps before the clock)
WAYS = (("fsync", [f"rm {SPEEDUP}"]), ("unsafe-io", [f"grep -qx force-unsafe-io {SPEEDUP}"]))


def run_way(setup: list[str]) -> float:
    with tempfile.TemporaryDirectory() as scratch:
        lab = Lab("bdpkg", 1, Path(scratch), image=build_kernel_image())
        lab.up()
        try:
            prepare = [f"sed -i 's/^Components: main$/Components: main contrib non-free non-free-firmware/' {SOURCES}",
                       "apt-get update -qq", APT + "-d -qq " + PACKAGES + " >/dev/null", *setup]
            for script in prepare:
                done = lab.exec(1, "sh", "-c", script)
                if done.returncode != 0:
                    sys.exit(f"failed: {script}\n{(done.stdout + done.stderr)[-3000:]}")
            start = time.monotonic()
            done = lab.exec(1, "sh", "-c", APT + PACKAGES + " 2>&1")
            if done.returncode != 0:
                sys.exit(f"failed: the install\n{done.stdout[-3000:]}")
            return time.monotonic() - start
        finally:
            lab.down()


def main() -> None:
    arguments(__doc__)  # -h/--help: the docstring, before any lab is started
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    print(f"apt-get install {PACKAGES} in a fresh node, downloaded first, {rounds} round(s) each, in turns")
    for _ in range(rounds):
        for name, setup in WAYS:
            print(f"  {name:9s} {run_way(setup):7.1f} s", flush=True)


if __name__ == "__main__":
    main()
