"""The stages every converge passes, each with one home, in the order `up` takes them (:mod:`.up` is that line;
`up --rolling` drives the same stages a batch at a time, `preflight` and `bundle` take the ones they need):

    start      hosts.yaml read and its stack resolved, every argument checked: nothing written, no node contacted
    write      the inventory, under the one-run lock (:func:`write_inventory`)
    read and   every node held against its record, and what to converge: the fast path, a repair, a change of
    decide     inputs, every node (:func:`hvdcluster.cli.up.decide`, with :mod:`hvdcluster.repair`'s policy)
    converge   one playbook run with a live line per node (:func:`run_pass`: :func:`tracked_run`)
    confirm    every node read back with the reader `check` uses and held against what it must be; a node that is,
               recorded (:func:`run_pass`: :func:`close_loop`, the loop contract); the quick health read
    record     the inputs recorded as converged only when all of it ended well (:func:`record`)
    summary    each node's line, what the read-back left wrong, the health read, ``--json``, the exit code
               (:func:`finish`)
"""

from __future__ import annotations

import argparse
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import compat, inventory, redact, spec
from ..output import dump_json
from ..progress import Console, Tracker, stack_context
from .common import (
    EXIT_FAILED,
    EXIT_OK,
    bastion_problem,
    check_limit,
    check_output,
    check_tags,
    console_for,
    inventory_root,
    load_and_resolve,
    render,
)

# up --verify: the post-flight's slow proofs even when nothing changed since they last passed.
FULL_VERIFY = {"hvd_verify_allreduce": "always", "hvd_horovod_gate_always": True}
# Every converge of up (and of each roll batch) ends with the quick health read, in the read-back's play (state.yml).
HEALTH = {"hvd_state_health": True}


# ------------------------------------------------------------------------------------------------------ start, write


@dataclass
class Session:
    """One command's run: its arguments, its console, hosts.yaml resolved and the inventory folder it writes."""

    args: argparse.Namespace
    console: Console
    cluster: spec.ClusterSpec
    plan: compat.Plan
    root: Path  # <output>/<cluster>: written by write_inventory, under the lock

    @property
    def names(self) -> list[str]:
        """The host names of hosts.yaml, in its order."""
        return [h.name for h in self.cluster.hosts]


def start(args: argparse.Namespace) -> Session:
    """Every check before anything is written or any node contacted (exit 2 on the first): the operator environment
    (an ANSIBLE_* setting that turns host key checking off), ``-o``, ``--tags``, hosts.yaml and its stack (an offline
    bundle checked with it), ``--limit``."""
    from ..runner import check_environment

    console = console_for(args)
    check_environment()
    output = check_output(args.output)
    check_tags(getattr(args, "tags", None))
    cluster, plan = load_and_resolve(args.hosts, getattr(args, "bundle", None))
    check_limit(getattr(args, "limit", None), cluster)
    return Session(args, console, cluster, plan, inventory_root(output, cluster))


def write_inventory(session: Session) -> Path:
    """The inventory for hosts.yaml as it is now (call it under the lock: one run at a time)."""
    root = render(session.cluster, session.root.parent, session.plan)
    session.console.write(f"  cluster {session.cluster.cluster}: {len(session.names)} hosts, inventory {root}")
    return root


# ---------------------------------------------------------------------------------------------- converge, confirm


@dataclass
class Pass:
    """One playbook run to make and how its result is confirmed. ``desired``: each node's record, or None for a run
    that is not read back (the pre-flight, ``--check``, ``--tags``); ``changed``: the nodes the run was to change
    (None: every node it reached); ``among``: only these nodes are read back (a roll's nodes done so far); ``health``:
    the nodes whose quick health read ends the run (None: no health read)."""

    playbook: str = "site.yml"
    tags: str | None = None
    limit: str | None = None
    check: bool = False
    diff: bool = False
    extravars: dict[str, Any] = field(default_factory=dict)
    desired: dict[str, dict | None] | None = None
    records_current: bool = False
    changed: list[str] | None = None
    among: list[str] | None = None
    health: list[str] | None = None
    by: str = "up"  # the command the health read is recorded for


@dataclass
class Outcome:
    """What one pass gave: the tracker and ansible-runner's result, the lines the read-back still finds wrong, and
    the health read (None where none was asked)."""

    tracker: Tracker
    result: Any
    events: list[dict] = field(default_factory=list)
    unrepaired: list[str] = field(default_factory=list)
    health: dict[str, Any] | None = None
    converged: list[str] = field(default_factory=list)  # the nodes the run was to change and that it reached

    @property
    def ended_well(self) -> bool:
        """Every node ended well, ansible-playbook too, and the read-back found nothing wrong."""
        return self.tracker.ok and self.result.rc == 0 and not self.unrepaired

    @property
    def ready(self) -> bool:
        """Ended well, and no node (nor the post-flight) is below what the health read asks."""
        return self.ended_well and not (self.health or {}).get("not_ready")


def run_pass(session: Session, todo: Pass) -> Outcome:
    """Converge, then confirm: the run, every node read back against what it must be (when ``todo.desired``), then
    the quick health read of ``todo.health``'s nodes."""
    from .. import nodestate

    events: list[dict] = []
    tracker, result = tracked_run(session.root, session.cluster, session.console, todo.playbook, limit=todo.limit,
                                  tags=todo.tags, check=todo.check, diff=todo.diff,
                                  extravars=todo.extravars or None, events=events)
    outcome = Outcome(tracker, result, events)
    if todo.desired is not None:
        reached = [h for h, s in tracker.hosts.items() if (s.ok or s.changed) and not s.unreachable]
        outcome.converged = reached if todo.changed is None else list(todo.changed)
        outcome.unrepaired = close_loop(session.root, session.cluster, tracker, events, todo.desired,
                                        converged=outcome.converged, records_current=todo.records_current,
                                        among=todo.among)
    if todo.health is not None:
        outcome.health = health_tail(session.root, nodestate.health_in(events), todo.health, tracker.throughput,
                                     todo.by, nodestate.health_seconds_in(events))
    return outcome


def tracked_run(root: Path, cluster: spec.ClusterSpec, console: Console, playbook: str, *,
                limit: str | None = None, tags: str | None = None, check: bool = False, diff: bool = False,
                extravars: dict | None = None, events: list[dict] | None = None) -> tuple[Tracker, Any]:
    """One playbook run with a live line per node; the tracker of what happened and ansible-runner's result
    (``events``, when given, receives every event: the nodes' read-back is among them)."""
    from ..runner import run_playbook

    tracker = Tracker.for_hosts([h.name for h in cluster.hosts], pinned=inventory.pinned_hosts(cluster))
    tracker.context = stack_context(inventory.read(root).vars.get("hvd_stack") or {})
    console.update(tracker, set(tracker.hosts))

    def on_event(event: dict) -> None:
        if events is not None:
            events.append(event)
        console.update(tracker, tracker.handle(event))

    # A step of minutes (a build, an install) is named with its age while it runs: no event comes meanwhile.
    stop = threading.Event()
    beat = threading.Thread(target=lambda: [console.heartbeat(tracker) for _ in iter(lambda: stop.wait(5), True)],
                            name="hvd-heartbeat", daemon=True)
    beat.start()
    try:
        result = run_playbook(root, playbook, limit=limit, tags=tags, check=check, diff=diff, extravars=extravars,
                              on_event=on_event, env=redact.run_env(cluster))
    finally:
        stop.set()
        beat.join()
    return tracker, result


def close_loop(root: Path, cluster: spec.ClusterSpec, tracker: Tracker, events: list[dict],
               desired: dict[str, dict | None], *, converged: list[str], records_current: bool,
               among: list[str] | None = None) -> list[str]:
    """The loop contract: every node the converge read back (site.yml's last play, the reader `check` uses) is held
    against what it must be (drift.confirm); a node that is records it as its desired state, a node that is not is
    marked not repaired. ``among``: only these nodes are held (and against each other, when the inputs changed): a
    roll's nodes done so far, not the ones still on their old state. Returns one line per node and item that still
    differs."""
    from .. import drift, drift_text, nodestate

    found, _ = nodestate.collect(events)
    names = [h.name for h in cluster.hosts]
    scope = [n for n in names if n in found and (among is None or n in among)]
    report = drift.confirm({n: desired.get(n) for n in scope}, {n: found[n] for n in scope},
                           converged=converged, records_current=records_current, order=names)
    for node in scope:
        if node in report.drifted:
            tracker.hosts[node].unrepaired = True
        else:
            nodestate.record(root, node, found[node])
    return drift_text.unrepaired_lines(report)


def health_tail(root: Path, readings: dict[str, dict], nodes: list[str], throughput: dict, by: str,
                seconds: float = 0.0) -> dict[str, Any]:
    """The quick health read that ends `up` (health.in_the_loop: judged and recorded for `run`) and the post-flight's
    throughput against the floors of the links read (health.judge_postflight): {nodes, not_ready, seconds,
    postflight}; ``not_ready`` holds a line per failure (a node's, or the post-flight below its floor)."""
    from .. import health

    looked = health.in_the_loop(root, readings, nodes, by, seconds)
    post = health.judge_postflight(throughput, {n: readings[n] for n in nodes if n in readings})
    return {**looked, "not_ready": looked["not_ready"] + post["failed"], "postflight": post}


def write_health(console: Console, health: dict[str, Any] | None) -> None:
    if not health or not health["nodes"]:
        return
    ready = [n for n, h in health["nodes"].items() if h["healthy"]]
    console.write(f"Health (quick read, {health['seconds']:.2f} s): {len(ready)} of {len(health['nodes'])} nodes ready")
    for line in health["not_ready"]:
        console.write(f"  {line}")
    for line in health["postflight"]["notes"]:
        console.write(f"  note {line}")


# ----------------------------------------------------------------------------------------------- record, summary


def forget_record(session: Session) -> bytes | None:
    """Before a converge that is to be recorded: the inputs' record forgotten (recorded again only when the run ends
    well: a run cut short never counts), its bytes returned for :func:`record` to put back if the run changed nothing."""
    from .. import nodestate

    saved = nodestate.saved_inputs(session.root)
    nodestate.forget_inputs(session.root)
    return saved


def record(session: Session, outcome: Outcome, saved: bytes | None, *, digest: str | None = None,
           allowed: bool = True) -> bool:
    """The inputs recorded as converged (the fast path's reference) when ``outcome`` ended well and the run may be
    recorded (``allowed``: not narrowed by --limit): as ``digest``, or as they are after the run (None: a first
    converge makes the cluster key, which is one of the inputs). Else the record forgotten at the start is put back
    only when the run changed no node (:func:`keep_record_if_untouched`). Whether the inputs were recorded."""
    from .. import nodestate

    if outcome.ended_well and allowed:
        nodestate.record_inputs(session.root, digest or nodestate.inputs_digest(session.root))
        return True
    keep_record_if_untouched(session.root, saved, outcome.tracker, outcome.unrepaired)
    return False


def finish(session: Session, outcome: Outcome, extra: dict | None = None) -> int:
    """The summary of one pass, what the read-back left wrong, the health read, ``--json``; the exit code."""
    args, console, cluster, root = session.args, session.console, session.cluster, session.root
    tracker, result, unrepaired, health = outcome.tracker, outcome.result, outcome.unrepaired, outcome.health
    console.summary(tracker, str(result.log))
    if unrepaired:
        console.write("Not repaired (read back after the converge with the reader `check` uses):")
        for line in unrepaired:
            console.write(f"  {line}")
    write_health(console, health)
    problem = bastion_problem(cluster, root) if any(h.unreachable for h in tracker.hosts.values()) else ""
    if problem:
        console.write(f"nodes unreachable: {problem}")
    if args.json:
        dump_json(sys.stdout, {"cluster": cluster.cluster, "inventory": str(root), "rc": result.rc,
                               "log": str(result.log), **tracker.as_dict(), "not_repaired": list(unrepaired),
                               **(extra or {}), **({"health": health} if health is not None else {})})
    if outcome.ready:
        return EXIT_OK
    if not tracker.failures and not unrepaired:
        console.write(f"ansible-playbook ended with rc {result.rc} ({result.status}): see {result.log}")
    return EXIT_FAILED


def keep_record_if_untouched(root: Path, saved: bytes | None, tracker: Tracker, unrepaired: list[str]) -> bool:
    """A run that ended without changing any node (a node unreachable, a host key refused, nothing else wrong) leaves
    every node as the record forgotten at its start says: put that record back, so that the next `up` reads the
    nodes against it (the fast path) instead of converging every node. A run that changed something, failed a task
    or was cut short keeps it forgotten."""
    from .. import nodestate

    untouched = tracker.finished and all(h.changed == 0 and h.failed == 0 for h in tracker.hosts.values())
    if saved is None or not untouched or unrepaired:
        return False
    nodestate.restore_inputs(root, saved)
    return True
