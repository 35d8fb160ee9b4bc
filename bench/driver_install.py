"""Benchmark (prints figures, asserts nothing): the NVIDIA driver's first install in an image being built, as
hvd_nvidia_driver ran it before (Debian's 535 kernel packages in one apt run, nvidia-persistenced in a second, then
`update-initramfs -u` for the nouveau blacklist written after them; the lab's kernel image then had no zstd, so every
initramfs was gzip's) and as it runs it now (the blacklist first, the packages and nvidia-persistenced in one apt run,
no initramfs built again; zstd there, as initramfs-tools recommends), in turns, each in a fresh node: the wall time
and how many times an initramfs was built.

One node of the kernel image (hvdcluster/node:debian12-kernel), the node's own apt sources with contrib and non-free
added, the packages downloaded before the clock starts (the network is not what is measured). DKMS really builds the
modules in both (about two thirds of either figure). Nothing is loaded (a container shares this machine's kernel).

Run from the checkout after tests/setup.sh:  .venv/bin/python bench/driver_install.py [ROUNDS]   (default 1 each)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchargs import arguments  # noqa: E402
from kernel_node import APT, kernel_node, quoted, sh  # noqa: E402

# The role's package set for Debian's distro driver (roles/hvd_nvidia_driver/vars/main.yml), pinned as it pins them.
DRIVER = ["nvidia-kernel-dkms=535.*", "firmware-nvidia-gsp=535.*", "libcuda1=535.*", "libnvidia-ml1=535.*",
          "nvidia-smi=535.*"]
PERSISTENCED = ["nvidia-persistenced"]
BLACKLIST = ("printf '# hvdcluster bench\\nblacklist nouveau\\noptions nouveau modeset=0\\n' "
             "> /etc/modprobe.d/hvd-blacklist-nouveau.conf")
GENERATED = "update-initramfs: Generating"


# (name, steps before the clock, timed steps)
WAYS = (
    ("before", ["dpkg -r zstd >/dev/null"],
     [APT + quoted(DRIVER), APT + quoted(PERSISTENCED), BLACKLIST, "update-initramfs -u"]),
    ("after", [], [BLACKLIST, APT + quoted(DRIVER + PERSISTENCED)]),
)


def run_way(setup: list[str], steps: list[str]) -> tuple[float, int]:
    with kernel_node("bdrvi", DRIVER + PERSISTENCED) as lab:
        for script in setup:
            sh(lab, script)
        built, start = 0, time.monotonic()
        for script in steps:
            built += sh(lab, script).count(GENERATED)
        return time.monotonic() - start, built


def main() -> None:
    arguments(__doc__)  # -h/--help: the docstring, before any lab is started
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    print(f"The 535 driver's first install in a kernel-image node, {rounds} round(s) each, in turns")
    for _ in range(rounds):
        for name, setup, steps in WAYS:
            took, built = run_way(setup, steps)
            print(f"  {name:7s} {took:7.1f} s, initramfs built {built} times", flush=True)


if __name__ == "__main__":
    main()
