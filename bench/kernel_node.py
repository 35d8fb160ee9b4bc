"""What the driver and dpkg benchmarks share (not a benchmark itself): one fresh node of the kernel image
(hvdcluster/node:debian12-kernel) with the node's own apt sources opened to contrib and non-free, the given packages
(if any) downloaded before any clock starts, and a shell step that stops the benchmark, saying what failed, where one fails."""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.lab.cluster import Lab  # noqa: E402
from tests.lab.images import build_kernel_image  # noqa: E402

SOURCES = "/etc/apt/sources.list.d/debian.sources"
APT = "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "


def quoted(packages: list[str]) -> str:
    return " ".join(f"'{p}'" for p in packages)


def sh(lab: Lab, script: str) -> str:
    """``script`` run by the node's shell, its standard error folded into the output returned; a failure ends the
    benchmark with the script and the output's last lines."""
    done = lab.exec(1, "sh", "-c", script + " 2>&1")
    if done.returncode != 0:
        sys.exit(f"failed: {script}\n{done.stdout[-3000:]}")
    return done.stdout


def timed(lab: Lab, script: str) -> float:
    """The wall seconds ``sh`` took to run ``script``."""
    start = time.monotonic()
    sh(lab, script)
    return time.monotonic() - start


@contextmanager
def kernel_node(name: str, download: list[str]) -> Iterator[Lab]:
    """A one-node lab named ``name`` of the kernel image, non-free open and ``download`` (none: nothing) in apt's
    cache; removed after."""
    with tempfile.TemporaryDirectory() as scratch:
        lab = Lab(name, 1, Path(scratch), image=build_kernel_image())
        lab.up()
        try:
            sh(lab, f"sed -i 's/^Components: main$/Components: main contrib non-free non-free-firmware/' {SOURCES}")
            sh(lab, "apt-get update -qq")
            if download:
                sh(lab, APT + "-d -qq " + quoted(download) + " >/dev/null")
            yield lab
        finally:
            lab.down()
