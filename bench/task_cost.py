"""Benchmark (prints figures, asserts nothing): what one task costs the controller for each host it runs on, by kind
of task (issue 54: which of a converged node's tasks are worth folding).

  lab          NODES bare container nodes (default 3), the inventory rendered by `hvdcluster inventory`, the host keys
               recorded by one `health --quick`; nothing converged
  plays        one `ansible-playbook` run a kind, from the checkout (its ansible.cfg: pipelining, ControlPersist, the
               prefork callback), each a ping (the connections opened) and then TASKS tasks of that kind on every
               node: none (the baseline); a `debug` skipped by its `when`; a `set_fact`; `hvd_read` (one of our
               modules, no AnsiballZ); `stat` (Ansible's own, through AnsiballZ)
  figures      per kind, best of REPEAT interleaved rounds: wall time, the controller's CPU (ansible-playbook, its
               task workers, the ssh clients: this process's children; not the ControlPersist masters, which nothing
               waits for) and the nodes' CPU (their cgroups); then, over the baseline, the controller's and the
               nodes' CPU per task and host

Run from the checkout after tests/setup.sh:  .venv/bin/python bench/task_cost.py [NODES] [TASKS] [REPEAT]
(defaults 3, 30, 3).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchargs import arguments  # noqa: E402
from cpu_split import node_cpu_seconds  # noqa: E402
from full_scaling import children_cpu  # noqa: E402
from tests.lab.cluster import Lab  # noqa: E402
from tests.lab.images import build_image  # noqa: E402

BIN = Path(sys.executable).parent
KINDS = {
    "none": None,
    "debug, skipped": {"ansible.builtin.debug": {"msg": "never"}, "when": "inventory_hostname == 'nobody'"},
    "set_fact": {"ansible.builtin.set_fact": {"bench_value": "{{ inventory_hostname ~ '-x' }}"}},
    "hvd_read (ours)": {"hvd.cluster.hvd_read": {"paths": ["/etc/hostname"]}},
    "stat (AnsiballZ)": {"ansible.builtin.stat": {"path": "/etc/hostname"}},
}


def playbook(folder: Path, kind: str, tasks: int) -> Path:
    task = KINDS[kind]
    body = [{"name": "Open the connections", "ansible.builtin.ping": {}}]
    body += [{"name": f"{kind} {i}", **task} for i in range(tasks)] if task else []
    path = folder / f"{kind.split()[0]}.yml"
    path.write_text(yaml.safe_dump([{"name": kind, "hosts": "all", "gather_facts": False, "tasks": body}]))
    return path


def play(lab: Lab, nodes: list[str], book: Path) -> tuple[float, float, float]:
    """One run: wall seconds, the controller's CPU, the nodes' CPU together."""
    inventory = lab.workdir / "inventories" / lab.name
    before, before_nodes, start = children_cpu(), sum(map(node_cpu_seconds, nodes)), time.monotonic()
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), str(book)], cwd=ROOT,
                          env=os.environ, capture_output=True, text=True)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"{book.name} failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
    return wall, children_cpu() - before, sum(map(node_cpu_seconds, nodes)) - before_nodes


def main() -> None:
    args = [int(a) for a in arguments(__doc__)]
    size, tasks, repeat = (args + [3, 30, 3][len(args):])[:3]
    build_image()
    with tempfile.TemporaryDirectory(prefix="hvd-bench-taskcost-") as tmp:
        lab = Lab("benchtaskcost", size, Path(tmp))
        lab.up()
        try:
            subprocess.run([str(BIN / "hvdcluster"), "inventory", "hosts.yaml"], cwd=lab.workdir, capture_output=True,
                           check=True)
            # the first contact records the host keys (a bare node's health is not ready: its exit status is not read)
            subprocess.run([str(BIN / "hvdcluster"), "health", "hosts.yaml", "--quick"], cwd=lab.workdir,
                           capture_output=True)
            nodes = [lab.container(i) for i in range(1, size + 1)]
            books = {kind: playbook(Path(tmp), kind, tasks) for kind in KINDS}
            best: dict[str, tuple[float, float, float]] = {}
            for _ in range(repeat):
                for kind, book in books.items():
                    run = play(lab, nodes, book)
                    best[kind] = min(best.get(kind, run), run, key=lambda r: r[1])
        finally:
            lab.down()
    print(f"{size} nodes, {tasks} tasks a kind, best of {repeat} by the controller's CPU (load "
          f"{os.getloadavg()[0]:.1f})")
    print("| kind | wall | controller CPU | nodes' CPU | controller CPU a task and host | nodes' CPU a task and host |")
    print("| --- | --- | --- | --- | --- | --- |")
    base = best["none"]
    for kind, (wall, cpu, node) in best.items():
        per = "" if kind == "none" else f"{(cpu - base[1]) / (tasks * size) * 1000:.0f} ms"
        per_node = "" if kind == "none" else f"{(node - base[2]) / (tasks * size) * 1000:.0f} ms"
        print(f"| {kind} | {wall:.1f} s | {cpu:.2f} s | {node:.2f} s | {per} | {per_node} |")


if __name__ == "__main__":
    main()
