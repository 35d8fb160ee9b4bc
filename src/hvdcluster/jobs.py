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

Under Slurm (``scontrol`` on the node, which Slurm knows by its short hostname) a roll also drains the node before it
looks (``scontrol update state=DRAIN reason="hvdcluster roll <id>"``: Slurm starts no new job there) and counts the
Slurm jobs running there (``squeue -w``) as running work; it resumes the node when done with it, and only a node it
drained itself (the reason is its own): a node someone else drained or took down stays as they left it. A node whose
``scontrol`` cannot reach the controller cannot be read.
"""

from __future__ import annotations

import getpass
import json
import os
import re
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
    slurm: dict[str, str] | None = None  # under Slurm: its node record (NodeName, State, Reason ...), else None
    slurm_jobs: list[str] = field(default_factory=list)  # "<id> <user> <name>" of the Slurm jobs running there

    @property
    def drained_by(self) -> str:
        """The reason Slurm holds for the node being drained (or down), "" when it takes jobs."""
        state = (self.slurm or {}).get("State", "")
        return (self.slurm or {}).get("Reason", "") if any(w in state for w in ("DRAIN", "DOWN", "FAIL")) else ""


def mine(kind: str, run_id: str, **extra: Any) -> dict:
    """The record of a lease or mark this process takes now."""
    me = process(os.getpid()) or {}
    return {**holder_record(run_id, {"pid": os.getpid(), "start": me.get("start")}), "kind": kind,
            "user": getpass.getuser(), **extra}


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
    if mark in node.holders and staleness(node.holders[mark]) is None:
        return None  # that roll's mark still counts: it may be running (from another controller)
    return run_id


SLURM_SCRIPT = r"""
if command -v scontrol >/dev/null 2>&1; then
  n=$(hostname -s)
  if line=$(scontrol -o show node "$n" 2>&1); then
    s=; [ "$(id -u)" = 0 ] || s="sudo -n"
    st=$(printf '%s\n' "$line" | tr ' ' '\n' | sed -n 's/^State=//p')
    case "$slurm" in
      drain) case "$st" in *DRAIN*|*DOWN*|*FAIL*) ;; *)
        $s scontrol update nodename="$n" state=DRAIN reason="$reason" >/dev/null 2>&1 ||
          { echo "hvd-slurm-error cannot drain $n in Slurm (scontrol update as root: sudo -n)"; exit 5; }
        line=$(scontrol -o show node "$n" 2>&1) ;; esac ;;
      resume) mine=; case "$line" in *" Reason=$reason "*|*" Reason=$reason") mine=1 ;; esac
        for id in $adopt; do case "$line" in *" Reason=hvdcluster roll $id "*|*" Reason=hvdcluster roll $id") mine=1 ;;
        esac; done
        case "$mine$st" in 1*DRAIN*)
        $s scontrol update nodename="$n" state=RESUME >/dev/null 2>&1 ||
          { echo "hvd-slurm-error cannot resume $n in Slurm (scontrol update as root: sudo -n)"; exit 5; }
        line=$(scontrol -o show node "$n" 2>&1) ;; esac ;;
    esac
    printf 'hvd-slurm %s\n' "$line"
    jobs=$(squeue -h -w "$n" -t RUNNING,COMPLETING,SUSPENDED -o '%A %u %j' 2>&1) ||
      { printf 'hvd-slurm-error squeue -w %s: %s\n' "$n" "$jobs" | head -n 1; exit 5; }
    printf '%s\n' "$jobs" | sed '/^$/d; s/^/hvd-slurm-job /'
  else
    case "$line" in *"not found"*) ;; *) printf 'hvd-slurm-error %s\n' "$line" | head -n 1; exit 5 ;; esac
  fi
fi
"""


def script(put: dict | None = None, drop: list[str] | tuple[str, ...] = (), slurm: str | None = None,
           reason: str = "", adopt: list[str] | tuple[str, ...] = ()) -> str:
    """Shell for the node (as the login user): remove our files ``drop``, write ``put`` (never over an existing
    file), then (``slurm``: "drain" or "resume", with ``reason``, on a node Slurm knows) drain or resume it, and list
    every lease and mark, the GPU compute processes and the Slurm jobs running there. A resume also takes back the
    drains of the gone rolls ``adopt`` (their ids, as :func:`orphaned_drain` found them)."""
    if any(not _RUN_ID.fullmatch(run_id) for run_id in adopt):
        raise ValueError(f"not a roll id: {adopt}")
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
    lines += [f"slurm={shlex.quote(slurm or '')}", f"reason={shlex.quote(reason)}",
              f"adopt={shlex.quote(' '.join(adopt))}", SLURM_SCRIPT.strip()]
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
        elif word == "hvd-slurm":
            look.slurm = slurm_fields(rest)
        elif word == "hvd-slurm-job" and rest.strip():
            look.slurm_jobs.append(rest.strip())
        elif word == "hvd-slurm-error":
            look.error = f"Slurm: {rest.strip()}"
        elif word == "hvd-missing":
            look.error = f"{rest} is missing (hvd_base makes it; a node without systemd loses it at reboot): run " \
                         "`hvdcluster up`"
        elif word == "hvd-unwritable":
            look.error = f"cannot write in {rest} as the login user"
    if rc != 0 and look.error is None:
        look.error = f"unreachable or failed (rc {rc}): {err.strip().splitlines()[-1] if err.strip() else ''}".rstrip()
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
         timeout: float = 30) -> dict[str, Look]:
    """Run :func:`script` on every one of ``hosts`` over SSH, in parallel."""
    from .launch import on_each

    answers = on_each(inv, hosts, "sh -c " + shlex.quote(script(put, drop, slurm, reason, adopt)), timeout)
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
    reasons += [f"Slurm job {job}" for job in node.slurm_jobs]
    return reasons
