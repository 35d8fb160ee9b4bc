"""``hvdcluster health``: every node's GPU and fabric health, read-only, judged against hvd_health's thresholds."""

from __future__ import annotations

import argparse
import sys

from .. import lock
from ..errors import HvdError
from ..progress import dump_json, printable
from .common import bastion_problem, read_only_start

FULL_NOT_BUILT = "--full: not yet: the bandwidth gate (nccl-tests) is not built; run without --full"


def cmd_health(args: argparse.Namespace) -> int:
    """Read every node (check mode, no sudo) and judge its GPUs, NVLink, kernel log, InfiniBand ports and Fabric
    Manager; exit 0 healthy (warnings allowed), 1 a failure or a node not read, 2 bad input."""
    from .. import health, nodestate

    if args.full:
        raise HvdError(FULL_NOT_BUILT)
    cluster, root, names = read_only_start(args)
    with lock.hold(root, "health"):
        reading = health.read(root, args.limit, hosts=[] if args.limit else names, quick=args.quick)
    scope = [n for n in names if n in reading.found]
    unreachable = {n: reading.unreachable[n] for n in names if n in reading.unreachable}
    report = health.assess({n: reading.found[n] for n in scope}, nodestate.desired(root, scope))
    if args.json:
        dump_json(sys.stdout, health.to_json(cluster.cluster, report, unreachable, reading.log, reading.seconds))
        return health.exit_code(report, unreachable)
    print(printable(health.render(report, unreachable)), end="")  # node-supplied text: no control sequence passes
    bastion = bastion_problem(cluster, root) if unreachable else ""
    if bastion:
        print(f"  nodes unreachable: {bastion}")
    print(health.summary(report, unreachable, reading.log, reading.seconds))
    return health.exit_code(report, unreachable)
