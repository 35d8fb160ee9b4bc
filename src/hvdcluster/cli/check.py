"""``hvdcluster check``: every node against its desired state and its peers, read-only."""

from __future__ import annotations

import argparse
import sys

from .. import lock
from ..output import dump_json, printable
from .common import bastion_problem, read_only_start


def cmd_check(args: argparse.Namespace) -> int:
    """Compare every node with the desired state and with its peers; read-only (check mode, no sudo)."""
    from .. import drift, drift_text, nodestate

    cluster, root, names = read_only_start(args)
    with lock.hold(root, "check"):
        reading = nodestate.read(root, args.limit, hosts=[] if args.limit else names, deep=args.deep)
    scope = [n for n in names if n in reading.found or n in reading.unreachable]
    report = drift.compare(nodestate.desired(root, scope), {n: reading.found.get(n) for n in scope},
                           list(reading.unreachable))
    if args.deep:  # what only a deep read sees, the next `up` reads deep too (and repairs)
        nodestate.note_deep_findings(root, found=[n for n in scope if drift.env_files_differ(report, n)],
                                     cleared=[n for n in scope if n in reading.found])
    bastion = bastion_problem(cluster, root) if reading.unreachable else ""
    notes = drift.notices({n: reading.found.get(n) for n in scope})  # named, never a drift: the exit code ignores them
    if args.json:
        doc = drift_text.to_json(report)
        doc["notices"] = notes
        doc.update({"cluster": cluster.cluster, "inventory": str(root), "log": reading.log,
                    "seconds": round(reading.seconds, 2), "why_unreachable": reading.unreachable})
        if bastion:
            doc["bastion"] = bastion
        dump_json(sys.stdout, doc)
    else:
        print(printable(drift_text.render(report)))  # node-supplied text: no control sequence reaches the terminal
        if notes:
            print(printable(drift_text.render_notices(notes, scope)), end="")
        for node, why in reading.unreachable.items():
            print(printable(f"  {node}: {why}"))
        if bastion:
            print(f"  nodes unreachable: {bastion}")
        print(f"(read {len(reading.found)} of {len(scope)} nodes in {reading.seconds:.1f} s; log: {reading.log})")
    return drift_text.exit_code(report)
