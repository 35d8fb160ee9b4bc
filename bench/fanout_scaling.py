"""Benchmark (prints figures, asserts nothing): what a cold `up` of 1, 4 and 16 nodes costs the controller now that
artifacts travel node to node (hvd_fanout), and which of Ansible's many-host settings help.

  per size N      bare nodes (the controller cache is warm: the env and the wheel are not rebuilt; up_scaling.py
                  measures a build), one cold `up`:
                  - artifact bytes the controller sent and nodes passed on (the run's own report), and what the
                    controller would have sent before fan-out (one copy per node that needed it);
                  - SSH bytes the controller sent to the nodes during the run (an iptables counter on this host's
                    OUTPUT chain for TCP port 22 into the lab's Docker bridge: module payloads, files and artifacts;
                    node-to-node copies are bridged between the nodes and never pass it, nor do the packages the
                    nodes download);
                  - wall time, and CPU saturation (busy share of this machine's cores during the run);
                  - the copies' rates (controller -> node, node -> node) from the run's task durations;
                  then a no-op `up` (fast path) and a no-op `up --full` (every role on every node).
  settings        on the 4-node cluster, a no-op `up --full` with one Ansible setting changed at a time.

Run from the checkout after tests/setup.sh:  .venv/bin/python bench/fanout_scaling.py [sizes, default 1,4,16]
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
from tests.lab.images import build_image, docker  # noqa: E402
from tests.lab.stacks import cpu_stack  # noqa: E402

STACK = cpu_stack()
HVDCLUSTER = str(Path(sys.executable).parent / "hvdcluster")
SETTINGS = {
    "as shipped (forks 32, pipelining, ControlPersist 60s)": {},
    "pipelining off": {"ANSIBLE_PIPELINING": "False"},
    "no ControlPersist (a new SSH connection per task)": {"ANSIBLE_SSH_ARGS": "-C -o ControlMaster=no"},
    "forks 2": {"ANSIBLE_FORKS": "2"},
    "fact cache in the inventory (jsonfile)": {"ANSIBLE_CACHE_PLUGIN": "jsonfile", "ANSIBLE_GATHERING": "smart",
                                               "ANSIBLE_CACHE_PLUGIN_CONNECTION": "{workdir}/facts"},
}


def run(lab: Lab, *args: str, env: dict[str, str] | None = None) -> tuple[float, dict]:
    start = time.monotonic()
    proc = subprocess.run([HVDCLUSTER, *args, "--json"], cwd=lab.workdir, env={**os.environ, **(env or {})},
                          capture_output=True, text=True)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"hvdcluster {' '.join(args)} failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
    return seconds, json.loads(proc.stdout)


class SshCounter:
    """An iptables rule that only counts: TCP to port 22 leaving this host into the lab's bridge."""

    def __init__(self, lab: Lab) -> None:
        ident = docker("network", "inspect", "-f", "{{.Id}}", lab.docker_network).strip()
        self.rule = ["OUTPUT", "-o", f"br-{ident[:12]}", "-p", "tcp", "--dport", "22"]
        subprocess.run(["iptables", "-I", *self.rule], check=True)

    def bytes(self) -> int:
        out = subprocess.run(["iptables", "-L", "OUTPUT", "-v", "-x", "-n"], check=True, capture_output=True,
                             text=True).stdout
        return sum(int(line.split()[1]) for line in out.splitlines()
                   if self.rule[2] in line and "dpt:22" in line)

    def close(self) -> None:
        subprocess.run(["iptables", "-D", *self.rule], check=False)


def cpu() -> tuple[int, int]:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4], sum(fields)  # busy (all but idle and iowait), total


def rates(log: str, copies: list[dict]) -> dict[str, float]:
    """MB/s of the copies, by kind, from the run's task durations and the report's sizes."""
    sizes: dict[str, list[tuple[int, float]]] = {"controller": [], "peer": []}
    events = [json.loads(p.read_text()) for p in (Path(log).parent / "job_events").glob("*.json")]
    for event in events:
        data = event.get("event_data", {})
        task = data.get("task", "")
        if event.get("event") != "runner_on_ok" or not (data.get("res") or {}).get("changed"):
            continue
        kind = "controller" if task.startswith("Copy from the controller the") else \
            "peer" if task.startswith("Pull from a peer over the SSH mesh the") else ""
        artifact = task.rsplit(" the ", 1)[-1]
        size = next((c["bytes"] for c in copies if c["to"] == data.get("host") and c["artifact"] == artifact), 0)
        if kind and data.get("duration") and size:
            sizes[kind].append((int(size), float(data["duration"])))
    return {kind: sum(s for s, _ in items) / 1e6 / sum(d for _, d in items) if items else 0.0
            for kind, items in sizes.items()}


def mib(count: int) -> str:
    return f"{count / 2**20:.1f} MiB"


def one_size(n: int, tmp: Path, settings: bool) -> None:
    lab = Lab("benchf", n, tmp / f"n{n}", slots=1, stack=STACK)
    lab.up()
    try:
        counter = SshCounter(lab)
        busy0, total0 = cpu()
        seconds, doc = run(lab, "up", "hosts.yaml")
        ssh_bytes, (busy1, total1) = counter.bytes(), cpu()
        counter.close()
        report = doc["transfers"]
        before = sum(c["bytes"] for c in report["copies"] if c["ok"])
        speed = rates(doc["log"], report["copies"])
        print(f"{n:>2} nodes cold up: {seconds:6.1f} s, CPU busy {100 * (busy1 - busy0) / (total1 - total0):3.0f} %; "
              f"artifacts: controller sent {mib(report['controller_bytes'])}, nodes passed on "
              f"{mib(report['peer_bytes'])} ({len(report['copies'])} copies; before fan-out the controller would "
              f"have sent {mib(before)}); controller SSH bytes {mib(ssh_bytes)}; copy rates: controller -> node "
              f"{speed['controller']:.0f} MB/s, node -> node {speed['peer']:.0f} MB/s", flush=True)
        noop, _ = run(lab, "up", "hosts.yaml")
        full, _ = run(lab, "up", "hosts.yaml", "--full")
        print(f"{n:>2} nodes no-op up: {noop:5.1f} s (fast path), {full:6.1f} s with --full", flush=True)
        if settings:
            for name, env in SETTINGS.items():
                env = {k: v.format(workdir=lab.workdir) for k, v in env.items()}
                takes = run(lab, "up", "hosts.yaml", "--full", env=env)[0]
                print(f"   {n} nodes no-op up --full, {name}: {takes:5.1f} s", flush=True)
    finally:
        lab.down()


def main() -> None:
    arguments(__doc__)  # -h/--help: the docstring, before any lab is started
    sizes = [int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "1,4,16").split(",")]
    build_image()
    with tempfile.TemporaryDirectory(prefix="hvd-bench-") as tmp:
        for n in sizes:
            one_size(n, Path(tmp), settings=n == 4)


if __name__ == "__main__":
    main()
