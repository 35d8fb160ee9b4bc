#!/usr/bin/python
"""Ansible module: the build lease of a controller-side cache entry, so that two runs never build the same entry.

Two runs that share a controller cache (two clusters, two inventories) may both find the same entry missing. The
first to ``acquire`` the lease, ``<entry>.lease`` beside the entry, builds it; the second waits until the lease is
gone and is told whether the entry was published meanwhile (``entry_ready``), so it builds nothing. Publishing stays
atomic either way (hvd_artifact); the lease only saves the duplicate build and names the run that builds.

The lease is created with ``O_CREAT|O_EXCL`` (mode 0600) and names its holder: the run id the play passes, the host,
the start time, and the pid of the run's ``ansible-playbook`` process, with that process's start time. A module's
own parent, Ansible's worker, lives for one task only; ``ansible-playbook`` lives for the whole run, and is found by
walking up from the module: the first ancestor whose command is ``ansible-playbook`` is the worker (forked, so it
has the same command line), its ancestors with that same command line lead to the main process. So a lease is held
at most as long as the run that took it: a run that dies without releasing it (SIGKILL included) leaves a lease whose
pid is gone (or is now another process, by its start time), and the next run takes it over and says so. A lease of
another host (a cache on a shared file system) cannot be checked by pid: it is stale once older than
``stale_after``. ``released`` removes the lease only when it is ours (the same run id).

Replacing a stale lease and releasing one happen under ``flock`` on the lease file, checked to be still the file at
that name: of two runs that find the same stale lease, one replaces it and the other then finds the new one.

A lease this user cannot open (another user's, in a cache two accounts share) cannot be read, locked or replaced: it
is held while its file is younger than ``stale_after`` (we wait for it as for any other), and once older it fails
the run naming the lease, its owner and how to remove it; it is never reported acquired while it stays.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: hvd_lease
short_description: Acquire or release the build lease of a controller-side cache entry (<entry>.lease)
description:
  - "Run on the controller (C(delegate_to: localhost), C(run_once), C(become: false)) by the role that builds a cache
    entry, before it builds; released after publishing, and when the build fails (C(always))."
  - C(acquired) waits while a live run holds the lease (up to I(timeout)), takes over a stale one, then reports
    whether the entry was published meanwhile (I(entry_ready)); then the caller verifies it and builds nothing.
  - A lease of another user (a shared cache) that this user cannot open is waited for while young; once stale it
    fails the task naming the lease, its owner and how to remove it. It is never reported acquired.
options:
  path: {description: "The cache entry: a file, or a folder of files (the lease is <path>.lease).", type: path,
         required: true}
  run_id: {description: The run's id (the same for every task of the play); released only removes a lease with it.,
           type: str, required: true}
  state: {description: acquired or released., type: str, choices: [acquired, released], default: acquired}
  wait: {description: "acquired: wait while a live run holds the lease (false: report it held, acquired=false).",
         type: bool, default: true}
  timeout: {description: "acquired: seconds to wait before failing with a message naming the holder.", type: int,
            default: 3600}
  stale_after: {description: "Seconds after which a lease whose pid cannot be checked (another host's) is stale.",
                type: int, default: 21600}
  poll_interval: {description: Seconds between looks at a held lease., type: float, default: 5}
author: hvdcluster developers (@hvdcluster)
"""

EXAMPLES = r"""
- name: Take the cache entry's build lease (report it held rather than wait)
  hvd.cluster.hvd_lease:
    path: ~/.cache/hvdcluster/envs/env-3f2a9c.tar.zst
    run_id: "{{ run_id }}"
    wait: false
  delegate_to: localhost
  run_once: true
  become: false
  register: lease

- name: Wait for the run that holds it, then take the lease
  hvd.cluster.hvd_lease:
    path: ~/.cache/hvdcluster/envs/env-3f2a9c.tar.zst
    run_id: "{{ run_id }}"
    timeout: 7200
  delegate_to: localhost
  run_once: true
  become: false
  when: not lease.acquired

- name: Release the build lease (built, failed, or found published)
  hvd.cluster.hvd_lease:
    path: ~/.cache/hvdcluster/envs/env-3f2a9c.tar.zst
    run_id: "{{ run_id }}"
    state: released
  delegate_to: localhost
  run_once: true
  become: false
"""

RETURN = r"""
acquired: {description: The lease is ours now., type: bool, returned: state=acquired}
waited: {description: Another live run held the lease and we waited for it., type: bool, returned: state=acquired}
entry_ready: {description: "The entry is published (a file with its .sha256 beside it; for a folder, one such file
  in it): verify it and build nothing.", type: bool, returned: state=acquired}
took_over: {description: "The stale lease replaced (its holder), or null.", type: dict, returned: state=acquired}
stale_reason: {description: Why the replaced lease was stale., type: str, returned: when took_over}
holder: {description: "The lease's holder: ours once acquired; another run's when not acquired or not released.",
         type: dict, returned: when there is a lease}
released: {description: Our lease was removed., type: bool, returned: state=released}
lease: {description: The lease file's path., type: str, returned: always}
run_id: {description: The run id passed (release with it)., type: str, returned: always}
"""

import errno
import fcntl
import json
import os
import pwd
import re
import time

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_holder import (
    holder_record,
    process,
    stale_reason,
)

# How ansible-playbook shows in a command line: the script, or the module run with -m.
PLAYBOOK = re.compile(r"(^|/)ansible-playbook$|^ansible\.cli\.playbook$")


class LeaseError(Exception):
    """The lease cannot be taken: the message names it, who holds it and what to do."""


class LeaseTimeout(LeaseError):
    """The lease stayed held by a live run for ``timeout`` seconds."""


def lease_path(path: str) -> str:
    return path.rstrip("/") + ".lease"


def run_process(pid: int | None = None) -> dict | None:
    """The long-lived ``ansible-playbook`` process above ``pid`` (default: this one): {'pid', 'start'}, or None."""
    pid = os.getpid() if pid is None else pid
    info = process(pid)
    while info is not None and not any(PLAYBOOK.search(word) for word in info["argv"][:3]):
        pid = info["ppid"]
        info = process(pid) if pid > 1 else None
    if info is None:
        return None
    while info["ppid"] > 1:  # from the worker (forked: the same command line) up to the main process
        parent = process(info["ppid"])
        if parent is None or parent["argv"] != info["argv"]:
            break
        pid, info = info["ppid"], parent
    return {"pid": pid, "start": info["start"]}


def whoami(run_id: str, owner: dict | None = None) -> dict:
    """The holder record of a lease this run takes now. ``owner``: the process that holds it (default: the run's
    ansible-playbook process; none when there is no such process, e.g. run by hand: then only ``stale_after`` ends
    the lease)."""
    return holder_record(run_id, (run_process() or {}) if owner is None else owner)


def describe(holder: dict | None) -> str:
    if not holder:
        return "an unknown run (its lease cannot be read)"
    pid = f"pid {holder['pid']}" if holder.get("pid") else "no known pid"
    return f"run {holder['run_id']} ({pid} on {holder.get('host')}, started {holder.get('started')})"


def read(fd: int) -> dict | None:
    """What a lease file names: {} when empty, None when unreadable."""
    try:
        data = os.pread(fd, 65536, 0)
        holder = json.loads(data) if data else {}
    except (OSError, ValueError):
        return None
    return holder if holder == {} or (isinstance(holder, dict) and holder.get("run_id")) else None


def create(lease: str, me: dict) -> bool:
    """Create the lease naming ``me`` (O_EXCL, 0600); False when there is one."""
    try:
        fd = os.open(lease, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return False
    try:
        os.write(fd, (json.dumps(me, sort_keys=True) + "\n").encode())
    except BaseException:
        os.unlink(lease)
        raise
    finally:
        os.close(fd)
    return True


def owner_of(lease: str) -> str:
    """The name of the user who owns the lease file (its uid when it has no name here)."""
    try:
        uid = os.lstat(lease).st_uid
    except OSError:
        return "an unknown user"
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def examine(lease: str, stale_after: float, remove) -> tuple[str, dict | None, str | None]:
    """Look at the lease under flock: (state, holder, stale reason). state: 'gone' (none, or replaced while we
    looked: look again), 'removed' when ``remove(holder, reason)`` said so (then it is), 'foreign' when this user
    cannot open it (another user's: neither read nor replaced; stale by its file's age), else 'kept'."""
    try:
        fd = os.open(lease, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)  # RDWR: an exclusive lock over NFS needs it
    except FileNotFoundError:
        return "gone", None, None
    except PermissionError:  # another user's lease (a shared cache): held until stale_after by its mtime
        try:
            age = time.time() - os.lstat(lease).st_mtime
        except FileNotFoundError:
            return "gone", None, None
        return "foreign", None, stale_reason(None, age, stale_after)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        info = os.fstat(fd)
        try:
            now = os.lstat(lease)
        except FileNotFoundError:
            return "gone", None, None
        if (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino):
            return "gone", None, None
        holder = read(fd)
        started = (holder or {}).get("started_epoch")
        age = time.time() - (started if isinstance(started, (int, float)) else info.st_mtime)
        reason = stale_reason(holder, age, stale_after)
        if not remove(holder, reason):
            return "kept", holder, reason
        os.unlink(lease)
        return "removed", holder, reason
    finally:
        os.close(fd)


def entry_ready(path: str) -> bool:
    """The entry is published: a file with its ``.sha256`` beside it, or a folder holding one (not verified here)."""
    if os.path.isfile(path):
        return os.path.isfile(path + ".sha256")
    if os.path.isdir(path):
        names = set(os.listdir(path))
        return any(name + ".sha256" in names and os.path.isfile(os.path.join(path, name)) for name in names)
    return False


def acquire(path: str, run_id: str, *, wait: bool = True, timeout: float = 3600, stale_after: float = 21600,
            poll_interval: float = 5, owner: dict | None = None, check_mode: bool = False) -> dict:
    """Take ``<path>.lease`` for ``run_id`` (see the module's description). Raises LeaseTimeout, or LeaseError on
    a stale lease of another user (it cannot be replaced)."""
    lease = lease_path(path)
    me = whoami(run_id, owner)
    deadline = time.monotonic() + timeout
    result = {"lease": lease, "run_id": run_id, "waited": False, "took_over": None}
    if not check_mode:
        os.makedirs(os.path.dirname(lease) or ".", mode=0o700, exist_ok=True)
    while True:
        if not check_mode and create(lease, me):
            return {**result, "acquired": True, "changed": True, "holder": me, "entry_ready": entry_ready(path)}
        # A stale lease is replaced (not in check mode); one of this very run is ours already.
        state, holder, reason = examine(lease, stale_after, lambda h, r: r is not None and not check_mode)
        if state == "foreign" and reason is not None:
            owner = owner_of(lease)
            raise LeaseError(
                f"{lease} is a stale build lease of another user ({owner}: {reason}) that this user cannot replace: "
                f"remove it as {owner} or root (rm {lease}), or give each user a cache of its own, then run again")
        if state == "removed":
            result.update(took_over=holder or {}, stale_reason=reason)
            continue
        if state == "gone" and not check_mode:
            continue
        if state == "gone" or reason or (holder or {}).get("run_id") == run_id:
            return {**result, "acquired": True, "changed": state != "kept" or reason is not None,
                    "holder": holder if state == "kept" and not reason else me, "entry_ready": entry_ready(path),
                    **({"took_over": holder, "stale_reason": reason} if reason else {})}
        left = deadline - time.monotonic()
        if not wait or check_mode:
            return {**result, "acquired": False, "changed": False, "holder": holder or {},
                    "entry_ready": entry_ready(path)}
        if left <= 0 and state == "foreign":
            raise LeaseTimeout(
                f"{path} is being built by a run of another user ({owner_of(lease)}): waited {timeout} s for its "
                f"lease {lease}, which this user cannot read or replace. Wait for that run, or remove the lease as "
                f"its owner or root once that run is gone")
        if left <= 0:
            raise LeaseTimeout(
                f"{path} is being built by {describe(holder)}: waited {timeout} s for its lease {lease}. Wait for "
                f"that run or stop it: the lease of a run that is no longer running is taken over (its pid is gone, "
                f"or, from another host, it is older than {stale_after} s)")
        result["waited"] = True
        time.sleep(min(poll_interval, left))


def release(path: str, run_id: str, check_mode: bool = False) -> dict:
    """Remove ``<path>.lease`` when ``run_id`` holds it; another run's lease is left in place and named."""
    lease = lease_path(path)
    state, holder, dummy = examine(lease, float("inf"),
                                   lambda h, r: (h or {}).get("run_id") == run_id and not check_mode)
    ours = state == "removed" or (state == "kept" and (holder or {}).get("run_id") == run_id)
    result = {"released": ours, "changed": ours, "lease": lease, "run_id": run_id}
    if state in ("kept", "foreign") and not ours:
        who = f"another user ({owner_of(lease)})" if state == "foreign" else describe(holder)
        result.update(holder=holder or {}, msg=f"{lease} is not ours (run {run_id}): {who} holds it; left in place")
    return result


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "run_id": {"type": "str", "required": True},
            "state": {"type": "str", "choices": ["acquired", "released"], "default": "acquired"},
            "wait": {"type": "bool", "default": True},
            "timeout": {"type": "int", "default": 3600},
            "stale_after": {"type": "int", "default": 21600},
            "poll_interval": {"type": "float", "default": 5},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        if p["state"] == "released":
            result = release(p["path"], p["run_id"], module.check_mode)
            if "msg" in result:
                module.warn(result["msg"])
            module.exit_json(**result)
        result = acquire(p["path"], p["run_id"], wait=p["wait"], timeout=p["timeout"], stale_after=p["stale_after"],
                         poll_interval=max(p["poll_interval"], 0.05), check_mode=module.check_mode)
        if result.get("took_over") is not None and not module.check_mode:
            module.warn(f"took over the stale lease {result['lease']} of {describe(result['took_over'])}: "
                        f"{result['stale_reason']}")
    except LeaseError as exc:
        module.fail_json(msg=str(exc), lease=lease_path(p["path"]), run_id=p["run_id"])
    except OSError as exc:
        module.fail_json(msg=f"{lease_path(p['path'])}: {exc.strerror or exc}", errno=errno.errorcode.get(exc.errno))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
