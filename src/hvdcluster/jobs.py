"""Job leases and roll marks on the nodes: what keeps a rolling change off nodes where work runs, and jobs off nodes
being changed.

Both are small JSON files in ``/run/hvdcluster`` on the node (hvd_base makes it: the login user's, mode 0700, and on
tmpfs, so a reboot, which ends every job, clears them). ``hvdcluster run`` writes ``job-<id>.json`` (mode 0600) on
every node its ranks run on before it launches and removes it when the job ends, however it ends (normal exit,
failure, Ctrl-C, SIGTERM). ``hvdcluster up --rolling`` writes ``roll-<id>.json`` on the nodes of a batch while it
changes them. Each names its holder the way the build leases do (plugins/module_utils/hvd_holder.py): the
``hvdcluster`` process, its start time, host and boot. A holder that is gone (SIGKILL, a crashed controller) left a
stale file: it no longer counts.

Each side writes its own file first and only then looks at the other's: a roll writes its mark, then looks for
jobs; a job writes its lease, then looks for marks. Of a job and a roll that start together at least one sees the
other and backs off (removes its file), so never both go ahead. GPU compute processes (``nvidia-smi
--query-compute-apps``) count as running work too, whoever started them.

Under Slurm (``scontrol`` on the node, which Slurm knows by its short hostname) a roll also drains the node before it
looks (``scontrol update state=DRAIN reason="hvdcluster roll <id>"``: Slurm starts no new job there) and counts the
Slurm jobs running there (``squeue -w``) as running work; it resumes the node when done with it, and only a node it
drained itself (the reason is its own): a node someone else drained or took down stays as they left it. A node whose
``scontrol`` cannot reach the controller cannot be read.

What another local user writes is untrusted (ARCHITECTURE.md, "Trust boundaries"): the node side
(node_records.py, run by the node's ``python3 -I``) believes only files with our names that the login user or root
wrote, in a folder no other user can replace them in, reads at most 256 of 64 KiB, removes only the login user's
files we named, and answers with one JSON document on one line (``PREFIX``); what it ignored comes back named and
is never believed. The names of processes and Slurm jobs frame nothing.

How old a record is: its file's age on the node's own clock (the kernel's time of writing; only its owner could move
it), never the start time it claims, so the clocks of other controllers do not matter. A record written more than
``FUTURE_SKEW`` seconds in the future is stale ("start time in the future: not believed"): it never holds a node
until the next reboot. Without the node's word (a record handed in directly) its ``started_epoch`` is taken, by the
same rule. An unreadable record (not JSON) counts until it is as old as a record of another controller may be.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_defaults import RUN_DIR
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_holder import holder_record, process, stale_reason
# HEALTH_REASON: `health --drain`'s reasons (slurm.py), one of ours
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_slurm import HEALTH_REASON, OURS  # noqa: F401

from .inventory import Inventory
from .output import printable

DIR = RUN_DIR
JOB, ROLL = "job", "roll"
# A holder on another controller cannot be checked by pid: its job lease counts for this long (a training run may
# take days), its roll mark for a day.
STALE_AFTER = {JOB: 14 * 86400, ROLL: 86400}
FUTURE_SKEW = 300  # seconds a record may seem to come from the future (clocks differ a little), no more
FUTURE = "start time in the future: not believed"
NODE_SCRIPT = Path(__file__).with_name("node_records.py")
PREFIX = "hvd-node-look "  # node_records.PREFIX: the line of the node's answer
_NAME = re.compile(r"(job|roll)-\d{8}T\d{6}-\d+\.json")  # node_records.NAME
COMMAND_CHARS = 8192  # of a job's argv kept in its lease
# The fields the holder rule reads, with their types (absent or null is fine: hvd_holder's rule copes).
_FIELDS = {"pid": int, "pid_start": str, "host": str, "boot_id": str, "run_id": str, "kind": str,
           "started_epoch": (int, float)}


@dataclass
class Look:
    """What one node holds: every lease and mark (file name -> its record; None when not JSON, {} when empty) with
    its age on the node's clock (seconds), the entries ignored there (named, escaped: never believed), its GPU
    compute processes; ``error`` when the node could not be read."""

    host: str
    holders: dict[str, dict | None] = field(default_factory=dict)
    gpu_apps: list[str] = field(default_factory=list)
    error: str | None = None
    slurm: dict[str, str] | None = None  # under Slurm: its node record (NodeName, State, Reason ...), else None
    slurm_jobs: list[str] = field(default_factory=list)  # "<id> <user> <name>" (or "<id>") of the Slurm jobs there
    ages: dict[str, float] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)
    shared: bool = False  # the folder is writable by other users (sticky: an old hvd_base made it so)

    @property
    def drained_by(self) -> str:
        """The reason Slurm holds for the node being drained (or down), "" when it takes jobs."""
        state = (self.slurm or {}).get("State", "")
        return (self.slurm or {}).get("Reason", "") if any(w in state for w in ("DRAIN", "DOWN", "FAIL")) else ""


def mine(kind: str, run_id: str, **extra: Any) -> dict:
    """The record of a lease or mark this process takes now (a long argv cut at COMMAND_CHARS characters)."""
    me = process(os.getpid()) or {}
    if isinstance(extra.get("command"), list):
        extra["command"] = _short(extra["command"])
    return {**holder_record(run_id, {"pid": os.getpid(), "start": me.get("start")}), "kind": kind,
            "user": getpass.getuser(), **extra}


def _short(command: list[str]) -> list[str]:
    out, size = [], 0
    for word in command:
        size += len(word) + 1
        if size > COMMAND_CHARS:
            return [*out, "..."]
        out.append(word)
    return out


def file_name(record: dict) -> str:
    return f"{record['kind']}-{record['run_id']}.json"


def new_id() -> str:
    return f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"


ROLL_REASON = "hvdcluster roll "
_RUN_ID = re.compile(r"\d{8}T\d{6}-\d+")  # new_id's form: the only ids a Slurm reason may hand to the node script


def slurm_reason(record: dict) -> str:
    """The reason a roll drains a Slurm node with: it names the roll, so only that roll resumes the node."""
    return f"{ROLL_REASON}{record['run_id']}"


def orphaned_drain(node: Look, ours: str = "") -> str | None:
    """The id of the roll whose Slurm drain the node still carries although that roll is gone (killed before it could
    resume the node: its mark on the node is missing or stale), else None. Only a plain drain counts: a node that is
    also down or failed, or drained for any other reason, or by a roll that may still run, is not a roll's leftover."""
    state, reason = (node.slurm or {}).get("State", ""), (node.slurm or {}).get("Reason", "")
    if "DRAIN" not in state or "DOWN" in state or "FAIL" in state or reason == ours:
        return None
    run_id = reason.removeprefix(ROLL_REASON) if reason.startswith(ROLL_REASON) else ""
    if not _RUN_ID.fullmatch(run_id):
        return None
    mark = f"{ROLL}-{run_id}.json"
    if mark in node.holders and staleness(node.holders[mark], age=node.ages.get(mark), kind=ROLL) is None:
        return None  # that roll's mark still counts: it may be running (from another controller)
    return run_id


def script(put: dict | None = None, drop: list[str] | tuple[str, ...] = (), slurm: str | None = None,
           reason: str = "", adopt: list[str] | tuple[str, ...] = (), resume_prefix: str = "") -> str:
    """The command line for the node's login shell (the login user): node_records.py run by ``python3 -I``, which
    removes our files ``drop``, writes ``put`` (never over an existing file), then (``slurm``: "drain" or "resume",
    with ``reason``, on a node Slurm knows) drains or resumes it, and lists every lease and mark, the GPU compute
    processes and the Slurm jobs running there. A resume also takes back the drains of the gone rolls ``adopt``
    (their ids, as :func:`orphaned_drain` found them), and with ``resume_prefix`` (one of hvdcluster's, e.g.
    HEALTH_REASON) every drain whose reason starts with it."""
    if any(not _RUN_ID.fullmatch(run_id) for run_id in adopt):
        raise ValueError(f"not a roll id: {adopt}")
    if resume_prefix and not resume_prefix.startswith(OURS):
        raise ValueError(f"not a reason hvdcluster drains with: {resume_prefix!r}")
    args = {"dir": DIR, "drop": list(drop), "slurm": slurm or "", "reason": reason, "adopt": list(adopt),
            "resume_prefix": resume_prefix,
            "put": json.dumps(put, sort_keys=True) if put is not None else None,
            "put_name": file_name(put) if put is not None else None}
    return shlex.join(["python3", "-I", "-c", NODE_SCRIPT.read_text(encoding="utf-8"), json.dumps(args)])


def _record(text: str) -> dict | None:
    if not text.strip():
        return {}  # created and not yet written (or its writer died in between): hvd_holder's rule for empty ones
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict) or any(record.get(key) is not None and not isinstance(record[key], kinds)
                                           for key, kinds in _FIELDS.items()):
        return None  # not a record hvdcluster wrote: unreadable
    return record


def _texts(value: Any) -> list[str]:
    return [printable(v, newlines=False) for v in value if isinstance(v, str)] if isinstance(value, list) else []


def parse(host: str, rc: int, out: str | None, err: str | None = "") -> Look:
    """The node's answer (the last line of ``out`` that starts with PREFIX: one JSON document) as a Look."""
    look, err = Look(host), err or ""
    answer = None
    for line in (out or "").splitlines():
        if line.startswith(PREFIX):
            answer = line[len(PREFIX):]
    try:
        doc = json.loads(answer) if answer is not None else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        tail = printable(err.strip().splitlines()[-1], newlines=False) if err.strip() else ""
        look.error = f"unreachable or failed (rc {rc}): {tail}".rstrip()
        return look
    holders, ages = doc.get("holders"), doc.get("ages")
    for name, text in (holders.items() if isinstance(holders, dict) else ()):
        if _NAME.fullmatch(name) and isinstance(text, str):
            look.holders[name] = _record(text)
            age = ages.get(name) if isinstance(ages, dict) else None
            if isinstance(age, (int, float)):
                look.ages[name] = float(age)
    look.ignored = _texts(doc.get("ignored"))
    more = doc.get("ignored_more")
    if isinstance(more, int) and more > 0:
        look.ignored.append(f"{more} more")
    look.shared = doc.get("shared") is True
    look.gpu_apps = _texts(doc.get("gpu_apps"))
    look.slurm_jobs = _texts(doc.get("slurm_jobs"))
    if isinstance(doc.get("slurm"), str):
        look.slurm = slurm_fields(doc["slurm"])
    error = doc.get("error")
    if isinstance(error, dict):
        code, text = error.get("code"), printable(error.get("text", ""), newlines=False)
        look.error = {
            "missing": f"{text} is missing (hvd_base makes it; a node without systemd loses it at reboot): run "
                       "`hvdcluster up`",
            "unwritable": f"cannot write in {DIR} as the login user: {text}",
            "unreadable": f"cannot read {DIR}: {text}: `hvdcluster up` makes it the login user's",
            "untrusted": f"{text}: nothing in it is believed (`hvdcluster up` makes it the login user's, mode 0700)",
            "slurm": f"Slurm: {text}",
        }.get(code, f"{DIR}: {text}")
    return look


def slurm_fields(line: str) -> dict[str, str]:
    """``scontrol -o show node``'s one line as its fields; Reason, the last one, keeps its spaces."""
    head, _, reason = line.partition(" Reason=")
    fields = dict(word.split("=", 1) for word in head.split() if "=" in word)
    if reason:
        fields["Reason"] = reason.split(" [", 1)[0].strip()  # "<reason> [user@time]"
    return fields


def look(inv: Inventory, hosts: list[str], *, put: dict | None = None, drop: list[str] | tuple[str, ...] = (),
         slurm: str | None = None, reason: str = "", adopt: list[str] | tuple[str, ...] = (),
         resume_prefix: str = "", timeout: float = 30) -> dict[str, Look]:
    """Run :func:`script` on every one of ``hosts`` over SSH, in parallel."""
    from .launch import on_each

    answers = on_each(inv, hosts, script(put, drop, slurm, reason, adopt, resume_prefix), timeout)
    return {host: Look(host, error=printable(proc, newlines=False)) if isinstance(proc, str) else
            parse(host, proc.returncode, proc.stdout, proc.stderr) for host, proc in answers.items()}


def staleness(record: dict | None, now: float | None = None, *, age: float | None = None,
              kind: str | None = None) -> str | None:
    """Why a lease or mark no longer counts, or None while its holder may be alive (hvd_holder's rule). ``age``: the
    file's age on the node's clock (what Look.ages holds); without it, ``started_epoch``. ``kind``: the file name's
    (job or roll), else the record's."""
    if age is None:
        if record is None:
            return None  # unreadable and of no known age: counted, never guessed away
        started = record.get("started_epoch")
        age = (now or time.time()) - (started if isinstance(started, (int, float)) else 0)
    if age < -FUTURE_SKEW:
        return FUTURE
    kind = kind or str((record or {}).get("kind"))
    return stale_reason(record, max(age, 0.0), STALE_AFTER.get(kind, STALE_AFTER[JOB]))


def describe(record: dict | None) -> str:
    """The record's holder in one printable line (every field a node supplied escaped, the command cut short)."""
    if not record:
        return "an unreadable record" if record is None else "an empty record"
    what = "job" if record.get("kind") == JOB else "hvdcluster up --rolling"
    command = record.get("command")
    tail = ""
    if isinstance(command, list) and command and all(isinstance(word, str) for word in command):
        tail = f": {' '.join(shlex.join(command).split())[:120]}"
    text = (f"{what} {str(record.get('run_id'))[:40]} of {str(record.get('user'))[:40]} (pid "
            f"{str(record.get('pid'))[:20]} on {str(record.get('host'))[:80]}, since "
            f"{str(record.get('started'))[:40]}){tail}")
    return printable(text, newlines=False)


def _kind(name: str) -> str:
    return name.split("-", 1)[0]


def live(node: Look, kind: str, ours: str | None = None) -> list[tuple[str, dict | None]]:
    """The live leases (``kind`` job) or marks (roll) on the node, other than ours (file name ``ours``)."""
    return [(name, record) for name, record in sorted(node.holders.items())
            if _kind(name) == kind and name != ours
            and staleness(record, age=node.ages.get(name), kind=kind) is None]


def stale(node: Look) -> list[tuple[str, dict | None, str]]:
    """The files whose holder is gone, with why."""
    out = []
    for name, record in sorted(node.holders.items()):
        reason = staleness(record, age=node.ages.get(name), kind=_kind(name))
        if reason is not None:
            out.append((name, record, reason))
    return out


def busy(node: Look, ours: str | None = None) -> list[str]:
    """Why the node cannot be changed now: live jobs and GPU compute processes (and another roll)."""
    reasons = [f"running {describe(record)}" for _, record in live(node, JOB, ours)]
    reasons += [f"being changed by {describe(record)}" for _, record in live(node, ROLL, ours)]
    reasons += [f"GPU compute process {app}" for app in node.gpu_apps]
    reasons += [f"Slurm job {job}" for job in node.slurm_jobs]
    return reasons


def ignored(host: str, node: Look) -> str | None:
    """One line naming what the node ignored in its folder (never believed), or None."""
    if not node.ignored and not node.shared:
        return None
    words = f"ignored in {DIR} (not believed): {'; '.join(node.ignored)}" if node.ignored else ""
    hint = f"{DIR} is writable by other users: `hvdcluster up` makes it the login user's" if node.shared else ""
    return f"{host}: {'; '.join(w for w in (words, hint) if w)}"
