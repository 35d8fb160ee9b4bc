"""One run at a time per inventory: an exclusive lock on ``<inventory>/.lock`` that names its holder.

``up`` and ``preflight`` (and ``inventory``, which rewrites the same files) take the lock before they write
anything and hold it until the run ends. A second run does not wait: it stops at once, writes nothing, and
says who holds the folder::

    hvdcluster: inventories/lab-a is in use by pid 4242 (started 2025-05-01T10:00:00+02:00, command up);
    wait for it or stop it

The lock is ``flock(2)`` on the file: the kernel drops it when the holder exits, however it exits, so a
run that was killed leaves no stale lock behind (the file stays; what it says is only read while it is
locked). Its exit code is 1 (:class:`InventoryBusy`): the input was fine, the cluster was busy.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from .errors import HvdError

LOCK_NAME = ".lock"  # hidden: Ansible never reads a dot file of an inventory folder as inventory
ROLL = "up --rolling"  # the command a roll holds the folder as: `run` may launch beside it (hold's ``beside``)


class InventoryBusy(HvdError):
    """Another run holds the inventory folder (exit code 1)."""

    exit_code = 1

    def __init__(self, root: Path, holder: dict) -> None:
        self.root = root
        self.holder = holder
        super().__init__(str(self))

    def __str__(self) -> str:
        pid, started, command = (self.holder.get(k) for k in ("pid", "started", "command"))
        who = f"pid {pid} (started {started}, command {command})" if pid else "another hvdcluster run"
        return f"{self.root} is in use by {who}; wait for it or stop it"


def _holder(fd: int) -> dict:
    """What the holder wrote into the lock file; {} when it cannot be read (it may be writing it now)."""
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@contextmanager
def hold(root: str | os.PathLike[str], command: str, beside: tuple[str, ...] = ()) -> Iterator[None]:
    """Hold the inventory folder ``root`` (created when missing) for the duration of the ``with`` block.

    Raises :class:`InventoryBusy` at once when another process holds it; the loser changes nothing: the
    lock file is opened without truncating and written only once the lock is ours. ``beside``: the holders'
    commands this run may go on beside, without the lock (`run` beside `up --rolling`, whose nodes being changed
    carry marks that `run` honours).
    """
    folder = Path(root)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise HvdError(f"{folder}: cannot take the run lock: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                busy = _holder(fd)
                if busy.get("command") in beside:
                    yield
                    return
                raise InventoryBusy(folder, busy) from None
            raise HvdError(f"{folder}: cannot take the run lock: {exc.strerror or exc}") from None
        record = {"pid": os.getpid(), "started": datetime.now().astimezone().isoformat(timespec="seconds"),
                  "command": command}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)  # nobody holds it now; the kernel drops the lock when fd closes
    finally:
        os.close(fd)


def holder(root: str | os.PathLike[str]) -> dict | None:
    """The holder of ``root``'s lock (pid, started, command), or None when nobody holds it."""
    path = Path(root) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return _holder(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
