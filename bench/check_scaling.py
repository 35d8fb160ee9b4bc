"""Benchmark (prints figures, asserts nothing): what `hvdcluster check` and a no-op `up` cost with one look per node.

  converge        4 nodes (the controller cache is used: the env and the wheel are built only when missing)
  check           --limit of 1, 2 and all 4 nodes, best of three each (target: 4 nodes <= 1.5x one node, <= 8 s)
  no-op up        the same 4 nodes, best and median of three (target for 3 nodes <= 10 s; before the fast
                  path a 3-node no-op up took ~26 s)
  no-op up --full the same 4 nodes converged role by role, once, for comparison

Run from the checkout after tests/setup.sh:  .venv/bin/python bench/check_scaling.py
"""

from __future__ import annotations

import json
import os
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
from tests.lab.stacks import cpu_stack  # noqa: E402

STACK = cpu_stack()
HVDCLUSTER = str(Path(sys.executable).parent / "hvdcluster")


def timed(lab: Lab, *args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.monotonic()
    proc = subprocess.run([HVDCLUSTER, *args], cwd=lab.workdir, env=os.environ, capture_output=True, text=True)
    return time.monotonic() - start, proc


def must(lab: Lab, *args: str) -> tuple[float, dict]:
    seconds, proc = timed(lab, *args, "--json")
    if proc.returncode != 0:
        sys.exit(f"hvdcluster {' '.join(args)} failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
    return seconds, json.loads(proc.stdout)


def load() -> str:
    with open("/proc/loadavg") as handle:
        return handle.read().split()[0]


def main() -> None:
    arguments(__doc__)  # -h/--help: the docstring, before any lab is started
    build_image()
    with tempfile.TemporaryDirectory(prefix="hvd-bench-") as tmp:
        lab = Lab("benchc", 4, Path(tmp), slots=1, stack=STACK)
        lab.up()
        try:
            seconds, _ = must(lab, "up", "hosts.yaml")
            print(f"converge, 4 nodes: {seconds:.1f} s")
            checks = {}
            for limit in ("node1", "node1,node2", "all"):
                runs = [must(lab, "check", "hosts.yaml", "--limit", limit) for _ in range(3)]
                checks[limit] = min(s for s, _ in runs)
                module = max(runs[0][1].get("seconds", 0), 0)
                print(f"check --limit {limit:<12} best {checks[limit]:5.1f} s (reading {module:.1f} s; load {load()})")
            print(f"check: 4 nodes / 1 node = {checks['all'] / checks['node1']:.2f} (target <= 1.5), "
                  f"4 nodes {checks['all']:.1f} s (target <= 8 s)")
            noops = []
            for _ in range(3):
                seconds, doc = must(lab, "up", "hosts.yaml")
                noops.append((seconds, sum(h["changed"] for h in doc["hosts"].values()),
                              doc.get("fast_path", {}).get("in_sync")))
            full, doc = must(lab, "up", "hosts.yaml", "--full")
        finally:
            lab.down()
    times = sorted(s for s, _, _ in noops)
    print(f"no-op up, 4 nodes: best {times[0]:.1f} s, median {times[1]:.1f} s (target for 3 nodes <= 10 s); "
          f"changed={[c for _, c, _ in noops]}, in sync={noops[0][2]}")
    print(f"no-op up --full, 4 nodes: {full:.1f} s (every role on every node; changed="
          f"{sum(h['changed'] for h in doc['hosts'].values())})")


if __name__ == "__main__":
    main()
