"""``hvdcluster up --rolling``: change the nodes a batch at a time, each only when no job runs there.

The canary first (alone), then the other nodes in hosts.yaml's order, ``--batch`` at a time. Before a batch is
changed, each of its nodes gets a roll mark and is looked at (jobs.py): a live job lease of `hvdcluster run`, another
roll, or a GPU compute process makes it wait, drained (its mark stays: `run` starts no new job there, the running
ones end as they will), up to ``--max-wait``; a node still busy then loses its mark and is skipped and named, never
interrupted. The batch converges (site.yml with the roles' plays on its nodes only, ``hvd_targets``) and is proven
with the nodes done before it (the post-flight's plays on those, ``hvd_proof_targets``), then read back like every
converge (the loop contract). The first failure stops the roll: the nodes not reached yet keep their old state, and
the summary names what is where. The inputs are recorded as converged only when every node was changed and proven.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from .. import inventory, lock
from ..errors import HvdError
from ..output import dump_json
from ..repair import Scope, batch_size, batches, scope
from . import stages
from .common import EXIT_FAILED, EXIT_OK

# The rolling options and their defaults (the parser's too): given without --rolling, they are refused.
DEFAULTS = {"batch": "1", "canary": None, "max_wait": 3600.0, "poll": 10.0}
NOT_WITH_ROLLING = ("limit", "tags", "check", "diff")


def check_arguments(args: argparse.Namespace, names: list[str]) -> None:
    """Exit 2 (before anything is written) on a rolling option without --rolling, or with one it cannot take."""
    if not getattr(args, "rolling", False):
        given = [f"--{k.replace('_', '-')}" for k, default in DEFAULTS.items() if getattr(args, k, default) != default]
        if given:
            raise HvdError(f"{', '.join(given)}: only with --rolling")
        return
    clash = [f"--{k}" for k in NOT_WITH_ROLLING if getattr(args, k, None)]
    if clash:
        raise HvdError(f"--rolling: not with {', '.join(clash)} (a roll changes every node, a batch at a time)")
    if args.canary is not None and args.canary not in names:
        raise HvdError(f"--canary: {args.canary!r} is not a host of {args.hosts} (hosts: {', '.join(names)})")
    if args.max_wait < 0 or args.poll <= 0:
        raise HvdError("--max-wait must be 0 or more and --poll more than 0 seconds")
    batch_size(args.batch, len(names))


class _Roll:
    """One roll: its mark, the order, and what happened to each node."""

    def __init__(self, args: argparse.Namespace, inv: inventory.Inventory, console) -> None:
        from .. import jobs

        self.args, self.inv, self.console = args, inv, console
        self.record = jobs.mine(jobs.ROLL, jobs.new_id(), command=["hvdcluster", "up", "--rolling"])
        self.mark = jobs.file_name(self.record)
        self.done: list[str] = []
        self.in_sync: list[str] = []
        self.skipped: dict[str, list[str]] = {}
        self.failed: dict[str, str] = {}
        self.timeline: list[dict[str, Any]] = []
        self.gone: set[str] = set()  # stale leases and marks seen: removed at the next look (the login user's own)
        self.reason = jobs.slurm_reason(self.record)  # what a node this roll drains in Slurm says
        self.drained: list[str] = []  # the nodes this roll drained in Slurm (and resumes)
        self.told_slurm: set[str] = set()
        self.told_ignored: set[str] = set()  # the nodes whose ignored entries were named
        self.orphans: dict[str, str] = {}  # node -> the gone roll whose Slurm drain this roll took back at its start

    def sweep(self, hosts: list[str]) -> None:
        """Resume the nodes a killed roll left drained in Slurm (its mark on the node missing or stale): that roll can
        no longer resume them, and left so, Slurm would never start a job there again. Nodes this roll changes are
        drained again when their batch comes, like any other. A node that cannot be read is left to the batches."""
        from .. import jobs

        looks = jobs.look(self.inv, hosts)
        found = {h: jobs.orphaned_drain(n, self.reason) for h, n in looks.items() if not n.error}
        found = {h: run_id for h, run_id in found.items() if run_id}
        if not found:
            return
        marks = sorted({f"{jobs.ROLL}-{run_id}.json" for run_id in found.values()})
        after = jobs.look(self.inv, sorted(found), drop=marks, slurm="resume", reason=self.reason,
                          adopt=sorted(set(found.values())))
        for host, node in sorted(after.items()):
            if node.error or node.drained_by:
                self.console.write(f"  {host}: still drained in Slurm by {jobs.ROLL_REASON}{found[host]}, which is "
                                   f"gone: {node.error or 'Slurm did not resume it'}")
            else:
                self.orphans[host] = found[host]
                self.console.write(f"  {host}: resumed in Slurm: {jobs.ROLL_REASON}{found[host]} drained it and is "
                                   "gone (killed before it could resume it)")

    def take(self, batch: list[str]) -> list[str]:
        """Mark the batch's nodes and wait until none runs a job (up to --max-wait): the nodes to change now, still
        marked; the others are skipped (busy past --max-wait, or not readable)."""
        from .. import jobs

        deadline = time.monotonic() + self.args.max_wait
        pending, ready, gone = list(batch), [], self.gone
        told_stale: set[tuple[str, str]] = set()  # (host, file) said once
        told_busy: dict[str, list[str]] = {}  # host -> the reasons last said
        while pending:
            looks = jobs.look(self.inv, pending, put=self.record, drop=[self.mark, *sorted(gone)], slurm="drain",
                              reason=self.reason)
            busy: dict[str, list[str]] = {}
            for host, node in looks.items():
                if node.error:
                    self.skipped[host] = [node.error]
                    continue
                self._tell_slurm(host, node)
                if host not in self.told_ignored and jobs.ignored(host, node):
                    self.told_ignored.add(host)
                    self.console.write(f"  {jobs.ignored(host, node)}")
                for name, holder, reason in jobs.stale(node):
                    gone.add(name)  # removed at the next look (a file of the login user's; others' stay)
                    if name != self.mark and (host, name) not in told_stale:
                        told_stale.add((host, name))
                        self.console.write(f"  {host}: {jobs.describe(holder)} no longer counts: {reason}")
                reasons = jobs.busy(node, ours=self.mark)
                if reasons:
                    busy[host] = reasons
                else:
                    ready.append(host)
            pending = list(busy)  # they keep the mark while they wait (drained: no new job starts there)
            if not pending:
                break
            if time.monotonic() >= deadline:
                self.release(pending)  # skipped: open to jobs again
                for host, reasons in busy.items():
                    self.skipped[host] = reasons
                    self.console.write(f"  {host}: skipped, still busy after {self.args.max_wait:g} s: {reasons[0]}")
                break
            for host, reasons in busy.items():
                if told_busy.get(host) != reasons:
                    told_busy[host] = reasons
                    self.console.write(f"  {host}: waiting (up to {self.args.max_wait:g} s): {'; '.join(reasons)}")
            time.sleep(min(self.args.poll, max(deadline - time.monotonic(), 0.1)))
        return [h for h in batch if h in ready]

    def _tell_slurm(self, host: str, node) -> None:
        """Say once per node what Slurm holds: drained by this roll, or by someone else (left so)."""
        if node.slurm is None or host in self.told_slurm:
            return
        self.told_slurm.add(host)
        if node.drained_by == self.reason:
            self.drained.append(host)
            self.console.write(f"  {host}: drained in Slurm ({self.reason}): no new job starts there")
        elif node.drained_by:
            self.console.write(f"  {host}: already drained or down in Slurm ({node.drained_by}): left so after")

    def release(self, nodes: list[str]) -> None:
        """Remove the roll's mark (and stale files) from ``nodes`` and resume those this roll drained in Slurm."""
        from .. import jobs

        if nodes:
            looks = jobs.look(self.inv, nodes, drop=[self.mark, *sorted(self.gone)], slurm="resume",
                              reason=self.reason)
            for host, node in looks.items():
                if node.error:
                    self.console.write(f"  {host}: could not be released: {node.error}")
                elif host in self.drained and node.drained_by != self.reason:
                    self.console.write(f"  {host}: resumed in Slurm")


def _scope(session: stages.Session, decision) -> Scope:
    """What the roll changes, from `up`'s decision (one read of every node, as `up` reads them): the drifted nodes and
    the roles they need; after a change of variables only, every node with the roles from the earliest one that reads
    a changed variable; every node and every role when the records cannot decide or --full asks for it."""
    from . import up

    if decision.kind == up.FULL:
        return scope(session.names, None)
    return scope(session.names, decision.todo)


def cmd_rolling(args: argparse.Namespace) -> int:
    from .. import nodestate
    from . import up

    session = stages.start(args)
    console, names = session.console, session.names
    check_arguments(args, names)
    extra = stages.FULL_VERIFY if args.verify else {}
    with lock.hold(session.root, lock.ROLL):
        root = stages.write_inventory(session)
        roll = _Roll(args, inventory.read(root), console)
        roll.sweep(names)
        decision = up.decide(session, full=args.full, health=False)
        todo = _scope(session, decision)
        canary = args.canary if args.canary in todo.nodes else None
        if args.canary and canary is None:
            console.write(f"  the canary {args.canary} is in its desired state: it is not changed")
        order = batches(todo.nodes, args.batch, canary) if todo.nodes else []
        roll.in_sync = todo.in_sync
        if not order:
            console.write("nothing to roll: " + ("every node is in its desired state" if not todo.by_hand else
                                                 "what drifted, no role repairs"))
        else:
            console.write(f"cluster {session.cluster.cluster}: rolling over {len(todo.nodes)} of {len(names)} nodes "
                          f"in {len(order)} batches ({' | '.join(', '.join(b) for b in order)})")
        desired = nodestate.desired(root, names)  # what each batch's nodes are held to (none: against their peers)
        throughput: dict[str, Any] = {}  # the last batch's post-flight figures
        for number, batch in enumerate(order, 1):
            label = "canary" if canary and number == 1 else f"batch {number}"
            console.step(number, len(order), f"{label}: {', '.join(batch)}")
            nodes = roll.take(batch)
            if label == "canary" and not nodes:
                console.write(f"  the canary {canary} was not changed: the roll stops")
                break
            if not nodes:
                continue
            proof = [n for n in names if n in roll.in_sync or n in roll.done or n in nodes]
            # Recorded again only when every node was changed and proven; a roll that changes no node keeps them.
            stages.forget_record(session)
            started = time.time()
            try:
                outcome = stages.run_pass(session, stages.Pass(
                    tags=todo.batch_tags(number),
                    extravars={**todo.extravars, "hvd_targets": ",".join(nodes), "hvd_proof_targets": ",".join(proof),
                               **extra, **stages.HEALTH},
                    desired=desired, records_current=decision.records_current, changed=nodes, among=proof,
                    health=nodes, by="up --rolling"))
            finally:
                roll.release(nodes)
            # The batch is proven by the quick health read too (state.yml's play): a node with a failure stops the roll.
            tracker, result, ready = outcome.tracker, outcome.result, outcome.health
            console.summary(tracker, str(result.log))
            stages.write_health(console, ready)
            roll.timeline.append({"batch": label, "nodes": nodes, "proven_with": proof, "started": started,
                                  "ended": time.time(), "ok": outcome.ready, "log": str(result.log)})
            throughput = tracker.throughput
            if not outcome.ready:
                why = "; ".join(outcome.unrepaired) or "; ".join(f"{f.role}: {f.task}: {f.message}"
                                                                 for f in tracker.failures) \
                    or "; ".join(ready["not_ready"]) or f"rc {result.rc}"
                roll.failed = {n: why for n in nodes}
                break
            roll.done += nodes
        untouched = [n for n in todo.nodes if n not in roll.done and n not in roll.skipped and n not in roll.failed]
        complete = len(roll.done) == len(todo.nodes) and not todo.by_hand
        if complete and order:
            nodestate.record_inputs(root, nodestate.inputs_digest(root))
    _summary(console, roll, untouched, todo.by_hand)
    rc = EXIT_OK if complete else EXIT_FAILED
    if args.json:
        dump_json(sys.stdout, {"cluster": session.cluster.cluster, "inventory": str(root), "rc": rc, "ok": complete,
                               "throughput": throughput,
                               "rolling": {"order": order, "batches": roll.timeline, "done": roll.done,
                                           "in_sync": roll.in_sync, "by_hand": todo.by_hand,
                                           "slurm_drained": roll.drained, "slurm_orphans_resumed": roll.orphans,
                                           "skipped": roll.skipped, "failed": roll.failed, "untouched": untouched}})
    return rc


def _summary(console, roll: _Roll, untouched: list[str], by_hand: dict[str, list[str]]) -> None:
    console.write()
    console.write("Rolling change:")
    console.write(f"  changed and proven: {', '.join(roll.done) or 'none'}")
    if roll.in_sync:
        console.write(f"  in their desired state (not changed): {', '.join(roll.in_sync)}")
    for host, items in by_hand.items():
        console.write(f"  not repaired: {host}: {', '.join(items)} (no role repairs it: the operator's)")
    for host, reasons in roll.skipped.items():
        console.write(f"  skipped: {host}: {'; '.join(reasons)}")
    for host, why in roll.failed.items():
        console.write(f"  failed: {host}: {why}")
    if untouched:
        console.write(f"  untouched (their old state): {', '.join(untouched)}")
