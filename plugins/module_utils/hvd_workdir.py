"""hvdcluster's private work folder on a node (hvd_workdir, and hvd_artifact's copy into one): one root-owned 0700
folder (default ``/var/lib/hvdcluster``) and its sub-folders, never a predictable name in a world-writable folder
such as ``/var/tmp``. One that already exists with another owner, a looser mode, or as a symlink is refused.
Standard library only (it runs on the nodes).
"""

from __future__ import annotations

import os
import re
import shutil
import stat

ROOT = "/var/lib/hvdcluster"

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def vet(path: str) -> str | None:
    """Why an existing ``path`` is not ours to use (None when it is a root-owned 0700 folder, not a symlink)."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        return f"{path} is a symlink"
    if not stat.S_ISDIR(info.st_mode):
        return f"{path} exists and is not a folder"
    if info.st_uid != 0:
        return f"{path} is owned by uid {info.st_uid}, not root"
    if info.st_mode & 0o077:
        return f"{path} has mode {stat.S_IMODE(info.st_mode):04o}, not 0700"
    return None


def ensure(path: str, check_mode: bool) -> bool:
    """Make ``path`` (0700) or vet the existing one; True when it had to be made. Raises ValueError when refused."""
    if not os.path.lexists(path):
        if not check_mode:
            os.mkdir(path, 0o700)
            os.chmod(path, 0o700)  # whatever the umask
        return True
    problem = vet(path)
    if problem:
        raise ValueError(
            f"{problem}: refusing to use it as hvdcluster's private work folder (a local user may have made it); "
            "remove it and run again"
        )
    return False


def workdir(root: str, name: str, clean: bool, check_mode: bool = False) -> tuple[str, bool]:
    """Make or vet ``root`` and ``root/name``; returns (path, changed)."""
    if not NAME.fullmatch(name):
        raise ValueError(f"invalid work folder name {name!r}")
    if not os.path.isabs(root):
        raise ValueError(f"root {root!r} is not an absolute path")
    if os.geteuid() != 0:
        raise ValueError("hvd_workdir must run as root (become: true)")
    changed = ensure(root, check_mode)
    path = os.path.join(root, name)
    if check_mode and changed:
        return path, True
    made = ensure(path, check_mode)
    if clean and not made and os.listdir(path):
        if not check_mode:
            shutil.rmtree(path)
            os.mkdir(path, 0o700)
            os.chmod(path, 0o700)
        made = True
    return path, changed or made
