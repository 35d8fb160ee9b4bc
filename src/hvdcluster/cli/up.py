"""``hvdcluster up``: one line from hosts.yaml to the summary, each stage with its home in :mod:`.stages`:

    start -> write the inventory -> read every node against its record -> decide -> converge -> confirm -> record
    -> summary

What to converge is decided here (:func:`decide`) with :mod:`hvdcluster.repair`'s policy: on a cluster converged
before from the same inputs, only the drifted nodes, with the roles their drift needs (the fast path); after a change
of variables only, every node from the earliest role that reads one; else (asked, or when the records cannot decide)
every node with every role. ``up --rolling`` (:mod:`.rolling`) drives the same stages a batch at a time;
``up --accept`` ends a converge that ended well with ``health --full``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from dataclasses import dataclass, field
from typing import Any

from .. import lock, repair
from ..errors import HvdError
from ..output import dump_json
from ..progress import transfer_report
from . import stages
from .common import EXIT_FAILED, EXIT_OK, console_for

STEPS = 3  # [1/3] hosts.yaml and the inventory, [2/3] read and decide, [3/3] converge (confirm, record)

# What decide() can conclude.
FULL = "full"  # every node, every role (as asked, or the records cannot decide)
IN_SYNC = "in sync"  # nothing to converge
BY_HAND = "by hand"  # only what no role repairs drifted: nothing to converge, not in sync either
REPAIR = "repair"  # the drifted nodes, the roles their drift needs (the fast path)
CHANGE = "change"  # the inputs changed in variables only: every node, from the earliest role that reads one


@dataclass
class Decision:
    """What `up` converges, decided from its arguments and one read of every node."""

    kind: str
    records_current: bool  # the records were made from these very inputs: nodes are held to their own
    digest: str  # the inputs' digest as decide read it (what a repair or a change of inputs records)
    why: str = ""  # FULL: why every node converges
    todo: repair.Repair | None = None  # REPAIR, CHANGE (and IN_SYNC, BY_HAND: what the read found)
    want: dict[str, dict | None] = field(default_factory=dict)  # each node's record
    reading: Any = None  # nodestate.Reading of the read
    report: Any = None  # drift.Report of the read
    changed: Any = None  # CHANGE: inputs.Change


def cmd_up(args: argparse.Namespace) -> int:
    if getattr(args, "accept", False):
        return _accepted(args)
    from .health import check_bandwidth_options

    check_bandwidth_options(args, False, "--accept")  # an acceptance option without --accept: exit 2
    return _converge(args)


def _converge(args: argparse.Namespace) -> int:
    from . import rolling

    if getattr(args, "rolling", False):
        return rolling.cmd_rolling(args)
    rolling.check_arguments(args, [])  # a rolling option without --rolling: exit 2
    session = stages.start(args)
    console = session.console
    console.step(1, STEPS, f"read {args.hosts}, resolve the stack, write the inventory")
    with lock.hold(session.root, "up"):  # one run at a time: taken before anything is written
        stages.write_inventory(session)
        asked = not repair.takes_fast_path(full=args.full, limit=args.limit, tags=args.tags, check=args.check,
                                           verify=args.verify)
        decision = decide(session, full=asked, health=True, step=(2, STEPS))
        if decision.kind == IN_SYNC:
            return _in_sync(session, decision)
        if decision.kind == BY_HAND:
            return _by_hand(session, decision)
        todo, text, recorded, digest = _pass(session, decision)
        console.step(3, STEPS, text)
        saved = stages.forget_record(session) if recorded else None
        outcome = stages.run_pass(session, todo)
        if recorded:
            stages.record(session, outcome, saved, digest=digest, allowed=not args.limit)
            if todo.extravars.get("hvd_state_deep"):  # read back deep: a converged node's env is as installed
                from .. import nodestate

                nodestate.note_deep_findings(session.root, found=[line.split(":", 1)[0] for line in outcome.unrepaired
                                                                  if ": env.files:" in line],
                                             cleared=outcome.converged)
    return stages.finish(session, outcome, _extra(decision, outcome))


# ------------------------------------------------------------------------------------------------ read and decide


def decide(session: stages.Session, *, full: bool, health: bool, step: tuple[int, int] | None = None) -> Decision:
    """Read every node against its record (when the records can decide) and decide what to converge; what was found
    and decided is said on the console. ``full``: every node and every role, as asked (no read); ``health``: the
    quick health read in the same play (`up` reports it when nothing is to converge); ``step``: the read said as that
    step. `up` and `up --rolling` both decide here."""
    from .. import drift, drift_text, inputs, nodestate

    args, console, root, names = session.args, session.console, session.root, session.names
    recorded, digest = nodestate.recorded_inputs(root), nodestate.inputs_digest(root)
    current = bool(recorded) and recorded == digest

    def say(text: str) -> None:
        console.step(*step, text) if step else console.write(text)

    def converge_all(why: str) -> Decision:
        say(f"every node converges: {why}")
        return Decision(FULL, current, digest, why)

    if full:
        flags = [f"--{k}" for k in ("full", "limit", "tags", "check", "verify") if getattr(args, k, None)]
        return converge_all(f"as asked ({', '.join(flags) or '--full'})")
    if not recorded:
        return converge_all("no converge recorded from these inputs")
    changed = None
    if not current:
        changed = inputs.change(root, nodestate.recorded_parts(root))
        if changed is None:
            return converge_all("inputs changed since the last full converge")
        console.write(f"inputs changed since the last converge: {', '.join(changed.variables)} (read from "
                      f"{changed.first_role} on)")
    # Deep when asked, or while a deep read (check --deep) found env files changed in content only.
    deep = getattr(args, "deep", False) or any(n in names for n in nodestate.deep_findings(root))
    want = nodestate.desired(root, names)
    if any(state is None for state in want.values()):
        return converge_all(f"no record of {', '.join(n for n, s in want.items() if s is None)}")
    say(f"read every node's state ({len(names)} nodes, read-only)" + (" (deep: every env file's content)"
                                                                       if deep else ""))
    reading = nodestate.read(root, hosts=names, deep=deep, health=health and changed is None)
    if reading.unreachable:
        console.write(f"  not read: {', '.join(reading.unreachable)}: converging every node")
        return Decision(FULL, current, digest, "a node could not be read")
    report = drift.compare(want, reading.found, [])
    if deep:
        nodestate.note_deep_findings(root, found=[n for n in names if drift.env_files_differ(report, n)],
                                     cleared=names)
    console.write(f"  {drift_text.render(report)}" if not report.drifted else drift_text.render(report))
    if changed is not None:
        todo = dataclasses.replace(repair.after_change(report, names, changed.first_role), deep=deep)
        if todo.reinstalled:
            console.write(f"  reinstalled since the last converge: {', '.join(todo.reinstalled)}: converging every "
                          "node")
            return Decision(FULL, current, digest, "a node was reinstalled")
        return Decision(CHANGE, current, digest, todo=todo, want=want, reading=reading, report=report, changed=changed)
    todo = dataclasses.replace(repair.plan(report, names), deep=deep)
    for node in todo.reinstalled:
        console.write(f"  {node}: reinstalled since its last converge ({drift.REINSTALLED} changed): the "
                      "pre-flight and every role run on it, never a partial repair")
    kind = IN_SYNC if not report.drifted else BY_HAND if not todo.targets else REPAIR
    return Decision(kind, current, digest, todo=todo, want=want, reading=reading, report=report)


def _pass(session: stages.Session, decision: Decision) -> tuple[stages.Pass, str, bool, str | None]:
    """The converge a decision asks for: (the pass, what step 3 says, whether it is recorded, the inputs' digest to
    record: None for the digest after the run)."""
    from .. import nodestate

    args, root, names = session.args, session.root, session.names
    todo = decision.todo
    if decision.kind == FULL:
        check, tags = args.check, args.tags
        converging = not check
        extravars = {**(stages.FULL_VERIFY if args.verify else {}), **(repair.DEEP if args.deep else {}),
                     **(stages.HEALTH if converging else {})}
        recorded = converging and not tags  # a run of some roles (--tags) records nothing, and forgets nothing
        mode = " (check mode: nothing is changed)" if check else ""
        return (stages.Pass(tags=tags, limit=args.limit, check=check, diff=args.diff, extravars=extravars,
                            desired=nodestate.desired(root, names) if recorded else None,
                            records_current=decision.records_current, health=names if converging else None),
                f"converge playbooks/site.yml{mode}", recorded, None)
    roles = ", ".join(r for r in todo.roles if r != repair.POST_FLIGHT)
    extravars = {**todo.extravars, **stages.HEALTH}
    if decision.kind == REPAIR:  # the roles' plays take only the drifted nodes (hvd_targets); the post-flight, all
        return (stages.Pass(tags=todo.tags, extravars=extravars, desired=decision.want, records_current=True,
                            changed=todo.targets, health=names),
                f"repair {', '.join(todo.targets)} ({roles}), then prove the whole cluster ({repair.POST_FLIGHT})",
                True, decision.digest)
    # CHANGE: every node read back against its peers (the records were made from the old inputs)
    return (stages.Pass(tags=todo.tags, extravars=extravars, desired=decision.want, records_current=False,
                        health=names),
            f"converge every node ({roles}), then prove the whole cluster ({repair.POST_FLIGHT})", True,
            decision.digest)


def _extra(decision: Decision, outcome: stages.Outcome) -> dict[str, Any]:
    """What `up --json` adds to the summary's document: the nodes converged, and what the fast path decided."""
    hosts = outcome.tracker.hosts
    if decision.kind == FULL:
        return {"converged": [h for h, s in hosts.items() if (s.ok or s.changed) and s.ended_well]}
    converged = {"converged": [n for n in decision.todo.targets if hosts[n].ended_well]}
    if decision.kind == REPAIR:
        return {"fast_path": decision.todo.summary(decision.reading.seconds), **converged}
    return {"changed_inputs": {"variables": decision.changed.variables, "roles": decision.todo.roles}, **converged}


# --------------------------------------------------------------------------------- nothing to converge: the summary


def _in_sync(session: stages.Session, decision: Decision) -> int:
    """Every node in its desired state: the health read of the same play is the summary."""
    console, reading, names = session.console, decision.reading, session.names
    console.write(f"every node is in its desired state (read in {reading.seconds:.1f} s): nothing to converge")
    ready = stages.health_tail(session.root, reading.health, names, {}, "up", reading.health_seconds)
    stages.write_health(console, ready)
    if session.args.json:
        dump_json(sys.stdout, {"cluster": session.cluster.cluster, "inventory": str(session.root), "rc": 0,
                               "log": reading.log, "ok": True,
                               "hosts": {n: {"status": "up-to-date", "ok": 0, "changed": 0, "failed": 0,
                                             "unreachable": 0, "skipped": 0} for n in names},
                               "failures": [], "notices": {}, "preflight": {}, "transfers": transfer_report([]),
                               "fast_path": decision.todo.summary(reading.seconds), "converged": [],
                               "not_repaired": [], "health": ready})
    return EXIT_FAILED if ready["not_ready"] else EXIT_OK


def _by_hand(session: stages.Session, decision: Decision) -> int:
    """Only what no role repairs drifted (the OS release, the kernel): named, nothing converged, exit 1."""
    from .. import drift_text

    unrepairable = drift_text.unrepaired_lines(decision.report)
    for line in unrepairable:
        session.console.write(f"not repaired: {line}")
    if session.args.json:
        dump_json(sys.stdout, {"cluster": session.cluster.cluster, "inventory": str(session.root), "rc": 1,
                               "log": decision.reading.log, "ok": False,
                               "fast_path": decision.todo.summary(decision.reading.seconds), "converged": [],
                               "not_repaired": unrepairable})
    return EXIT_FAILED


# ------------------------------------------------------------------------------------------------------ up --accept


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
