"""Benchmark (prints figures, asserts nothing): a no-op `up --full` (every role on every node, changed=0) by cluster
size, with where its CPU goes (issue 54's targets: 3 nodes <= 12 s, 16 nodes <= 60 s, the controller's CPU per added
node <= 1 s).

  per size     a lab of N nodes x 1 slot, converged (the controller cache is used: the env and the wheel are built
               only when missing), then `up --full` REPEAT times: wall time, the controller's CPU (hvdcluster,
               ansible-playbook, its workers, the ssh clients: this process's children) and the nodes' CPU (each
               container's cgroup), changed per run
  then         the controller's CPU per node added between the smallest and the largest size
  AGAINST      a git revision: each lab's runs alternate between the checkout and that revision's hvdcluster and
               Ansible content (a temporary git worktree put first on PYTHONPATH), REPEAT runs each on the same lab,
               so a change is read against its base where the lab's own drift cannot hide it

Run from the checkout after tests/setup.sh:  .venv/bin/python bench/full_scaling.py [SIZES] [REPEAT] [AGAINST]
(SIZES comma-separated, default 3,16; REPEAT default 2). One lab at a time: the 16 nodes are all on this machine.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from against import contents, environment  # noqa: E402
from benchargs import arguments  # noqa: E402
from cpu_split import node_cpu_seconds  # noqa: E402
from hvdcluster.paths import controller_cache  # noqa: E402
from tests.lab.cluster import Lab  # noqa: E402
from tests.lab.images import build_image  # noqa: E402
from tests.lab.stacks import cpu_stack  # noqa: E402

HVDCLUSTER = str(Path(sys.executable).parent / "hvdcluster")


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def full(lab: Lab, content: Path | None = None) -> tuple[float, float, float, int]:
    """One `up --full`: wall seconds, controller CPU, the nodes' CPU together, changed over every node. ``content``:
    another checkout whose hvdcluster and collection run instead of this one's."""
    nodes = [lab.container(i) for i in range(1, lab.nodes + 1)]
    env = environment(content)
    before_nodes, before = sum(map(node_cpu_seconds, nodes)), children_cpu()
    start = time.monotonic()
    proc = subprocess.run([HVDCLUSTER, "up", "hosts.yaml", "--full", "--json"], cwd=lab.workdir, env=env,
                          capture_output=True, text=True)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"up --full on {lab.nodes} nodes failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
    changed = sum(h["changed"] for h in json.loads(proc.stdout)["hosts"].values())
    return wall, children_cpu() - before, sum(map(node_cpu_seconds, nodes)) - before_nodes, changed


def main() -> None:
    args = arguments(__doc__)
    sizes = [int(n) for n in (args[0] if args else "3,16").split(",")]
    repeat = int(args[1]) if len(args) > 1 else 2
    against = args[2] if len(args) > 2 else None
    build_image()
    figures: dict[str, dict[int, tuple[float, float, float, int]]] = {}
    with contents(against) as runs_of:
        for size in sizes:
            with tempfile.TemporaryDirectory(prefix="hvd-bench-") as tmp:
                lab = Lab(f"benchf{size}", size, Path(tmp), slots=1, stack=cpu_stack())
                lab.up()
                try:
                    seconds, _ = lab.timed_up(controller_cache())
                    print(f"{size} nodes: converged in {seconds:.1f} s")
                    runs: dict[str, list[tuple[float, float, float, int]]] = {name: [] for name in runs_of}
                    for _ in range(repeat):
                        for name, content in runs_of.items():
                            runs[name].append(full(lab, content))
                finally:
                    lab.down()
            for name, done in runs.items():
                for wall, ctl, nodes, changed in done:
                    print(f"{size} nodes [{name}]: up --full {wall:.1f} s, controller CPU {ctl:.1f} s, nodes' CPU "
                          f"{nodes:.1f} s ({nodes / size:.1f} s each), changed={changed}")
                figures.setdefault(name, {})[size] = min(done)
    for name, by_size in figures.items():
        if len(by_size) > 1:
            small, large = min(by_size), max(by_size)
            per_node = (by_size[large][1] - by_size[small][1]) / (large - small)
            print(f"[{name}] controller CPU per added node ({small} -> {large}, the best runs): {per_node:.2f} s "
                  f"(target <= 1 s); wall {by_size[small][0]:.1f} -> {by_size[large][0]:.1f} s (targets 12 s and 60 s)")


if __name__ == "__main__":
    main()
