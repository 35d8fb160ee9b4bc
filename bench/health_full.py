"""Benchmark (prints figures, asserts nothing): `hvdcluster health` at scale and `health --full`'s bisection (issue 52).

  quick16      `health --quick` on 16 nodes (target <= 3 s), without 16 containers (too heavy for this 2-core machine):
               *fake readings*. The controller's side: ansible-playbook through ansible-runner over 16 hosts on a local
               connection, a stand-in play whose task (named as health.yml's) answers each node's reading from its
               vars (our recorded 2 x H100 node, tests/unit/plugins/fixtures/gpu), then the readings collected from the
               events, judged, folded and printed as the command does. The nodes' side: the real module once, on
               this machine (every node runs its own at once). Best and median of REPEAT.
  bisection    how many nccl-tests runs `health --full` needs to name one slow node, a slow link between two pairs, or
               a cause common to all, for N nodes (culprit.find_culprit on a simulated cluster; the whole run first).
  --containers `health --full` on 3 converged container nodes (a converge first: about 10 minutes here) with the
               stand-in all_reduce_perf of the container tests (tests/cluster/nccl_tests_standin.sh, printing outputs
               we wrote) under the cluster's real mpirun: a healthy run, then one slow on node3 (time, runs needed);
               and what up's health read adds to a no-op `up` (the same read with and without it).

Run from the checkout after tests/setup.sh:  .venv/bin/python bench/health_full.py [--containers] [REPEAT]  (default 5)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from benchargs import arguments  # noqa: E402
from hvdcluster import culprit, health  # noqa: E402

HVDCLUSTER = str(Path(sys.executable).parent / "hvdcluster")
FIXTURES = ROOT / "tests" / "unit" / "plugins" / "fixtures" / "gpu"


def _inventory(folder: Path, names: list[str]) -> Path:
    inv = folder / "lab"
    inv.mkdir()
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    (inv / "hosts.yml").write_text(json.dumps({"all": {"children": {"hvd_nodes": {"hosts": {n: local for n in names}}}}}))
    return inv


def quick16(repeat: int) -> None:
    """The controller's side of `health --quick` over 16 nodes with fake readings (a stand-in play answering each node's
    reading from its vars: ansible-playbook, the 16 hosts' events, collecting, judging, folding, printing), plus the
    node's side measured once: the real module on this machine (on a cluster every node runs its own, at once)."""
    from hvdcluster import nodestate

    names = [f"gpu{i:02d}" for i in range(1, 17)]
    smi = (FIXTURES / "nvidia-smi-q_h100-sxm-2gpu_550.144.03.txt").read_text()
    fake = {"user": "bench", "nvidia_smi_q": smi, "nvidia_smi_q_error": "", "nvlink": "", "nvlink_error": "",
            "kernel_log": "", "kernel_log_error": "", "ib": None, "modules": ["nvidia"], "modules_error": "",
            "pci": [{"address": f"0000:{0x10 + i:02x}:00.0", "class": "0x030200", "device": "0x2330"} for i in range(2)],
            "fabricmanager_active": "inactive", "dcgm_diag": None, "dcgm_diag_error": "skipped (--quick)"}
    controller, node = [], []
    with tempfile.TemporaryDirectory(prefix="hvd-bench-") as tmp:
        inv = _inventory(Path(tmp), names)
        play = Path(tmp) / "fake-health.yml"  # a stand-in for health.yml: the same task name, the reading from vars
        play.write_text(json.dumps([{"name": "Fake nodes", "hosts": "hvd_nodes", "gather_facts": False,
                                     "vars": {"reading": fake},
                                     "tasks": [{"name": health.HEALTH_TASK, "ansible.builtin.debug": {"var": "reading"}}]}]))
        (Path(tmp) / "one").mkdir()
        one = _inventory(Path(tmp) / "one", names[:1])
        for _ in range(repeat):
            start = time.monotonic()
            got = nodestate.read_with(str(play), inv, None, names, {}, task=health.HEALTH_TASK, key="reading")
            assert set(got.found) == set(names), got.unreachable
            report = health.assess(got.found, {n: {"gpu.count": 2} for n in names})
            health.render(report, {})
            health.summary(report, {}, got.log, got.seconds)
            controller.append(time.monotonic() - start)
            real = health.read(one, hosts=names[:1], quick=True)
            events = [json.loads(p.read_text()) for p in (Path(real.log).parent / "job_events").glob("*.json")]
            node.append(max(float(e["event_data"].get("duration") or 0) for e in events  # the module's task
                            if e.get("event") == "runner_on_ok" and e["event_data"].get("task") == health.HEALTH_TASK))
    total = [c + n for c, n in zip(controller, node)]
    print(f"health --quick, 16 nodes, fake readings: controller {statistics.median(controller):.2f} s (best "
          f"{min(controller):.2f}) + the real module on a node {statistics.median(node):.2f} s = "
          f"{statistics.median(total):.2f} s median, {min(total):.2f} s best, of {repeat}")


def bisection() -> None:
    def model(slow=(), links=()):
        return lambda groups: [not (set(g) & set(slow) or any(set(link) <= set(g) for link in links)) for g in groups]

    print("bisection (runs after the whole run; rounds of concurrent runs):")
    for n in (3, 8, 16, 64, 256):
        nodes = [f"n{i}" for i in range(1, n + 1)]
        worst = max((culprit.find_culprit(nodes, model(slow=(s,))) for s in nodes), key=lambda c: len(c["runs"]))
        link = culprit.find_culprit(nodes, model(links=((nodes[0], nodes[-1]),)))
        fabric = culprit.find_culprit(nodes, model(slow=tuple(nodes)))
        print(f"  {n:>3} nodes: one slow node {len(worst['runs']):>3} runs ({worst['rounds']} rounds), a slow link "
              f"{len(link['runs']):>3} ({link['rounds']}), every pair slow {len(fabric['runs']):>3}; all pairs would "
              f"be {n * (n - 1) // 2}")


def containers() -> None:
    from tests.lab.cluster import Lab
    from tests.lab.images import build_image
    from tests.cluster.test_up import FULL, standin

    build_image()
    with tempfile.TemporaryDirectory(prefix="hvd-bench-") as tmp:
        lab = Lab("benchfull", 3, Path(tmp))
        lab.up()
        try:
            def cli(*args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
                start = time.monotonic()
                proc = subprocess.run([HVDCLUSTER, *args], cwd=lab.workdir, env=os.environ, capture_output=True,
                                      text=True)
                return time.monotonic() - start, proc

            seconds, proc = cli("up", "hosts.yaml", "--json")
            print(f"converge 3 nodes: {seconds:.0f} s (rc {proc.returncode})")
            for scenario in ("healthy", "slow node3"):
                standin(lab, scenario)
                seconds, proc = cli("health", "hosts.yaml", "--full", "--json", *FULL)
                full = json.loads(proc.stdout)["full"]
                runs = sum(run["seconds"] for run in full["runs"])
                culprit = full["culprit"] or {}
                print(f"health --full, 3 nodes, stand-in {scenario}: {seconds:.1f} s in all (rc {proc.returncode}), "
                      f"{len(full['runs'])} runs ({runs:.1f} s of mpirun), culprit {culprit.get('nodes')}")
            standin(lab, None)
            subprocess.run(["rm", "-rf", str(lab.workdir / "inventories" / lab.name / "state" / "health")])
            for _ in range(2):
                seconds, proc = cli("up", "hosts.yaml", "--json")
            doc = json.loads(proc.stdout)
            print(f"up, nothing to converge (state and health read in one play): {seconds:.1f} s; the health read "
                  f"itself {doc['health']['seconds']:.2f} s on the slowest node")
            seconds, proc = cli("check", "hosts.yaml")
            print(f"check (the same read without the health task): {seconds:.1f} s")
        finally:
            lab.down()


def main() -> None:
    arguments(__doc__)  # -h/--help: the docstring, before any lab is started
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    repeat = int(args[0]) if args else 5
    quick16(repeat)
    bisection()
    if "--containers" in sys.argv:
        containers()


if __name__ == "__main__":
    main()
