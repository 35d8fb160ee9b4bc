"""Who holds a lease, and whether it still does: the rule every hvdcluster lease follows.

A holder record names a process (pid and its start time), the host and boot it runs on, and when it took the
lease. On the same host, the lease is live while that very process runs (a reused pid is told apart by its start
time; a host restarted since ends every lease it held); a holder on another host cannot be checked by pid and is
live until ``stale_after`` seconds have passed. The controller-side build leases (plugins/modules/hvd_lease.py) and
the job leases `hvdcluster run` leaves on nodes (src/hvdcluster/jobs.py) use it.

Stdlib only.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from datetime import datetime

# A lease is written in one write() right after it is created: one still empty after this long lost its writer.
EMPTY_GRACE = 60


def process(pid: int) -> dict | None:
    """{'ppid', 'start', 'argv', 'zombie'} of a running process, or None when there is none."""
    if os.path.isdir("/proc/self"):
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                argv = [word.decode(errors="replace") for word in handle.read().split(b"\0") if word]
        except (OSError, IndexError):
            return None
        return {"ppid": int(fields[1]), "start": fields[19], "argv": argv, "zombie": fields[0] in ("Z", "X")}
    # No /proc (a macOS controller): ps. The command comes back as one string, split on blanks.
    try:
        out = subprocess.run(["ps", "-o", "ppid=,stat=,lstart=,command=", "-p", str(pid)], capture_output=True,
                             text=True, env={**os.environ, "LC_ALL": "C"}, check=False).stdout.split()
    except OSError:
        return None
    if len(out) < 7:
        return None
    return {"ppid": int(out[0]), "start": " ".join(out[2:7]), "argv": out[7:], "zombie": out[1].startswith("Z")}


def boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return None


def stale_reason(holder: dict | None, age: float, stale_after: float) -> str | None:
    """Why a lease is stale, or None while its run may be alive. ``holder``: what it names ({}: empty, None:
    unreadable); ``age``: seconds since it was taken."""
    if holder == {}:  # created and written in one go: empty for long means its writer died in between
        return f"it is empty and {age:.0f} s old" if age > EMPTY_GRACE else None
    if holder is None or holder.get("host") != socket.gethostname() or not holder.get("pid"):
        return f"it is older than {stale_after} s and its pid cannot be checked here" if age > stale_after else None
    if holder.get("boot_id") and boot_id() and holder["boot_id"] != boot_id():
        return "its host restarted since"
    info = process(int(holder["pid"]))
    if info is None or info["zombie"]:
        return f"its pid {holder['pid']} is gone"
    if holder.get("pid_start") and info["start"] != holder["pid_start"]:
        return f"its pid {holder['pid']} is another process now"
    return None


def holder_record(run_id: str, owner: dict) -> dict:
    """The holder record of a lease taken now by ``owner`` ({'pid', 'start'} of the process that holds it; {}: none,
    then only ``stale_after`` ends the lease)."""
    now = time.time()
    return {
        "run_id": run_id,
        "pid": owner.get("pid"),
        "pid_start": owner.get("start"),
        "host": socket.gethostname(),
        "boot_id": boot_id(),
        "started": datetime.fromtimestamp(now).astimezone().isoformat(timespec="seconds"),
        "started_epoch": now,
    }
