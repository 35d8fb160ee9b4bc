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
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchargs import arguments  # noqa: E402
from tests.lab.cluster import Lab  # noqa: E402
from tests.lab.images import build_kernel_image  # noqa: E402

SOURCES = "/etc/apt/sources.list.d/debian.sources"


def _run(lab: Lab, script: str) -> float:
    start = time.monotonic()
    done = lab.exec(1, "sh", "-c", script)
    took = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {script}\n{(done.stdout + done.stderr)[-3000:]}")
    return took


def main() -> None:
    arguments(__doc__)  # -h/--help: the docstring, before any lab is started
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    with tempfile.TemporaryDirectory() as scratch:
        lab = Lab("bdkms", 1, Path(scratch), image=build_kernel_image())
        lab.up()
        try:
            kernel = lab.kernels(1)[0]
            _run(lab, f"sed -i 's/^Components: main$/Components: main contrib non-free non-free-firmware/' {SOURCES} "
                      "&& apt-get update -qq")
            install = _run(lab, "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "
                                "'nvidia-kernel-dkms=535.*' >/dev/null")
            status = lab.exec(1, "dkms", "status").stdout
            found = re.search(r"^(nvidia(?:-current)?)/([\d.]+), ", status, re.M)
            if not found:
                sys.exit(f"no NVIDIA module in dkms status:\n{status}")
            module = f"{found.group(1)}/{found.group(2)}"
            builds = [_run(lab, f"dkms build --force -k {kernel} {module} >/dev/null") for _ in range(rounds)]
            print(f"DKMS build of {module} for {kernel} on this machine ({len(builds)} rounds)")
            print(f"  apt install of nvidia-kernel-dkms with its first build: {install:6.1f} s")
            print(f"  dkms build --force: best {min(builds):6.1f} s, median {statistics.median(builds):6.1f} s")
        finally:
            lab.down()


if __name__ == "__main__":
    main()
