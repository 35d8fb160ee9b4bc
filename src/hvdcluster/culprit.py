"""The culprit of a failing collective run, found by pairs, then halves (``health --full``): pure, run over any
``judge_round`` - src/hvdcluster/bandwidth.py's measured runs, or a model in tests and bench/health_full.py."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .output import fold


def find_culprit(nodes: list[str], judge_round: Callable[[list[tuple[str, ...]]], list[bool]]) -> dict[str, Any]:
    """Name what makes a run over ``nodes`` fail (the caller's run over all of them failed): pairs, then halves.

    ``judge_round(groups)`` runs each group (disjoint node sets, at once: a round) and says which passed. The model: a
    run fails when it holds a slow node, both ends of a slow link, or (a cause only at scale) enough of the cluster. A
    node set whose verdict is known is never run again.

    1. Pairs: the nodes in disjoint pairs, one round (an odd node out waits for step 3). A passing pair's nodes are
       good.
    2. No pair passed: the failing pairs are crossed (a of one with b of the next, then a with a and b with b; the odd
       node with each end of a lone failing pair), a round each, until two good nodes are found; none: the cause is
       common to all (``fabric``).
    3. Each node of a failing pair, and the odd one, runs with a good node, as many at once as there are good ones;
       one that fails runs with a second good node (a round): failing with both names it (``node``), failing with one
       only names the link to that one (``link``); both ends of a failing pair passing with good peers name the link
       between them.
    4. Every pair passed: halves, a round of two. A failing half is halved again; two halves that pass alone and fail
       together are narrowed by halving one side while the other is kept, down to one ``link``, or the smallest
       ``group`` that fails only together.

    Runs besides the caller's, for N nodes: one slow node, N even: N/2 + 3, in 3 rounds (8 nodes: 7, against the 28
    pairs); N odd: at most (N-1)/2 + 4 (3 nodes: 3); a slow link inside a pair: N/2 + 2; between two pairs: N/2 + 2 +
    about 2 log2 N (8 nodes: 11); every pair slow (fabric): about 3N/2. Never the N(N-1)/2 pairs.

    {kind: node|link|group|fabric|pair, nodes, why, runs: [[nodes, passed]], rounds}.
    """
    known: dict[frozenset[str], bool] = {frozenset(nodes): False}
    log: list[tuple[tuple[str, ...], bool]] = []
    rounds = 0

    def run(groups: list[tuple[str, ...]]) -> list[bool]:
        nonlocal rounds
        todo = [g for g in groups if frozenset(g) not in known]
        if todo:
            for group, ok in zip(todo, judge_round(todo)):
                known[frozenset(group)] = bool(ok)
                log.append((group, bool(ok)))
            rounds += 1
        return [known[frozenset(g)] for g in groups]

    def answer(kind: str, names: Iterable[str], why: str) -> dict[str, Any]:
        named = set(names)
        return {"kind": kind, "nodes": [n for n in nodes if n in named], "why": why,
                "runs": [[list(g), ok] for g, ok in log], "rounds": rounds}

    if len(nodes) == 1:
        return answer("node", nodes, "one node: its own GPUs and links (NVLink, PCIe) are all the run crossed")
    if len(nodes) == 2:
        return answer("pair", nodes, "two nodes: no third to tell which of them, or the link between them, is slow")
    pairs = [(nodes[i], nodes[i + 1]) for i in range(0, len(nodes) - 1, 2)]
    odd = [nodes[-1]] if len(nodes) % 2 else []
    good: list[str] = [n for pair, ok in zip(pairs, run(pairs)) if ok for n in pair]
    bad = [pair for pair in pairs if not known[frozenset(pair)]]
    if not good and bad:
        ends = [(a, b, c, d) for (a, b), (c, d) in zip(bad[0::2], bad[1::2])]
        lone = bad[-1] if len(bad) % 2 and odd else None
        crossings = [[pair for a, b, c, d in ends for pair in ((a, d), (b, c))] + ([(lone[0], odd[0])] if lone else []),
                     [pair for a, b, c, d in ends for pair in ((a, c), (b, d))] + ([(lone[1], odd[0])] if lone else [])]
        for crossing in crossings:
            good += [n for pair, ok in zip(crossing, run(crossing)) if ok for n in pair if n not in good]
            if good:
                break
        if not good:
            return answer("fabric", nodes, f"every pair of nodes tried is below the floor ({len(log)} runs): a cause "
                          "common to all of them (the switch, the subnet manager, a setting every node shares)")
    suspects = [n for pair in bad for n in pair if n not in good] + [n for n in odd if n not in good]
    if not suspects:
        return _halves(nodes, run, answer)
    failed_with = _with_good(suspects, good, known, run)  # suspect -> the good peers it failed with
    slow: list[str] = []
    links = [pair for pair in bad if not set(pair) & set(failed_with)]  # both ends pass with good peers
    # Failing with one good peer could be the link between the two: a second good peer, where there is one, tells.
    second = _with_good(list(failed_with), good, known, run, avoid=failed_with)
    for suspect, peers in failed_with.items():
        if suspect in second or len(good) < 2:
            slow.append(suspect)
        else:
            links.append((suspect, peers[0]))
    if slow or links:
        why = []
        if slow:
            alone = " (the only healthy peer: it or the link between them)" if len(good) < 2 else ""
            why.append(f"{fold(slow)}: below the floor with healthy peers{alone}, where those pass together")
        if links:
            why.append("each end passes with other healthy peers, the two together do not: the link or path between "
                       + "; ".join(" and ".join(p) for p in links))
        return answer("node" if slow else "link", slow + [n for p in links for n in p], "; ".join(why))
    return _halves(nodes, run, answer)  # every pair, and the odd node with a good one, passed


def _with_good(suspects: list[str], good: list[str], known: dict[frozenset[str], bool], run: Callable,
               avoid: dict[str, list[str]] | None = None) -> dict[str, list[str]]:
    """Each suspect run with a good node (a verdict already known is not run again; ``avoid``: suspect -> good nodes
    it must not be paired with): suspect -> the good peers it failed with, for those that failed. As many runs at
    once as there are good nodes."""
    avoid = avoid or {}
    failed: dict[str, list[str]] = {}
    pending = []
    for suspect in suspects:
        peers = [g for g in good if g not in avoid.get(suspect, [])]
        seen = next((g for g in peers if frozenset((suspect, g)) in known), None)
        if seen is None:
            pending.append(suspect) if peers else None
        elif not known[frozenset((suspect, seen))]:
            failed[suspect] = [seen]
    while pending:
        used: set[str] = set()
        batch = []
        for suspect in list(pending):
            peer = next((g for g in good if g not in used and g not in avoid.get(suspect, [])), None)
            if peer is not None:
                used.add(peer)
                batch.append((suspect, peer))
                pending.remove(suspect)
        if not batch:
            break
        failed.update({pair[0]: [pair[1]] for pair, ok in zip(batch, run(batch)) if not ok})
    return failed


def _halves(nodes: list[str], run: Callable, answer: Callable) -> dict[str, Any]:
    """Every pair passed and the whole did not: halve it, and narrow two halves that fail only together."""
    group = list(nodes)
    while len(group) > 2:
        left, right = group[:len(group) // 2], group[len(group) // 2:]
        left_ok, right_ok = run([tuple(left), tuple(right)])
        if not left_ok:
            group = left
        elif not right_ok:
            group = right
        else:
            return _between(left, right, run, answer)
    return answer("group", group, "fails only as a whole though every pair tried passes: congestion or a path "
                  "used only at this scale")


def _between(left: list[str], right: list[str], run: Callable, answer: Callable) -> dict[str, Any]:
    """``left`` and ``right`` pass alone and fail together: keep one side, halve the other, until one link is left."""
    while len(left) > 1 or len(right) > 1:
        if len(left) < len(right):
            left, right = right, left
        first, second = left[:len(left) // 2], left[len(left) // 2:]
        if not run([tuple(first + right)])[0]:
            left = first
        elif not run([tuple(second + right)])[0]:
            left = second
        else:
            return answer("group", left + right, "these nodes fail only together, each half passing with the rest: "
                          "congestion or a path used only at this scale")
    return answer("link", left + right, f"the link or path between {left[0]} and {right[0]} (each passes with "
                  "the others)")
