"""Benchmark (prints figures, asserts nothing): the CPU one post-flight allreduce costs on the lab, by its settings.

The full tier is CPU-bound on this 2-core machine and every converge that changes what the allreduce depends on proves
the cluster again (hvd_verify: one `horovodrun` per controller, every rank importing the framework), so its CPU is
paid tens of times per tier. This converges 2 nodes x 2 slots (the packaged node image, root, the env and the wheel
from the operator's controller cache when it holds them), then runs hvd_verify's own command on node1, as the role
does, REPEAT times per setting, and prints the wall time and the CPU of both containers (cgroup accounting):

  payload      hvd_verify_throughput_bytes: 16 MiB (the default, which the tier keeps) and 1 MiB
  yield        Open MPI's mpi_yield_when_idle off (its default) and on (what the tier's labs set: their nodes share
               this machine's cores, an oversubscribed host in Open MPI's terms; tests/cluster/conftest.py)

Run from the checkout after tests/setup.sh:  .venv/bin/python bench/allreduce_cpu.py [REPEAT]   (default 2)
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.cpu_split import node_cpu_seconds  # noqa: E402
from benchargs import arguments  # noqa: E402
from hvdcluster.paths import controller_cache  # noqa: E402
from tests.lab.cluster import Lab  # noqa: E402
from tests.lab.images import build_packaged_image  # noqa: E402
from tests.lab.stacks import cpu_stack  # noqa: E402

ENV = "/opt/hvd/env"


def allreduce(lab: Lab, controller: str, size: int, spin: bool) -> tuple[float, float]:
    """hvd_verify's command (roles/hvd_verify/tasks/main.yml) on node1: wall and CPU seconds of both nodes."""
    nodes = [lab.container(i) for i in range(1, lab.nodes + 1)]
    command = (f"cd /tmp && OMPI_MCA_mpi_yield_when_idle={0 if spin else 1} OMPI_ALLOW_RUN_AS_ROOT=1 "
               f"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 {ENV}/bin/horovodrun -np 4 -H node1:2,node2:2 "
               f"--network-interfaces eth0 --{controller} {ENV}/bin/python -I {ENV}/libexec/hvdcluster/allreduce.py "
               f"{size} 5")
    before = [node_cpu_seconds(n) for n in nodes]
    start = time.monotonic()
    proc = subprocess.run(["docker", "exec", nodes[0], "bash", "-lc", command], capture_output=True, text=True)
    wall = time.monotonic() - start
    if proc.returncode != 0 or "hvd-verify-throughput" not in proc.stdout:
        raise SystemExit(f"the allreduce failed (rc {proc.returncode}): {(proc.stdout + proc.stderr)[-3000:]}")
    return wall, sum(node_cpu_seconds(n) - b for n, b in zip(nodes, before))


def main() -> None:
    arguments(__doc__)  # -h/--help: the docstring, before any lab is started
    repeat = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    image = build_packaged_image()
    with tempfile.TemporaryDirectory(prefix="hvd-bench-") as tmp:
        lab = Lab("benchar", 2, Path(tmp), slots=2, image=image,
                  stack=cpu_stack())
        lab.up()
        try:
            wall, _ = lab.timed_up(controller_cache())
            print(f"converged 2 nodes x 2 slots in {wall:.1f} s", flush=True)
            for controller, spins in (("gloo", (True,)), ("mpi", (True, False))):
                for size in (16 << 20, 1 << 20):
                    for spin in spins:
                        runs = [allreduce(lab, controller, size, spin) for _ in range(repeat)]
                        label = f"{controller} {size >> 20:2d} MiB" + ("" if controller == "gloo" else
                                                                        f", yield {'off' if spin else 'on '}")
                        print(f"{label:24s} wall median {statistics.median(w for w, _ in runs):5.2f} s, "
                              f"CPU median {statistics.median(c for _, c in runs):5.2f} s", flush=True)
        finally:
            lab.down()


if __name__ == "__main__":
    main()
