"""``hvdcluster health``: every node's GPU and fabric health, read-only, judged against hvd_health's thresholds; with
``--full``, the bus bandwidth nccl-tests measures over the nodes, judged against floors derived from their links, and
the culprit of a failing run named (bandwidth.py). What each node was found to be is recorded for `run`'s gate."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable

from .. import lock
from ..errors import HvdError
from ..output import dump_json, printable
from .common import bastion_problem, read_only_start


def check_bandwidth_options(args: argparse.Namespace, enabled: bool, flag: str):
    """The --full settings (checked: exit 2 on a bad one), or None without ``flag``; its options without it exit 2."""
    from .. import bandwidth

    if enabled:
        return bandwidth.settings_from(args)
    unused = bandwidth.unused_options(args)
    if unused:
        raise HvdError(f"{', '.join(unused)}: only with {flag}")
    return None


def measure(root: Path, nodes: list[str], readings: dict[str, dict], settings, by: str,
            write: Callable[[str], None]) -> dict[str, Any]:
    """``--full`` over ``nodes`` (their health readings in ``readings``), holding a job lease on them; each node's
    verdict recorded for `run`. Returns bandwidth.assess's report (with ``refused`` where nodes were busy)."""
    from .. import bandwidth, health, inventory

    inv = inventory.read(root)
    prefix = str(inv.vars.get("hvd_nccl_tests_prefix") or bandwidth.NCCL_TESTS_PREFIX)
    with bandwidth.leased(inv, nodes) as busy:
        if busy:
            write("not measuring: running work on the nodes would be disturbed and measured with them (wait for it, or "
                  "--limit the others):")
            for line in busy:
                write(f"  {line}")
            return {"applicable": False, "reason": "nodes busy", "refused": busy, "passed": False, "runs": [],
                    "culprit": None, "skipped": {}, "verdicts": {}}
        full = bandwidth.assess(readings, nodes, settings, lambda first, shell: bandwidth.remote(inv, first, shell),
                                prefix)
    health.record(root, full["verdicts"], health.FULL, by)
    return full


def full_failed(full: dict[str, Any] | None) -> bool:
    return bool(full) and (not full["passed"] or bool(full.get("refused")))


def cmd_health(args: argparse.Namespace) -> int:
    """Read every node (check mode, no sudo) and judge its GPUs, NVLink, kernel log, InfiniBand ports, PCIe ACS, the
    IOMMU and Fabric Manager; with --full, measure. Exit 0 healthy (warnings allowed), 1 a failure, a slow run or a
    node not read, 2 bad input."""
    from .. import bandwidth, health, nodestate

    settings = check_bandwidth_options(args, args.full, "--full")
    cluster, root, names = read_only_start(args)
    if getattr(args, "drain", False) and cluster.scheduler is None:
        raise HvdError(f"health --drain: {args.hosts} names no scheduler to drain nodes in: add `scheduler: {{kind: "
                       "slurm, controller: NODE}` (and run `hvdcluster up`), or run health without --drain")
    lines: list[str] = []
    write = lines.append if args.json else (lambda text: print(printable(text)))
    with lock.hold(root, "health"):
        reading = health.read(root, args.limit, hosts=[] if args.limit else names, quick=args.quick)
        scope = [n for n in names if n in reading.found]
        unreachable = {n: reading.unreachable[n] for n in names if n in reading.unreachable}
        report = health.assess({n: reading.found[n] for n in scope}, nodestate.desired(root, scope))
        health.record(root, report, health.QUICK, "health --full" if args.full else "health")
        if not args.json:
            print(printable(health.render(report, unreachable)), end="")  # node text: no control sequence passes
        full = measure(root, scope, reading.found, settings, "health --full", write) if settings and scope else None
    rc = health.exit_code(report, unreachable) or (1 if full_failed(full) else 0)
    drained = None
    if getattr(args, "drain", False):  # Slurm takes no new job on a node whose health failed, until it is healthy
        from .. import inventory, slurm

        drained = slurm.apply_health(inventory.read(root), report, write)
        rc = rc or (1 if drained["errors"] else 0)
    if args.json:
        doc = health.to_json(cluster.cluster, report, unreachable, reading.log, reading.seconds)
        dump_json(sys.stdout, {**doc, "full": full, "exit": rc, **({"slurm": drained} if drained is not None else {})})
        return rc
    if full is not None and not full.get("refused"):
        print(printable(bandwidth.render(full)), end="")
    bastion = bastion_problem(cluster, root) if unreachable else ""
    if bastion:
        print(f"  nodes unreachable: {bastion}")
    print(health.summary(report, unreachable, reading.log, reading.seconds) + (_full_summary(full) if full else ""))
    return rc


def _full_summary(full: dict[str, Any]) -> str:
    if full.get("refused"):
        return "; bandwidth: not measured (nodes busy)"
    if not full["applicable"]:
        return "; bandwidth: not applicable"
    runs = len(full["runs"])
    verdict = "passed" if full["passed"] else f"FAILED, culprit {', '.join((full['culprit'] or {}).get('nodes', []))}"
    return f"; bandwidth: {verdict} ({runs} run{'s' if runs != 1 else ''} in {full['seconds']:.1f} s)"
