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
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchargs import arguments  # noqa: E402
from tests.lab.cluster import Lab  # noqa: E402
from tests.lab.images import build_kernel_image  # noqa: E402

SOURCES = "/etc/apt/sources.list.d/debian.sources"
# The role's package set for Debian's distro driver (roles/hvd_nvidia_driver/vars/main.yml), pinned as it pins them.
DRIVER = ["nvidia-kernel-dkms=535.*", "firmware-nvidia-gsp=535.*", "libcuda1=535.*", "libnvidia-ml1=535.*",
          "nvidia-smi=535.*"]
PERSISTENCED = ["nvidia-persistenced"]
APT = "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "
BLACKLIST = ("printf '# hvdcluster bench\\nblacklist nouveau\\noptions nouveau modeset=0\\n' "
             "> /etc/modprobe.d/hvd-blacklist-nouveau.conf")
GENERATED = "update-initramfs: Generating"


def _quoted(packages: list[str]) -> str:
    return " ".join(f"'{p}'" for p in packages)


# (name, steps before the clock, timed steps)
WAYS = (
    ("before", ["dpkg -r zstd >/dev/null"],
     [APT + _quoted(DRIVER), APT + _quoted(PERSISTENCED), BLACKLIST, "update-initramfs -u"]),
    ("after", [], [BLACKLIST, APT + _quoted(DRIVER + PERSISTENCED)]),
)


def run_way(setup: list[str], steps: list[str]) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as scratch:
        lab = Lab("bdrvi", 1, Path(scratch), image=build_kernel_image())
        lab.up()
        try:
            prepare = [f"sed -i 's/^Components: main$/Components: main contrib non-free non-free-firmware/' {SOURCES}",
                       "apt-get update -qq", APT + "-d -qq " + _quoted(DRIVER + PERSISTENCED) + " >/dev/null", *setup]
            for script in prepare:
                done = lab.exec(1, "sh", "-c", script)
                if done.returncode != 0:
                    sys.exit(f"failed: {script}\n{(done.stdout + done.stderr)[-3000:]}")
            built, start = 0, time.monotonic()
            for script in steps:
                done = lab.exec(1, "sh", "-c", script + " 2>&1")
                if done.returncode != 0:
                    sys.exit(f"failed: {script}\n{done.stdout[-3000:]}")
                built += done.stdout.count(GENERATED)
            return time.monotonic() - start, built
        finally:
            lab.down()


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
