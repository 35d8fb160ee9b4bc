"""The ``hvdcluster`` command: parse, call, render, exit code. Nothing else lives here."""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from importlib import resources
from pathlib import Path

import yaml

from . import __version__, compat, inventory, spec
from .errors import HvdError
from .progress import Console, Tracker, dump_json

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def cmd_init(args: argparse.Namespace) -> int:
    target = Path(args.path)
    if target.exists() and not args.force:
        raise HvdError(f"{target}: exists; pass --force to overwrite it")
    target.write_text(resources.files("hvdcluster.data").joinpath("hosts.example.yaml").read_text())
    print(f"wrote {target}: edit the hosts, then run `hvdcluster up {target}`")
    return EXIT_OK


def load_and_resolve(path: str) -> tuple[spec.ClusterSpec, compat.Plan]:
    """hosts.yaml, validated, and its stack resolved: bad input or an impossible stack stop here (exit 2)."""
    cluster = spec.load(path)
    return cluster, compat.resolve(cluster.stack)


def cmd_plan(args: argparse.Namespace) -> int:
    cluster = spec.load(args.hosts)
    node, facts = compat.NodeInfo(), []
    if args.probe:
        from . import probe

        node, facts = probe.probe(cluster, Path(args.output) / cluster.cluster / "ssh" / "known_hosts")
    plan = compat.resolve(cluster.stack, node)
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
    cluster, plan = load_and_resolve(args.hosts)
    root = inventory.render(cluster, args.output, plan)
    print(f"wrote {root} ({len(cluster.hosts)} hosts)")
    return EXIT_OK


# up --verify: the post-flight's slow proofs even when nothing changed since they last passed.
FULL_VERIFY = {"hvd_verify_allreduce": "always", "hvd_horovod_gate_always": True}


def _converge(args: argparse.Namespace, playbook: str, what: str) -> int:
    """Resolve, render the inventory, run one playbook with live progress, then the summary."""
    from .runner import run_playbook

    out = sys.stdout
    console = Console(sys.stderr if args.json else out)
    if args.json:
        console.live = False
    console.step(1, 3, f"read {args.hosts} and resolve the stack")
    cluster, plan = load_and_resolve(args.hosts)
    console.write(f"  cluster {cluster.cluster}: {len(cluster.hosts)} hosts")
    console.step(2, 3, "write inventory")
    root = inventory.render(cluster, args.output, plan)
    console.write(f"  {root}")
    check = getattr(args, "check", False)
    mode = " (check mode: nothing is changed)" if check else ""
    console.step(3, 3, f"{what} playbooks/{playbook}{mode}")

    extravars = FULL_VERIFY if getattr(args, "verify", False) else None
    tracker = Tracker.for_hosts([h.name for h in cluster.hosts])
    console.update(tracker, set(tracker.hosts))

    def on_event(event: dict) -> None:
        console.update(tracker, tracker.handle(event))

    result = run_playbook(root, playbook, limit=args.limit, tags=getattr(args, "tags", None), check=check,
                          diff=getattr(args, "diff", False), extravars=extravars, on_event=on_event)
    console.summary(tracker, str(result.log))
    if args.json:
        dump_json(out, {"cluster": cluster.cluster, "inventory": str(root), "rc": result.rc,
                        "log": str(result.log), **tracker.as_dict()})
    if tracker.ok and result.rc == 0:
        return EXIT_OK
    if not tracker.failures:
        console.write(f"ansible-playbook ended with rc {result.rc} ({result.status}): see {result.log}")
    return EXIT_FAILED


def cmd_up(args: argparse.Namespace) -> int:
    return _converge(args, "site.yml", "converge")


def cmd_preflight(args: argparse.Namespace) -> int:
    return _converge(args, "preflight.yml", "check every node, read-only:")


def cmd_run(args: argparse.Namespace) -> int:
    from . import launch

    cluster = spec.load(args.hosts)
    root = Path(args.output) / cluster.cluster
    if not (root / "hosts.yml").is_file():
        raise HvdError(f"{root}: no inventory yet; run `hvdcluster up {args.hosts}` first")
    inv = inventory.read(root)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    nic = args.network_interface or launch.fabric_interface(inv, next(iter(inv.hosts)))
    plan = launch.build(inv, command, np=args.np, controller=args.controller, network_interface=nic)
    if args.print:
        print(shlex.join(plan.argv()))
        return EXIT_OK
    return subprocess.run(plan.argv()).returncode


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hvdcluster", description="Converge GPU machines into a Horovod cluster.")
    parser.add_argument("--version", action="version", version=f"hvdcluster {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("init", help="write a commented example hosts.yaml")
    p.add_argument("path", nargs="?", default="hosts.yaml")
    p.add_argument("--force", action="store_true", help="overwrite an existing file")
    p.set_defaults(func=cmd_init)

    def with_output(p: argparse.ArgumentParser) -> None:
        p.add_argument("hosts", help="the cluster's hosts.yaml")
        p.add_argument("-o", "--output", default="inventories",
                       help="folder that holds the inventory folder <cluster>/ (default: ./inventories)")

    p = sub.add_parser("plan", help="print the resolved software stack and why each value was chosen")
    with_output(p)
    p.add_argument("--probe", action="store_true",
                   help="resolve for the nodes as they are: read their OS, kernel, gcc, python, GPUs and loaded "
                   "driver over SSH first (read-only; host keys pinned in the inventory's ssh/known_hosts)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("inventory", help="render the Ansible inventory from hosts.yaml")
    with_output(p)
    p.set_defaults(func=cmd_inventory)

    p = sub.add_parser("up", help="converge every node (playbooks/site.yml)")
    with_output(p)
    p.add_argument("--limit", help="only these hosts (Ansible pattern)")
    p.add_argument("--tags", help="only these roles (comma-separated role names)")
    p.add_argument("--check", action="store_true", help="show what would change, change nothing")
    p.add_argument("--diff", action="store_true", help="show file differences")
    p.add_argument("--verify", action="store_true",
                   help="run horovodrun --check-build and the allreduces even when nothing changed since they "
                   "last passed")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("preflight", help="run the read-only pre-flight checks on every node and report",
                       description="Probes every node and reports each finding (host, check, found, expected, "
                       "fix); changes nothing. Exit code 1 when a check failed.")
    with_output(p)
    p.add_argument("--limit", help="only these hosts (Ansible pattern)")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.set_defaults(func=cmd_preflight)

    p = sub.add_parser("run", help="launch a Horovod job with horovodrun on the first node",
                       description="Builds the horovodrun command line from the inventory (hosts and slots, the "
                       "env's interpreter, the fabric interface) and runs it on the first node over SSH.")
    p.add_argument("--hosts", default="hosts.yaml", help="the cluster's hosts.yaml (default: ./hosts.yaml)")
    p.add_argument("-o", "--output", default="inventories", help="folder that holds the inventory folder <cluster>/")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--gloo", dest="controller", action="store_const", const="gloo", help="use Gloo")
    mode.add_argument("--mpi", dest="controller", action="store_const", const="mpi", help="use MPI (mpirun)")
    p.add_argument("-np", "--np", type=int, help="number of processes (default: every slot)")
    p.add_argument("--network-interface", help="fabric interface (default: the one hvd_base recorded)")
    p.add_argument("--print", action="store_true", help="only print the command")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the program and its arguments")
    p.set_defaults(func=cmd_run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except HvdError as err:
        print(f"hvdcluster: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("hvdcluster: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
