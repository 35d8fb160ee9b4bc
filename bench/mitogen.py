"""Benchmark (prints figures, asserts nothing): Mitogen for Ansible against Ansible's own strategy and connection, on
the runs day 2 is made of.

Mitogen (https://mitogen.networkgenomics.com/ansible_detailed.html) replaces the per-task SSH command and AnsiballZ
module process with one persistent Python interpreter per node, fed over the SSH connection: the issue's biggest
lever on paper (issue 54: half of the tier's CPU is Python starting and importing `ansible.module_utils` on the nodes
and forking on the controller). It is not a dependency of hvdcluster: this script installs it (from the package index
pip is configured with) into a folder of its own and turns it on for a run the way its documentation says, through
Ansible's environment (ANSIBLE_STRATEGY_PLUGINS, ANSIBLE_STRATEGY=mitogen_linear).

  converge        a 3-node CPU lab converged once from the shared controller cache (not measured)
  no-op up        the fast path (one read of every node), best and median of REPEAT, each way
  no-op up --full every role on every node with nothing to change, best and median of REPEAT, each way

Each run must end well with changed=0; a run that fails under Mitogen is printed with its error and counted as such.

Run from the checkout after tests/setup.sh:  .venv/bin/python bench/mitogen.py [--repeat 3] [--version 0.3.54]
"""

from __future__ import annotations

import argparse
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

from tests.lab.cluster import Lab  # noqa: E402
from tests.lab.images import build_image  # noqa: E402
from tests.lab.stacks import cpu_stack  # noqa: E402

FOLDER = Path(tempfile.gettempdir()) / "hvd-bench-mitogen"


def install(version: str) -> dict[str, str]:
    """Mitogen ``version`` in a folder of its own; the environment that turns it on for ansible-playbook."""
    target = FOLDER / version
    if not (target / "ansible_mitogen").is_dir():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                        f"mitogen=={version}"], check=True)
    return {"PYTHONPATH": str(target), "ANSIBLE_STRATEGY_PLUGINS": str(target / "ansible_mitogen" / "plugins" /
                                                                     "strategy"),
            "ANSIBLE_STRATEGY": "mitogen_linear"}


def strategy(log: str) -> str:
    """The strategy a run's ansible-playbook had in its environment (ansible-runner records it beside the run's log)."""
    try:
        env = json.loads((Path(log).parent / "command").read_text()).get("env") or {}
    except (OSError, ValueError):
        return "?"
    return env.get("ANSIBLE_STRATEGY", "linear")


def timed(lab: Lab, env: dict[str, str], *args: str) -> tuple[float, int | None, str]:
    """One `hvdcluster up --json ARGS` on the lab's shared-cache cluster: (seconds, changed or None when it failed,
    the error's last lines, or the strategy the run had)."""
    start = time.monotonic()
    proc = subprocess.run([str(Path(sys.executable).parent / "hvdcluster"), "up", "hosts.yaml", "--json", *args],
                          cwd=lab.workdir, env={**os.environ, **env}, capture_output=True, text=True)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        return seconds, None, (proc.stderr or proc.stdout)[-1500:]
    doc = json.loads(proc.stdout)
    return seconds, sum(h["changed"] for h in doc["hosts"].values()), strategy(doc.get("log", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--version", default="0.3.54", help="the Mitogen release to measure")
    args = parser.parse_args()
    mitogen = install(args.version)
    build_image()
    with tempfile.TemporaryDirectory(prefix="hvd-bench-") as tmp:
        lab = Lab("bmito", 3, Path(tmp) / "lab", slots=2, stack=cpu_stack())
        lab.up()
        try:
            seconds, changed, error = timed(lab, {})
            if changed is None:
                sys.exit(f"the first converge failed:\n{error}")
            print(f"converge, 3 nodes (shared cache): {seconds:.1f} s")
            rows = []
            ways = (("ansible", {}), (f"mitogen {args.version}", mitogen))
            for what, argv in (("no-op up", ()), ("no-op up --full", ("--full",))):
                # interleaved, so that the machine's load falls on both alike
                runs: dict[str, list] = {way: [] for way, _ in ways}
                for _ in range(args.repeat):
                    for way, env in ways:
                        runs[way].append(timed(lab, env, *argv))
                for way, _ in ways:
                    good = [s for s, c, _ in runs[way] if c is not None]
                    failed = [e for _, c, e in runs[way] if c is None]
                    changed = max((c for _, c, _ in runs[way] if c is not None), default=None)
                    used = sorted({e for _, c, e in runs[way] if c is not None})
                    rows.append((what, f"{way} ({', '.join(used)})", good, changed, failed))
        finally:
            lab.down()
    print(f"load average after the runs: {os.getloadavg()[0]:.2f}")
    print(f"{'run':<18} {'how (strategy)':<34} {'best s':>8} {'median s':>9}  changed  failed")
    for what, way, good, changed, failed in rows:
        best = f"{min(good):8.1f}" if good else "       -"
        median = f"{statistics.median(good):9.1f}" if good else "        -"
        print(f"{what:<18} {way:<34} {best} {median}  {changed if changed is not None else '-':>7}  {len(failed)}")
    for what, way, _, _, failed in rows:
        for error in failed[:1]:
            print(f"\n{what} ({way}) failed:\n{error}")


if __name__ == "__main__":
    main()
