"""Job leases and roll marks on the nodes: what keeps a rolling change off nodes where work runs, and jobs off nodes
being changed.

Both are small JSON files in ``/run/hvdcluster`` on the node (hvd_base makes it: root's, mode 1777 like /tmp, and
on tmpfs, so a reboot, which ends every job, clears them). ``hvdcluster run`` writes ``job-<id>.json`` on every node
its ranks run on before it launches and removes it when the job ends, however it ends (normal exit, failure,
Ctrl-C, SIGTERM). ``hvdcluster up --rolling`` writes ``roll-<id>.json`` on the nodes of a batch while it changes
them. Each names its holder the way the build leases do (plugins/module_utils/hvd_holder.py): the ``hvdcluster``
process, its start time, host and boot. A holder that is gone (SIGKILL, a crashed controller) left a stale file:
it no longer counts.

Each side writes its own file first and only then looks at the other's: a roll writes its mark, then looks for
jobs; a job writes its lease, then looks for marks. Of a job and a roll that start together at least one sees the
other and backs off (removes its file), so never both go ahead. GPU compute processes (``nvidia-smi
--query-compute-apps``) count as running work too, whoever started them.
"""

from __future__ import annotations

import getpass
import json
import os
import shlex
import time
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_defaults import RUN_DIR
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_holder import holder_record, process, stale_reason

from .inventory import Inventory

DIR = RUN_DIR
JOB, ROLL = "job", "roll"
# A holder on another controller cannot be checked by pid: its job lease counts for this long (a training run may
# take days), its roll mark for a day.
STALE_AFTER = {JOB: 14 * 86400, ROLL: 86400}


@dataclass
class Look:
    """What one node holds: every lease and mark (file name -> its record; None when unreadable) and its GPU
    compute processes; ``error`` when the node could not be read."""

    host: str
    holders: dict[str, dict | None] = field(default_factory=dict)
    gpu_apps: list[str] = field(default_factory=list)
    error: str | None = None


def mine(kind: str, run_id: str, **extra: Any) -> dict:
    """The record of a lease or mark this process takes now."""
    me = process(os.getpid()) or {}
    return {**holder_record(run_id, {"pid": os.getpid(), "start": me.get("start")}), "kind": kind,
            "user": getpass.getuser(), **extra}


def file_name(record: dict) -> str:
    return f"{record['kind']}-{record['run_id']}.json"


def new_id() -> str:
    return f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"


def script(put: dict | None = None, drop: list[str] | tuple[str, ...] = ()) -> str:
    """Shell for the node (as the login user): remove our files ``drop``, write ``put`` (never over an existing
    file), then list every lease and mark and the GPU compute processes."""
    lines = [f"d={DIR}", '[ -d "$d" ] || { echo "hvd-missing $d"; exit 3; }']
    lines += [f'rm -f -- "$d"/{shlex.quote(name)}' for name in drop]
    if put is not None:
        text = json.dumps(put, sort_keys=True)
        lines.append(f'(umask 022; set -C; printf "%s\\n" {shlex.quote(text)} > "$d"/{shlex.quote(file_name(put))})'
                     ' || { echo "hvd-unwritable $d"; exit 4; }')
    lines.append('for f in "$d"/*.json; do [ -f "$f" ] || continue; printf "hvd-holder %s " "${f##*/}"; '
                 'head -c 65536 "$f" | tr -d "\\n"; echo; done')
    lines.append("if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi --query-compute-apps=pid,process_name "
                 '--format=csv,noheader 2>/dev/null | sed "s/^/hvd-gpu-app /"; fi')
    lines.append("exit 0")
    return "\n".join(lines)


def parse(host: str, rc: int, out: str | None, err: str | None = "") -> Look:
    look, err = Look(host), err or ""
    for line in (out or "").splitlines():
        word, _, rest = line.partition(" ")
        if word == "hvd-holder":
            name, _, text = rest.partition(" ")
            try:
                record = json.loads(text)
            except ValueError:
                record = None
            look.holders[name] = record if isinstance(record, dict) else None
        elif word == "hvd-gpu-app" and rest.strip():
            look.gpu_apps.append(rest.strip())
        elif word == "hvd-missing":
            look.error = f"{rest} is missing (hvd_base makes it; a node without systemd loses it at reboot): run " \
                         "`hvdcluster up`"
        elif word == "hvd-unwritable":
            look.error = f"cannot write in {rest} as the login user"
    if rc != 0 and look.error is None:
        look.error = f"unreachable or failed (rc {rc}): {err.strip().splitlines()[-1] if err.strip() else ''}".rstrip()
    return look


def look(inv: Inventory, hosts: list[str], *, put: dict | None = None, drop: list[str] | tuple[str, ...] = (),
         timeout: float = 30) -> dict[str, Look]:
    """Run :func:`script` on every one of ``hosts`` over SSH, in parallel."""
    from .launch import on_each

    answers = on_each(inv, hosts, "sh -c " + shlex.quote(script(put, drop)), timeout)
    return {host: Look(host, error=proc) if isinstance(proc, str) else
            parse(host, proc.returncode, proc.stdout, proc.stderr) for host, proc in answers.items()}


def staleness(record: dict | None, now: float | None = None) -> str | None:
    """Why a lease or mark no longer counts, or None while its holder may be alive (hvd_holder's rule)."""
    if record is None:
        return None  # unreadable: counted, never guessed away
    started = record.get("started_epoch")
    age = (now or time.time()) - (started if isinstance(started, (int, float)) else 0)
    return stale_reason(record, age, STALE_AFTER.get(str(record.get("kind")), STALE_AFTER[JOB]))


def describe(record: dict | None) -> str:
    if not record:
        return "an unreadable record"
    what = "job" if record.get("kind") == JOB else "hvdcluster up --rolling"
    command = record.get("command")
    tail = f": {' '.join(shlex.join(command).split())[:120]}" if isinstance(command, list) and command else ""
    return (f"{what} {record.get('run_id')} of {record.get('user')} (pid {record.get('pid')} on "
            f"{record.get('host')}, since {record.get('started')}){tail}")


def live(node: Look, kind: str, ours: str | None = None) -> list[tuple[str, dict | None]]:
    """The live leases (``kind`` job) or marks (roll) on the node, other than ours (file name ``ours``)."""
    return [(name, record) for name, record in sorted(node.holders.items())
            if name.startswith(kind + "-") and name != ours and staleness(record) is None]


def stale(node: Look) -> list[tuple[str, dict | None, str]]:
    """The files whose holder is gone, with why."""
    out = []
    for name, record in sorted(node.holders.items()):
        reason = staleness(record)
        if reason is not None:
            out.append((name, record, reason))
    return out


def busy(node: Look, ours: str | None = None) -> list[str]:
    """Why the node cannot be changed now: live jobs and GPU compute processes (and another roll)."""
    reasons = [f"running {describe(record)}" for _, record in live(node, JOB, ours)]
    reasons += [f"being changed by {describe(record)}" for _, record in live(node, ROLL, ours)]
    reasons += [f"GPU compute process {app}" for app in node.gpu_apps]
    return reasons
