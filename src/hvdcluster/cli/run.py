"""``hvdcluster run``: launch a Horovod job with horovodrun on the first node, behind the launch gate."""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from .. import inventory, lock, spec
from ..errors import HvdError
from .common import EXIT_FAILED, EXIT_OK, check_limit, existing_inventory


def _launch_gate(root: Path, hosts: list[str]) -> dict | int:
    """Refuse a launch across ``hosts`` (the job's nodes) when they differ in what every rank must share (the env,
    the Horovod build, MPI, NCCL) or cannot be read: exit 1 naming the odd node and item. Else each node's state, as
    read: the launch takes the GPU counts and the fabric interface from it (one read of the nodes, not two).

    Beside `up --rolling` the gate reads without the run lock: the nodes a roll is changing carry its mark, which
    the job lease refuses, and a job on nodes already changed (or not yet) may start while the roll goes on."""
    from .. import drift, nodestate

    with lock.hold(root, "run", beside=(lock.ROLL,)):
        reading = nodestate.read(root, limit=",".join(hosts), hosts=hosts)
    problems = [f"{node}: {why}" for node, why in reading.unreachable.items()] + drift.gate(reading.found)
    if not problems:
        return reading.found
    print("hvdcluster: not launching: the nodes differ in what every rank must share "
          "(run `hvdcluster check` for the whole report, `hvdcluster up` to repair, or --no-gate to launch anyway):",
          file=sys.stderr)
    for line in problems:
        print(f"  {line}", file=sys.stderr)
    return EXIT_FAILED


def _health_gate(root: Path, hosts: list[str]) -> bool:
    """Refuse (True, the nodes and items named on stderr) when the last health recorded for a node of ``hosts``
    failed (health.refusals: <inventory>/state/health/, written by `health` and `up`'s health read)."""
    from .. import health
    from ..output import printable

    refused = health.refusals(root, hosts)
    if refused:
        print("hvdcluster: not launching: the last health of these nodes failed (run `hvdcluster health` again once "
              "repaired, or --no-gate to launch anyway):", file=sys.stderr)
        for line in refused:
            print(f"  {printable(line, newlines=False)}", file=sys.stderr)  # node-supplied text: escaped
    return bool(refused)


def cmd_run(args: argparse.Namespace) -> int:
    """Validate everything first (no node is contacted for that), then look up what only a node knows."""
    from .. import launch
    from .scheduled import check_usage, cmd_scheduled

    check_usage(args)  # horovodrun's options and Slurm's, never mixed
    if args.slurm or args.sbatch:
        return cmd_scheduled(args)
    if args.np is not None and args.np < 1:
        raise HvdError(f"run: -np must be at least 1 (got {args.np})")
    command = args.job
    cluster = spec.load(args.hosts)
    check_limit(args.limit, cluster)
    root = existing_inventory(args, cluster)
    inv = _limited(inventory.read(root), args.limit)
    nic = args.network_interface or launch.recorded_interface(inv)
    open_slots = launch.open_slots(inv)
    plan = launch.build(inv, command, np=args.np, controller=args.controller, network_interface=nic,
                        gpus=None if open_slots else {})
    if args.print:
        if nic is None:
            print(f"hvdcluster: the fabric interface is read from {next(iter(inv.hosts))} when the job starts "
                  "(pass --network-interface to name it)", file=sys.stderr)
        if open_slots:
            print(f"hvdcluster: slots of {', '.join(open_slots)} are one per GPU found, read from the nodes when the "
                  "job starts (shown as 1; write `slots:` in hosts.yaml to fix them)", file=sys.stderr)
        print(shlex.join(plan.argv()))
        return EXIT_OK
    # A node whose last health (`health`, `up`'s read, `health --full`) failed takes no job: the controller's records.
    if not args.no_gate and _health_gate(root, list(inv.hosts)):
        return EXIT_FAILED
    # The look-ups on the nodes, once everything else is known to be right: the gate's read of every node, or
    # (--no-gate) one SSH read of the facts the roles recorded.
    found = {} if args.no_gate else _launch_gate(root, list(inv.hosts))
    if isinstance(found, int):
        return found
    first = next(iter(inv.hosts))
    if found:
        gpus = launch.counts_read(found, open_slots)
        nic = nic or launch.interface_read(found, first)
    else:
        gpus = launch.gpu_counts(inv, open_slots) if open_slots else {}
        nic = nic or launch.fabric_interface(inv, first)
    plan = launch.build(inv, command, np=args.np, controller=args.controller, network_interface=nic, gpus=gpus)
    return _leased(inv, plan, command)


def _limited(inv: inventory.Inventory, limit: str | None) -> inventory.Inventory:
    """The inventory's nodes that ``--limit`` names (host names or globs, in the inventory's order)."""
    if limit is None:
        return inv
    words = [w.strip() for w in limit.split(",") if w.strip()]
    if any(w.startswith(("!", "&")) or ":" in w for w in words):
        raise HvdError(f"run: --limit {limit!r}: give host names or globs separated by ',' (no '!' or '&')")
    chosen = {h: v for h, v in inv.hosts.items()
              if any(w in ("all", inventory.GROUP) or fnmatch.fnmatchcase(h, w) for w in words)}
    if not chosen:
        raise HvdError(f"run: --limit {limit!r} selects no node of {inv.path}")
    return dataclasses.replace(inv, hosts=chosen)


def _leased(inv: inventory.Inventory, plan, command: list[str]) -> int:
    """Run the job holding a job lease on every node its ranks run on (jobs.py): written before the launch, removed
    when it ends, however it ends. A node being changed by `up --rolling` (its roll mark) is refused."""
    from .. import jobs

    hosts = list(plan.hosts)
    record = jobs.mine(jobs.JOB, jobs.new_id(), hosts=hosts, command=list(command))
    name = jobs.file_name(record)
    looks = jobs.look(inv, hosts, put=record)
    for line in filter(None, (jobs.ignored(h, look) for h, look in looks.items())):
        print(f"hvdcluster: {line}", file=sys.stderr)
    problems = [f"{h}: {look.error}" for h, look in looks.items() if look.error]
    problems += [f"{h}: being changed by {jobs.describe(r)}" for h, look in looks.items() for _, r in
                 jobs.live(look, jobs.ROLL)]
    if problems:
        jobs.look(inv, hosts, drop=[name])
        print("hvdcluster: not launching:", file=sys.stderr)
        for line in problems:
            print(f"  {line}", file=sys.stderr)
        return EXIT_FAILED
    previous = signal.getsignal(signal.SIGTERM)

    def stop(signum, frame):  # noqa: ARG001 - SIGTERM ends the job like Ctrl-C: the lease goes with it
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        return subprocess.run(plan.argv()).returncode
    finally:
        signal.signal(signal.SIGTERM, previous)
        jobs.look(inv, hosts, drop=[name])
