"""One playbook run with a live line per node, the loop closed on what the nodes read back, and its summary;
``hvdcluster preflight`` and `up`'s full converge are one such run."""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path
from typing import Any

from .. import inventory, lock, redact, spec
from ..output import dump_json
from ..progress import Console, Tracker, stack_context
from ..repair import DEEP
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


def drift_from_records(root: Path, names: list[str], console: Console | None = None,
                       step: str | None = None, deep: bool = False,
                       health: bool = False) -> tuple[dict[str, dict | None], Any, Any] | None:
    """The fast path's look, for `up` and `up --rolling`: every node's record held against one read of every node
    (the records must be of the current inputs: the caller checks that). ``(desired, reading, report)``, or None when
    the records cannot decide: a node without a record, or one that could not be read (the caller then converges
    every node). ``step``: said (as step 1 of 2) before the read. ``deep``: every env file's content read too (what
    that read finds is noted for the next `up`, as `check --deep` notes it); ``health``: the quick health read in the
    same play (the reading's ``health``)."""
    from .. import drift, nodestate

    want = nodestate.desired(root, names)
    if any(state is None for state in want.values()):
        return None
    if step and console is not None:
        console.step(1, 2, step + (" (deep: every env file's content)" if deep else ""))
    reading = nodestate.read(root, hosts=names, deep=deep, health=health)
    if reading.unreachable:
        return None
    report = drift.compare(want, reading.found, [])
    if deep:
        nodestate.note_deep_findings(root, found=[n for n in names if drift.env_files_differ(report, n)],
                                     cleared=names)
    return want, reading, report


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


def finish(args: argparse.Namespace, console: Console, cluster: spec.ClusterSpec, root: Path, tracker: Tracker,
           result: Any, extra: dict | None = None, unrepaired: list[str] | None = None,
           health: dict[str, Any] | None = None) -> int:
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
                               "log": str(result.log), **tracker.as_dict(), "not_repaired": list(unrepaired or []),
                               **(extra or {}), **({"health": health} if health is not None else {})})
    if tracker.ok and result.rc == 0 and not unrepaired and not (health or {}).get("not_ready"):
        return EXIT_OK
    if not tracker.failures and not unrepaired:
        console.write(f"ansible-playbook ended with rc {result.rc} ({result.status}): see {result.log}")
    return EXIT_FAILED


def converge(args: argparse.Namespace, playbook: str, what: str, command: str) -> int:
    """Resolve, render the inventory, run one playbook with live progress, then the summary."""
    from .. import nodestate
    from ..runner import check_environment

    console = console_for(args)
    check_environment()  # an ANSIBLE_* setting that turns host key checking off: exit 2, nothing written
    output = check_output(args.output)
    tags = getattr(args, "tags", None)
    check_tags(tags)
    console.step(1, 3, f"read {args.hosts} and resolve the stack")
    cluster, plan = load_and_resolve(args.hosts, getattr(args, "bundle", None))
    check_limit(args.limit, cluster)
    console.write(f"  cluster {cluster.cluster}: {len(cluster.hosts)} hosts")
    # One run at a time: the lock is taken before anything is written, so a second run changes nothing.
    with lock.hold(inventory_root(output, cluster), command):
        console.step(2, 3, "write inventory")
        root = render(cluster, output, plan)
        console.write(f"  {root}")
        check = getattr(args, "check", False)
        mode = " (check mode: nothing is changed)" if check else ""
        console.step(3, 3, f"{what} playbooks/{playbook}{mode}")
        converging = playbook == "site.yml" and not check
        extravars = {**(FULL_VERIFY if getattr(args, "verify", False) else {}),
                     **(DEEP if getattr(args, "deep", False) else {}), **(HEALTH if converging else {})} or None
        names = [h.name for h in cluster.hosts]
        desired = nodestate.desired(root, names) if converging else {}
        inputs = nodestate.inputs_digest(root) if converging else ""
        # The records were made from these same inputs (`up --full` with nothing changed): hold the nodes to them.
        records_current = converging and nodestate.recorded_inputs(root) == inputs
        saved = nodestate.saved_inputs(root) if converging and not tags else None
        if converging and not tags:  # a run of some roles (--tags) records nothing, and so forgets nothing either
            nodestate.forget_inputs(root)  # recorded again only when this run ends well: a run cut short never counts
        events: list[dict] = []
        tracker, result = tracked_run(root, cluster, console, playbook, limit=args.limit, tags=tags, check=check,
                                      diff=getattr(args, "diff", False), extravars=extravars, events=events)
        unrepaired: list[str] = []
        if converging and not tags:
            converged = [h for h, s in tracker.hosts.items() if (s.ok or s.changed) and not s.unreachable]
            unrepaired = close_loop(root, cluster, tracker, events, desired, converged=converged,
                                    records_current=records_current)
            if tracker.ok and result.rc == 0 and not args.limit and not unrepaired:
                # after the run: a first converge makes the cluster key, which is one of the inputs
                nodestate.record_inputs(root, nodestate.inputs_digest(root))  # the fast path's reference
            else:
                keep_record_if_untouched(root, saved, tracker, unrepaired)
    extra = {"converged": [h for h, s in tracker.hosts.items() if (s.ok or s.changed) and s.ended_well]
             } if playbook == "site.yml" else {}
    ready = None
    if converging:
        from .. import health

        ready = health_tail(root, health.readings_in(events), names, tracker.throughput, "up",
                            health.read_seconds(events))
    return finish(args, console, cluster, root, tracker, result, extra, unrepaired, ready)


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


def cmd_preflight(args: argparse.Namespace) -> int:
    return converge(args, "preflight.yml", "check every node, read-only:", "preflight")
