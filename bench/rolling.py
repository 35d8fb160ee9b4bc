"""Benchmark (prints figures, asserts nothing): what a rolling change costs over a plain `up` on 3 nodes, no job
running (issue 24's target: <= 1.3x).

  converge     3 nodes (the controller cache is used: the env and the wheel are built only when missing)
  then, three times each, on the converged cluster:
    up --full                          every node, every role, one run (the post-flight over the 3 nodes)
    up --rolling --batch 1             one node at a time: 3 runs, each proven with the nodes done before it
    up --rolling --batch 2             the first two, then the third: 2 runs
    up --rolling --batch 100%          the 3 nodes in one batch: 1 run, plus the looks for jobs and the marks

Run from the checkout after tests/setup.sh:  .venv/bin/python bench/rolling.py [REPEAT]   (default 3)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.lab import Lab, build_image  # noqa: E402

STACK = {"python": {"packages": ["torch==2.13.0"]}, "horovod": {"frameworks": ["pytorch"]}}
HVDCLUSTER = str(Path(sys.executable).parent / "hvdcluster")
RUNS = {
    "up --full": ["--full"],
    "up --rolling --batch 1": ["--rolling", "--batch", "1", "--poll", "1"],
    "up --rolling --batch 2": ["--rolling", "--batch", "2", "--poll", "1"],
    "up --rolling --batch 100%": ["--rolling", "--batch", "100%", "--poll", "1"],
}


def timed(lab: Lab, *args: str) -> tuple[float, int]:
    start = time.monotonic()
    proc = subprocess.run([HVDCLUSTER, "up", "hosts.yaml", *args], cwd=lab.workdir, env=os.environ,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-3000:])
    return time.monotonic() - start, proc.returncode


def main() -> None:
    build_image()
    with tempfile.TemporaryDirectory(prefix="hvd-bench-") as tmp:
        lab = Lab("benchroll", 3, Path(tmp), slots=1, stack=STACK)
        lab.up()
        try:
            seconds, rc = timed(lab)
            print(f"converge, 3 nodes: {seconds:.1f} s (rc {rc})")
            best = {}
            repeat = int(sys.argv[1]) if len(sys.argv) > 1 else 3
            for _ in range(repeat):
                for name, args in RUNS.items():
                    seconds, rc = timed(lab, *args)
                    best[name] = min(best.get(name, seconds), seconds)
                    print(f"  {name}: {seconds:.1f} s (rc {rc})")
            base = best["up --full"]
            for name, seconds in best.items():
                print(f"{name}: best of {repeat} {seconds:.1f} s = {seconds / base:.2f}x up --full")
        finally:
            lab.down()


if __name__ == "__main__":
    main()
