"""Benchmark reader (prints figures, asserts nothing, starts nothing): where a tier's wall time went, read from the
run events the container suites left in pytest's base folder (each suite's inventory keeps ansible-runner's
artifacts). For each pytest-xdist worker, the suites in the order they ran, with the minutes from the first event of
the tier to the suite's first and last event; then the longest runs (a first converge is one run) and, for each of
the longest, its costliest tasks summed over its nodes.

A tier run by tests/run.sh (CI's `.ci/run` too) keeps its base folder until pytest's next three sessions replace it
(a fast tier is one): read it soon after the run. hvdcluster keeps an inventory's last 20 runs (ansible-runner's
rotation), so a suite that ran more than 20 (test_up, test_train) shows its later ones only: its span starts late and
its first converge is missing from the lists.

Run from the checkout:  .venv/bin/python bench/ci_timeline.py [BASETEMP] [RUNS]
BASETEMP: pytest's base folder (default: the newest /tmp/pytest-of-<user>/pytest-N that has worker folders);
RUNS: how many of the longest runs to take apart (default 3).
"""

from __future__ import annotations

import collections
import datetime
import getpass
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchargs import arguments  # noqa: E402


def _base(args: list[str]) -> Path:
    if args:
        return Path(args[0])
    root = Path(f"/tmp/pytest-of-{getpass.getuser()}")
    found = [p for p in root.glob("pytest-*") if p.name[7:].isdigit() and any(p.glob("popen-gw*/*/inventories"))]
    if not found:
        sys.exit(f"ci_timeline.py: no pytest base folder with container suites under {root}")
    return max(found, key=lambda p: int(p.name[7:]))


def _events(run: Path) -> list[dict]:
    out = []
    for path in run.glob("job_events/*.json"):
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return out


def _when(event: dict) -> float:
    return datetime.datetime.fromisoformat(event["created"]).timestamp()


def main() -> None:
    args = arguments(__doc__)
    base = _base(args)
    longest = int(args[1]) if len(args) > 1 else 3
    runs: dict[Path, list[dict]] = {}
    bounds: dict[Path, tuple[float, float, int]] = {}  # each run's first and last event, and how many it has
    suites = []
    for worker in sorted(base.glob("popen-gw*")):
        for suite in sorted(worker.iterdir()):
            if suite.is_symlink() or not suite.is_dir() or suite.name.endswith("current"):
                continue
            kept = []
            for run in suite.glob("inventories/*/runs/artifacts/*"):
                runs[run] = _events(run)
                times = [_when(e) for e in runs[run] if e.get("created")]
                if times:
                    bounds[run] = (min(times), max(times), len(times))
                    kept.append(bounds[run])
            if kept:
                suites.append((min(b[0] for b in kept), max(b[1] for b in kept), worker.name, suite.name))
    if not suites:
        sys.exit(f"ci_timeline.py: no run events under {base}")
    start = min(s[0] for s in suites)
    print(f"{base}: suites by worker, minutes from the tier's first event")
    for first, last, worker, name in sorted(suites, key=lambda s: (s[2], s[0])):
        print(f"  {worker:9s} {(first - start) / 60:6.1f} -> {(last - start) / 60:6.1f}  ({(last - first) / 60:5.1f})  {name}")
    spans = sorted(((last - first, run) for run, (first, last, count) in bounds.items() if count > 1), reverse=True)
    print(f"\nthe longest runs (of {len(spans)}):")
    for took, run in spans[:10]:
        print(f"  {took:7.1f} s  {run.relative_to(base)}")
    for took, run in spans[:longest]:
        tasks: collections.Counter[tuple[str, str]] = collections.Counter()
        for event in runs[run]:
            data = event.get("event_data") or {}
            if event.get("event") in ("runner_on_ok", "runner_on_failed") and data.get("duration"):
                tasks[(data.get("role", ""), data.get("task", ""))] += float(data["duration"])
        print(f"\n{run.relative_to(base)} ({took:.1f} s): the costliest tasks, seconds summed over its nodes")
        for (role, task), seconds in tasks.most_common(8):
            print(f"  {seconds:7.1f}  {role or '-':18s} {task[:90]}")


if __name__ == "__main__":
    main()
