"""``hvdcluster preflight``: the pre-flight alone, read-only (playbooks/preflight.yml): every node checked against what
the stack needs, nothing changed."""

from __future__ import annotations

import argparse

from .. import lock
from . import stages


def cmd_preflight(args: argparse.Namespace) -> int:
    session = stages.start(args)
    session.console.step(1, 2, f"read {args.hosts}, resolve the stack, write the inventory")
    with lock.hold(session.root, "preflight"):  # one run at a time: taken before anything is written
        stages.write_inventory(session)
        session.console.step(2, 2, "check every node, read-only: playbooks/preflight.yml")
        outcome = stages.run_pass(session, stages.Pass("preflight.yml", limit=args.limit))
    return stages.finish(session, outcome)
