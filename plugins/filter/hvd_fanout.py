"""hvd_fanout's schedule: which node copies an artifact from which, round by round, on the controller.

The controller sends an artifact to one node at most (the seed, only when no node holds it); after that every
node that holds a verified copy passes it to one node that needs it per round, so the holders double each round
and N nodes are served in about log2(N) rounds. Pure functions, unit-tested (tests/unit/test_fanout_plan.py).
"""

from __future__ import annotations

from typing import Any

CONTROLLER = "controller"


def hvd_fanout_plan(needy: list[str], holders: list[str], peers: bool = True) -> dict[str, Any]:
    """``needy``: the nodes that need the artifact, in order; ``holders``: the nodes that hold it already;
    ``peers``: whether nodes can copy from each other yet (the SSH mesh exists).

    Returns ``seed`` (the node the controller copies to; "" when a node holds it), ``rounds``: a list of
    {receiver: sender}, each sender sending to one receiver per round, and ``holders``. Without peers, one round
    in which the controller sends to every node that needs it."""
    have = list(dict.fromkeys(holders))
    want = [host for host in dict.fromkeys(needy) if host not in have]
    if not peers:
        return {"seed": "", "rounds": [{host: CONTROLLER for host in want}] if want else [], "holders": have}
    seed = ""
    if not have and want:
        seed = want.pop(0)
        have = [seed]
    rounds: list[dict[str, str]] = []
    while want:
        this = {}
        for sender in list(have):
            if not want:
                break
            this[want.pop(0)] = sender
        have.extend(this)
        rounds.append(this)
    return {"seed": seed, "rounds": rounds, "holders": [h for h in holders if h in have]}


def hvd_fanout_repair(missing: list[str], healthy: list[str], suspects: list[str] | None = None) -> dict[str, str]:
    """A second chance for the nodes whose copy failed its sha256 (or whose pull failed): each pulls from a
    healthy holder, one that did not send a bad copy where there is such a holder; the controller where none."""
    good = [h for h in healthy if h not in (suspects or [])] or list(healthy)
    return {host: (good[i % len(good)] if good else CONTROLLER) for i, host in enumerate(missing)}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"hvd_fanout_plan": hvd_fanout_plan, "hvd_fanout_repair": hvd_fanout_repair}
