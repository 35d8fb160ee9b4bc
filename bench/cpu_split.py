"""Benchmark (prints figures, asserts nothing): where the CPU time of an `up` goes, the controller against the nodes.

On this 2-core machine the tiers and the roll are CPU-bound, so a second saved anywhere is worth the same; this says
which side to cut. The controller side is the `hvdcluster` process tree (ansible-playbook, its forked workers, the ssh
clients), read from this process's children's rusage; each node is its container's CPU accounting (cgroup v1
`cpuacct.usage` or v2 `cpu.stat`).

  up           3 nodes of the golden image, first converge (the env and the wheel from the controller cache when it
               holds them: built otherwise, and that build is then in the figure)
  up           no-op: the fast path (one read of every node)
  up --full    no-op: every role on every node, changed=0 (REPEAT times)

Run from the checkout after tests/setup.sh:  .venv/bin/python bench/cpu_split.py [REPEAT]   (default 3)
"""

from __future__ import annotations

import resource
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchargs import arguments  # noqa: E402
from hvdcluster.paths import controller_cache  # noqa: E402
from tests.lab.cluster import Lab  # noqa: E402
from tests.lab.images import PACKAGED_IMAGE, build_packaged_image, docker  # noqa: E402
from tests.lab.stacks import cpu_stack  # noqa: E402


def node_cpu_seconds(container: str) -> float:
    """The container's CPU time so far (user + system), from its cgroup."""
    cid = docker("inspect", "-f", "{{.Id}}", container)
    v1 = Path(f"/sys/fs/cgroup/cpuacct/docker/{cid}/cpuacct.usage")
    if v1.exists():
        return int(v1.read_text()) / 1e9
    for v2 in (Path(f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/cpu.stat"),
               Path(f"/sys/fs/cgroup/docker/{cid}/cpu.stat")):
        if v2.exists():
            usage = dict(line.split() for line in v2.read_text().splitlines())
            return int(usage["usage_usec"]) / 1e6
    raise SystemExit(f"no CPU accounting found for {container} (cgroup v1 cpuacct or v2 cpu.stat)")


def measured(lab: Lab, *args: str) -> str:
    nodes = [lab.container(i) for i in range(1, lab.nodes + 1)]
    before = [node_cpu_seconds(n) for n in nodes]
    start_usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall, _ = lab.timed_up(controller_cache(), *args)  # the operator's controller cache; a failed run exits
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    spent = [node_cpu_seconds(n) - b for n, b in zip(nodes, before)]
    controller = (usage.ru_utime - start_usage.ru_utime) + (usage.ru_stime - start_usage.ru_stime)
    total = controller + sum(spent)
    return (f"wall {wall:6.1f} s; CPU {total:6.1f} s: controller {controller:5.1f} s "
            f"({controller / total:.0%}), nodes {sum(spent):6.1f} s ({', '.join(f'{s:.1f}' for s in spent)})")


def main() -> None:
    arguments(__doc__)  # -h/--help: the docstring, before any lab is started
    repeat = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    image = build_packaged_image()
    with tempfile.TemporaryDirectory(prefix="hvd-bench-") as tmp:
        lab = Lab("benchcpu", 3, Path(tmp), slots=1, image=image,
                  stack=cpu_stack())
        lab.up()
        try:
            print(f"up, first converge, 3 nodes of {PACKAGED_IMAGE}: {measured(lab)}", flush=True)
            print(f"up, no-op (fast path):             {measured(lab)}", flush=True)
            for _ in range(repeat):
                print(f"up --full, no-op:                  {measured(lab, '--full')}", flush=True)
        finally:
            lab.down()


if __name__ == "__main__":
    main()
