"""Slurm as hvdcluster reads it: a node's record (``scontrol -o show node``), who took it out of service and why, and
which of those hvdcluster may put back. Shared by the state reader (plugins/module_utils/hvd_state.py, what `check`
names), hvd_slurm's resume step (plugins/filter/hvd_slurm.py) and the CLI (src/hvdcluster). Standard library only.

Slurm keeps one reason per node with the user who set it: ``Reason=<text> [<user>@<time>]``. Reasons slurmctld sets
itself (a node not responding, one that registered with less memory than slurm.conf says) carry the SlurmUser;
hvdcluster's own begin with ``hvdcluster `` (a roll: ``hvdcluster roll <id>``, a failed health check:
``hvdcluster health: <item>``); anything else is an operator's, and hvdcluster never touches it.
"""

from __future__ import annotations

import re

SLURM_USER = "slurm"  # the SlurmUser hvd_slurm writes into slurm.conf (Debian's packages make this account)
OURS = "hvdcluster "  # the start of every reason hvdcluster drains a node with
HEALTH_REASON = "hvdcluster health: "  # `hvdcluster health --drain`: a node whose health failed, with the first item
MAX_REASON = 120  # characters of a reason kept (node-supplied text, bounded)

_REASON = re.compile(r"^(?P<text>.*?)\s*\[(?P<user>[^\]@\s]+)@(?P<time>[^\]]*)\]\s*$")
# States that keep a node from running jobs, as scontrol prints them (joined with '+': IDLE+DRAIN, DOWN*).
DOWN_WORDS = ("DOWN", "FAIL", "NOT_RESPONDING", "INVALID", "UNKNOWN")


def fields(line: str) -> dict[str, str]:
    """``scontrol -o show node``'s one line as its fields. Reason, the last field, keeps its spaces; its text and the
    user who set it are ``Reason`` and ``ReasonUser`` (the time is left out: it changes nothing about the node)."""
    head, found, reason = line.partition(" Reason=")
    if not found and line.startswith("Reason="):
        head, reason = "", line[len("Reason="):]
    out = dict(word.split("=", 1) for word in head.split() if "=" in word)
    if reason:
        match = _REASON.match(reason.strip())
        out["Reason"] = (match.group("text") if match else reason).strip()[:MAX_REASON]
        if match:
            out["ReasonUser"] = match.group("user")[:40]
    return out


def states(record: dict[str, str]) -> list[str]:
    """The node's state words (``IDLE+DRAIN`` -> [IDLE, DRAIN]; a trailing ``*``, not responding, is a word too)."""
    state = record.get("State", "")
    words = [w for w in re.split(r"[+]", state.rstrip("*~#!%$@^-")) if w]
    return words + (["NOT_RESPONDING"] if state.endswith("*") else [])


def by_whom(record: dict[str, str], slurm_user: str = SLURM_USER) -> str:
    """Who set the node's reason: "hvdcluster", "slurm" (slurmctld itself) or "operator"; "" without a reason."""
    reason, user = record.get("Reason", ""), record.get("ReasonUser", "")
    if not reason:
        return ""
    if reason.startswith(OURS):
        return "hvdcluster"
    return "slurm" if user == slurm_user else "operator"


def judge(record: dict[str, str], slurm_user: str = SLURM_USER) -> tuple[str, str]:
    """(``slurm.node``, ``slurm.drain``) for a node's record.

    ``slurm.node`` is "ok" while the node can run jobs or is only drained by someone (hvdcluster, an operator), else
    what keeps it out and who said so: "down: <reason> (set by slurm)", "drained by Slurm itself: <reason>".
    ``slurm.drain`` is "absent" unless a person or hvdcluster drained the node: "<reason> (set by <user>)", a notice
    (an operator's drain is theirs to lift; hvdcluster lifts its own)."""
    words = states(record)
    reason = record.get("Reason", "") or "no reason given"
    who = by_whom(record, slurm_user)
    user = record.get("ReasonUser", "") or "?"
    down = [w for w in words if w in DOWN_WORDS]
    if down:
        return f"{'+'.join(down).lower()}: {reason} (set by {user})", "absent"
    if "DRAIN" in words or "DRAINING" in words or "DRAINED" in words:
        if who == "slurm":
            return f"drained by Slurm itself: {reason}", "absent"
        return "ok", f"{reason} (set by {user})"
    return "ok", "absent"


def resumable(lines: list[str], names: list[str], slurm_user: str = SLURM_USER) -> list[str]:
    """Of the nodes ``names``, those Slurm itself took out of service (down or drained with a reason its SlurmUser set,
    or without a reason): what a converge that just (re)configured or started them puts back. A node drained or taken
    down by an operator, or by hvdcluster (a roll, a failed health check), is never among them."""
    out = []
    for line in lines:
        record = fields(line.strip())
        name = record.get("NodeName", "")
        if name not in names or name in out:
            continue
        words = states(record)
        out_of_service = any(w in ("DOWN", "FAIL") or w.startswith("DRAIN") for w in words)
        if out_of_service and by_whom(record, slurm_user) in ("slurm", ""):
            out.append(name)
    return out


def unregistered(lines: list[str], names: list[str]) -> list[str]:
    """Of the nodes ``names``, those slurmctld has not heard from: missing from ``scontrol -o show node``'s
    ``lines``, unknown (never registered) or not responding."""
    seen = {}
    for line in lines:
        record = fields(line.strip())
        if record.get("NodeName"):
            seen[record["NodeName"]] = states(record)
    return [name for name in names if name not in seen
            or any(w in ("UNKNOWN", "NOT_RESPONDING") for w in seen[name])]
