"""Benchmark (prints figures, asserts nothing): DKMS's build of the NVIDIA 535 kernel modules on this machine, the
figure issue 24 asks for.

One node of the kernel image (hvdcluster/node:debian12-kernel: Debian 12's linux-image-amd64 and its headers), the
node's own apt sources with contrib and non-free added, Debian's nvidia-kernel-dkms 535 installed (its postinst runs
the first build, timed with the install), then the same module rebuilt from scratch for the installed kernel three
times (`dkms build --force`), as hvd_nvidia_driver's repair runs it for a kernel that lacks the modules. Nothing is
loaded (a container shares this machine's kernel).

Run from the checkout after tests/setup.sh:  .venv/bin/python bench/dkms.py [ROUNDS]
"""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchargs import arguments  # noqa: E402
from kernel_node import APT, kernel_node, timed  # noqa: E402


def main() -> None:
    arguments(__doc__)  # -h/--help: the docstring, before any lab is started
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    with kernel_node("bdkms", []) as lab:
        kernel = lab.kernels(1)[0]
        install = timed(lab, APT + "-qq 'nvidia-kernel-dkms=535.*' >/dev/null")
        status = lab.exec(1, "dkms", "status").stdout
        found = re.search(r"^(nvidia(?:-current)?)/([\d.]+), ", status, re.M)
        if not found:
            sys.exit(f"no NVIDIA module in dkms status:\n{status}")
        module = f"{found.group(1)}/{found.group(2)}"
        builds = [timed(lab, f"dkms build --force -k {kernel} {module} >/dev/null") for _ in range(rounds)]
        print(f"DKMS build of {module} for {kernel} on this machine ({len(builds)} rounds)")
        print(f"  apt install of nvidia-kernel-dkms with its first build: {install:6.1f} s")
        print(f"  dkms build --force: best {min(builds):6.1f} s, median {statistics.median(builds):6.1f} s")


if __name__ == "__main__":
    main()
