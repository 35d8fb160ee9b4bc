"""``hvdcluster up``: converge every node; on a cluster converged before from the same inputs, only the drifted
nodes (the fast path: what to repair is decided by :mod:`.repair`)."""

from __future__ import annotations

import argparse
import sys

import dataclasses

from .. import lock
from ..errors import HvdError
from ..output import dump_json
from ..progress import transfer_report
from .. import repair
from . import rolling, runs
from .common import EXIT_FAILED, EXIT_OK, check_output, console_for, inventory_root, load_and_resolve, render


def _fast_path(args: argparse.Namespace) -> int | None:
    """`up` on a cluster converged before from the same inputs: read every node (one module call each); nodes in
    sync are not converged again; a drifted node runs the roles that own its drifted items and those after them;
    then the post-flight proves the whole cluster again. None: converge fully instead (no record of some node,
    inputs changed since the last full converge, a node unreachable, or a drift no role repairs)."""
    from .. import drift, drift_text, inputs, nodestate
    from ..runner import check_environment

    check_environment()
    output = check_output(args.output)
    cluster, plan = load_and_resolve(args.hosts, args.bundle)
    root = inventory_root(output, cluster)
    if not (root / "hosts.yml").is_file() or not nodestate.recorded_inputs(root):
        return None
    console = console_for(args)
    names = [h.name for h in cluster.hosts]
    with lock.hold(root, "up"):
        render(cluster, output, plan)
        if nodestate.inputs_digest(root) != nodestate.recorded_inputs(root):
            changed = inputs.change(root, nodestate.recorded_parts(root))
            if changed is None:
                console.write("inputs changed since the last full converge: converging every node")
                return None
            return _after_change(args, console, cluster, root, changed)
        # Deep when asked, or while a deep read (check --deep) found env files changed in content only.
        deep = args.deep or any(n in names for n in nodestate.deep_findings(root))
        looked = runs.drift_from_records(root, names, console,
                                         step=f"read every node's state ({len(names)} nodes, read-only)", deep=deep,
                                         health=True)
        if looked is None:
            return None
        want, reading, report = looked
        todo = dataclasses.replace(repair.plan(report, names), deep=deep)
        fast = todo.summary(reading.seconds)
        if not report.drifted:
            console.write(f"  {drift_text.render(report)}")
            console.write(f"every node is in its desired state (read in {reading.seconds:.1f} s): nothing to converge")
            # read in the same play as the state
            ready = runs.health_tail(root, reading.health, names, {}, "up", reading.health_seconds)
            runs.write_health(console, ready)
            rc = EXIT_FAILED if ready["not_ready"] else EXIT_OK
            if args.json:
                dump_json(sys.stdout, {"cluster": cluster.cluster, "inventory": str(root), "rc": 0, "log": reading.log,
                                       "ok": True, "hosts": {n: {"status": "up-to-date", "ok": 0, "changed": 0,
                                                                 "failed": 0, "unreachable": 0, "skipped": 0}
                                                             for n in names},
                                       "failures": [], "notices": {}, "preflight": {},
                                       "transfers": transfer_report([]), "fast_path": fast,
                                       "converged": [], "not_repaired": [], "health": ready})
            return rc
        console.write(drift_text.render(report))
        for node in todo.reinstalled:
            console.write(f"  {node}: reinstalled since its last converge ({drift.REINSTALLED} changed): the "
                          "pre-flight and every role run on it, never a partial repair")
        if not todo.targets:  # only what no role repairs: nothing to converge, and not in sync either
            unrepairable = drift_text.unrepaired_lines(report)
            for line in unrepairable:
                console.write(f"not repaired: {line}")
            if args.json:
                dump_json(sys.stdout, {"cluster": cluster.cluster, "inventory": str(root), "rc": 1, "log": reading.log,
                                       "ok": False, "fast_path": fast, "converged": [], "not_repaired": unrepairable})
            return EXIT_FAILED
        roles = ", ".join(r for r in todo.roles if r != "hvd_verify")
        console.step(2, 2, f"repair {', '.join(todo.targets)} ({roles}), then prove the whole cluster (hvd_verify)")
        # The roles' plays take only the drifted nodes (hvd_targets); the post-flight takes every node.
        return _converge_and_prove(args, console, cluster, root, todo, want, records_current=True,
                                   digest=nodestate.recorded_inputs(root), extra={"fast_path": fast})


def _after_change(args: argparse.Namespace, console, cluster, root, changed) -> int | None:
    """The inputs changed in variables only (inputs.change): one read of every node (as the fast path's), then every
    node converges from the earliest role that reads a changed variable (or that a node's drift needs) to the end of
    site.yml, the post-flight proves the cluster, and every node is read back (the loop contract, each node against its
    peers: the records were made from the old inputs). None: converge fully instead (a node without a record or not
    read, a node reinstalled)."""
    from .. import nodestate

    names = [h.name for h in cluster.hosts]
    console.write(f"inputs changed since the last converge: {', '.join(changed.variables)} (read from "
                  f"{changed.first_role} on)")
    deep = args.deep or any(n in names for n in nodestate.deep_findings(root))
    looked = runs.drift_from_records(root, names, console,
                                     step=f"read every node's state ({len(names)} nodes, read-only)", deep=deep)
    if looked is None:
        console.write("  not every node could be read against its record: converging every node")
        return None
    want, _, report = looked
    todo = dataclasses.replace(repair.after_change(report, names, changed.first_role), deep=deep)
    if todo.reinstalled:
        console.write(f"  reinstalled since the last converge: {', '.join(todo.reinstalled)}: converging every node")
        return None
    roles = ", ".join(r for r in todo.roles if r != "hvd_verify")
    console.step(2, 2, f"converge every node ({roles}), then prove the whole cluster (hvd_verify)")
    return _converge_and_prove(args, console, cluster, root, todo, want, records_current=False,
                               digest=nodestate.inputs_digest(root),
                               extra={"changed_inputs": {"variables": changed.variables, "roles": todo.roles}})


def _converge_and_prove(args: argparse.Namespace, console, cluster, root, todo: repair.Repair, want: dict, *,
                        records_current: bool, digest: str, extra: dict) -> int:
    """The tail of both partial runs: one site.yml run with ``todo``'s roles (then the post-flight and the read-back),
    every node read back against what it must be (the loop contract: ``records_current``, against its own record;
    else, the inputs having changed, against its peers), and the inputs recorded as ``digest`` only when all of it
    ended well (forgotten meanwhile: a run cut short is not taken for a converge)."""
    from .. import health, nodestate

    saved = nodestate.saved_inputs(root)
    nodestate.forget_inputs(root)
    events: list[dict] = []
    tracker, result = runs.tracked_run(root, cluster, console, "site.yml", tags=todo.tags,
                                       extravars={**todo.extravars, **runs.HEALTH}, events=events)
    # A repair changes its targets only; a change of inputs, every node its roles ran on.
    converged = todo.targets if records_current else [h for h, s in tracker.hosts.items()
                                                      if (s.ok or s.changed) and not s.unreachable]
    # What no role repairs is named there too ("no role repairs it").
    unrepaired = runs.close_loop(root, cluster, tracker, events, want, converged=converged,
                                 records_current=records_current)
    if tracker.ok and result.rc == 0 and not unrepaired:
        nodestate.record_inputs(root, digest)
    else:
        runs.keep_record_if_untouched(root, saved, tracker, unrepaired)
    if todo.deep:  # read back deep: a repaired node's env is as installed, byte for byte
        nodestate.note_deep_findings(root, found=[line.split(":", 1)[0] for line in unrepaired
                                                  if ": env.files:" in line], cleared=converged)
    ready = runs.health_tail(root, health.readings_in(events), [h.name for h in cluster.hosts], tracker.throughput,
                             "up", health.read_seconds(events))
    return runs.finish(args, console, cluster, root, tracker, result,
                       {**extra, "converged": [n for n in todo.targets if tracker.hosts[n].ended_well]}, unrepaired,
                       ready)


def _accepted(args: argparse.Namespace) -> int:
    """`up --accept`: the converge as `up` does it, then, when it ended well, `health --full` over every node as the
    cluster's acceptance (exit 1 naming the culprit). With --json the converge's document gains "acceptance"."""
    import contextlib
    import io
    import json

    from .health import check_bandwidth_options

    settings = check_bandwidth_options(args, True, "--accept")
    clash = [f"--{k}" for k in ("check", "rolling", "tags") if getattr(args, k, None)]
    if clash:
        raise HvdError(f"--accept: not with {', '.join(clash)} (the acceptance measures a cluster converged in full)")
    out = io.StringIO()
    with contextlib.redirect_stdout(out) if args.json else contextlib.nullcontext():
        rc = _converge(args)
    doc = json.loads(out.getvalue()) if args.json and out.getvalue().strip() else None
    console = console_for(args)
    full = None
    if rc == EXIT_OK:
        full = _acceptance(args, console, settings)
        rc = EXIT_FAILED if full is None or full.get("refused") or not full["passed"] else EXIT_OK
    else:
        console.write("acceptance not run: the converge did not end well")
    if doc is not None:
        dump_json(sys.stdout, {**doc, "acceptance": full})
    return rc


def _acceptance(args: argparse.Namespace, console, settings) -> dict | None:
    """Read every node's health (quick) and measure (health --full); the report to the console."""
    from .. import bandwidth, health, spec
    from .common import existing_inventory
    from .health import measure

    cluster = spec.load(args.hosts)
    root = existing_inventory(args, cluster)
    names = [h.name for h in cluster.hosts]
    console.step(1, 1, f"acceptance: nccl-tests over {len(names)} nodes (health --full)")
    with lock.hold(root, "up --accept"):
        reading = health.read(root, args.limit, hosts=[] if args.limit else names, quick=True)
        scope = [n for n in names if n in reading.found]
        for node, why in reading.unreachable.items():
            console.write(f"  {node}: not read: {why}")
        if reading.unreachable:
            return None
        full = measure(root, scope, reading.found, settings, "up --accept", console.write)
    if not full.get("refused"):
        for line in bandwidth.render(full).splitlines():
            console.write(line)
    if full["applicable"] and full["passed"]:
        console.write(f"accepted: every run met its floor ({len(full['runs'])} runs in {full['seconds']:.1f} s)")
    elif full["applicable"]:
        culprit = full["culprit"] or {}
        console.write(f"not accepted: {', '.join(culprit.get('nodes', [])) or 'the cluster'} "
                      f"({culprit.get('kind', 'run')}): {culprit.get('why', '')}")
    return full


def cmd_up(args: argparse.Namespace) -> int:
    if getattr(args, "accept", False):
        return _accepted(args)
    from .health import check_bandwidth_options

    check_bandwidth_options(args, False, "--accept")  # an acceptance option without --accept: exit 2
    return _converge(args)


def _converge(args: argparse.Namespace) -> int:
    if getattr(args, "rolling", False):
        return rolling.cmd_rolling(args)
    rolling.check_arguments(args, [])  # a rolling option without --rolling: exit 2
    if repair.takes_fast_path(full=args.full, limit=args.limit, tags=args.tags, check=args.check,
                              verify=args.verify):
        fast = _fast_path(args)
        if fast is not None:
            return fast
    return runs.converge(args, "site.yml", "converge", "up")
