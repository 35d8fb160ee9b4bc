"""Benchmark (prints figures, asserts nothing): `hvdcluster health --quick` on 4 container nodes (issue 25's target:
<= 5 s), and `health` without --quick, best and median of REPEAT runs.

The nodes are bare (sshd and python3; no GPU here, so each node's GPU checks are skipped with a note): the figure is
the read itself, one read-only module call per node in check mode, plus the controller's judging. `hvdcluster
inventory` renders the inventory first; no node is converged.

Run from the checkout after tests/setup.sh:  .venv/bin/python bench/health.py [REPEAT]   (default 5)
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchargs import arguments  # noqa: E402
from tests.lab.cluster import Lab  # noqa: E402
from tests.lab.images import build_image  # noqa: E402

HVDCLUSTER = str(Path(sys.executable).parent / "hvdcluster")


def run(lab: Lab, *args: str) -> tuple[float, int]:
    start = time.monotonic()
    proc = subprocess.run([HVDCLUSTER, *args], cwd=lab.workdir, env=os.environ, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        print(proc.stdout[-2000:], proc.stderr[-2000:])
    return time.monotonic() - start, proc.returncode


def main() -> None:
    arguments(__doc__)  # -h/--help: the docstring, before any lab is started
    build_image()
    repeat = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    with tempfile.TemporaryDirectory(prefix="hvd-bench-") as tmp:
        lab = Lab("benchhealth", 4, Path(tmp))
        lab.up()
        try:
            seconds, rc = run(lab, "inventory", "hosts.yaml")
            print(f"inventory: {seconds:.1f} s (rc {rc})")
            run(lab, "health", "hosts.yaml", "--quick")  # the first contact records the host keys
            for args in (["--quick"], []):
                times = []
                for _ in range(repeat):
                    seconds, rc = run(lab, "health", "hosts.yaml", *args)
                    times.append(seconds)
                name = " ".join(["health", *args])
                print(f"{name} on 4 nodes (rc {rc}): best {min(times):.2f} s, median {statistics.median(times):.2f} s "
                      f"of {repeat}")
        finally:
            lab.down()


if __name__ == "__main__":
    main()
