"""The ``hvdcluster`` command: parse, call, render, exit code. Nothing else lives here."""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path

from . import __version__, inventory, spec
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


def cmd_inventory(args: argparse.Namespace) -> int:
    cluster = spec.load(args.hosts)
    root = inventory.render(cluster, args.output)
    print(f"wrote {root} ({len(cluster.hosts)} hosts)")
    return EXIT_OK


def cmd_up(args: argparse.Namespace) -> int:
    from .runner import run_playbook

    out = sys.stdout
    console = Console(sys.stderr if args.json else out)
    if args.json:
        console.live = False
    console.step(1, 3, f"read {args.hosts}")
    cluster = spec.load(args.hosts)
    console.write(f"  cluster {cluster.cluster}: {len(cluster.hosts)} hosts")
    console.step(2, 3, "write inventory")
    root = inventory.render(cluster, args.output)
    console.write(f"  {root}")
    mode = " (check mode: nothing is changed)" if args.check else ""
    console.step(3, 3, f"converge playbooks/site.yml{mode}")

    tracker = Tracker.for_hosts([h.name for h in cluster.hosts])
    console.update(tracker, set(tracker.hosts))

    def on_event(event: dict) -> None:
        console.update(tracker, tracker.handle(event))

    result = run_playbook(root, "site.yml", limit=args.limit, tags=args.tags, check=args.check, diff=args.diff,
                          on_event=on_event)
    console.summary(tracker, str(result.log))
    if args.json:
        dump_json(out, {"cluster": cluster.cluster, "inventory": str(root), "rc": result.rc,
                        "log": str(result.log), **tracker.as_dict()})
    if tracker.ok and result.rc == 0:
        return EXIT_OK
    if not tracker.failures:
        console.write(f"ansible-playbook ended with rc {result.rc} ({result.status}): see {result.log}")
    return EXIT_FAILED


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

    p = sub.add_parser("inventory", help="render the Ansible inventory from hosts.yaml")
    with_output(p)
    p.set_defaults(func=cmd_inventory)

    p = sub.add_parser("up", help="converge every node (playbooks/site.yml)")
    with_output(p)
    p.add_argument("--limit", help="only these hosts (Ansible pattern)")
    p.add_argument("--tags", help="only these roles (comma-separated role names)")
    p.add_argument("--check", action="store_true", help="show what would change, change nothing")
    p.add_argument("--diff", action="store_true", help="show file differences")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.set_defaults(func=cmd_up)
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
