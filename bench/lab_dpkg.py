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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchargs import arguments  # noqa: E402
from kernel_node import APT, kernel_node, sh, timed  # noqa: E402

SPEEDUP = "/etc/dpkg/dpkg.cfg.d/docker-apt-speedup"
PACKAGES = "nvidia-cuda-toolkit"
# (name, steps before the clock)
WAYS = (("fsync", [f"rm {SPEEDUP}"]), ("unsafe-io", [f"grep -qx force-unsafe-io {SPEEDUP}"]))


def run_way(setup: list[str]) -> float:
    with kernel_node("bdpkg", [PACKAGES]) as lab:
        for script in setup:
            sh(lab, script)
        return timed(lab, APT + PACKAGES)


def main() -> None:
    arguments(__doc__)  # -h/--help: the docstring, before any lab is started
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    print(f"apt-get install {PACKAGES} in a fresh node, downloaded first, {rounds} round(s) each, in turns")
    for _ in range(rounds):
        for name, setup in WAYS:
            print(f"  {name:9s} {run_way(setup):7.1f} s", flush=True)


if __name__ == "__main__":
    main()
