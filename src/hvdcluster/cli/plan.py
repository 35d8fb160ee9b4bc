"""``hvdcluster plan`` (the resolved stack and why) and ``hvdcluster inventory`` (the Ansible inventory written);
neither changes a node."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from .. import compat, lock, spec
from ..output import dump_json
from .common import EXIT_OK, check_output, inventory_root, load_and_resolve, render


def cmd_plan(args: argparse.Namespace) -> int:
    if args.probe:
        check_output(args.output)  # --probe pins host keys in <output>/<cluster>/ssh/known_hosts, logs in runs/
    cluster = spec.load(args.hosts)
    node, facts = compat.NodeInfo(), []
    if args.probe:
        from .. import probe

        root = inventory_root(Path(args.output), cluster)
        node, facts = probe.probe(cluster, root)
    plan = compat.resolve(cluster.stack, node, lines=cluster.stack_lines, path=cluster.path)
    if args.json:
        dump_json(sys.stdout, {"cluster": cluster.cluster, "stack": plan.stack, "patches": list(plan.patches),
                               "notes": list(plan.notes), "nodes": [vars(f) for f in facts]})
        return EXIT_OK
    for f in facts:
        print(f"probed {probe.describe(f)}")
    print(f"cluster {cluster.cluster}: resolved stack")
    print(yaml.safe_dump(plan.stack, sort_keys=False, default_flow_style=False).rstrip())
    if plan.patches:
        print(f"horovod patches: {', '.join(plan.patches)}")
    print("why:")
    for note in plan.notes:
        print(f"  {note}")
    return EXIT_OK


def cmd_inventory(args: argparse.Namespace) -> int:
    output = check_output(args.output)
    cluster, plan = load_and_resolve(args.hosts)
    with lock.hold(inventory_root(output, cluster), "inventory"):
        root = render(cluster, output, plan)
    print(f"wrote {root} ({len(cluster.hosts)} hosts)")
    return EXIT_OK
