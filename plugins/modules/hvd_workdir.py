#!/usr/bin/python
"""Ansible module: hvdcluster's private work folder on a node.

Everything hvdcluster builds, downloads or stages on a node lives under one root-owned 0700 folder
(default ``/var/lib/hvdcluster``), never under a predictable name in a world-writable folder such as
``/var/tmp``: a local user who creates such a name first would get code run as root. The folder is
created here; one that already exists with another owner, a looser mode, or as a symlink is refused.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: hvd_workdir
short_description: Make (and vet) hvdcluster's private root-owned work folder and a sub-folder of it
description:
  - Creates I(root) (root-owned, mode 0700) when missing; refuses it when it exists as a symlink, with another
    owner or with group/other permissions. Then the same for I(root)/I(name).
  - With I(clean), the sub-folder starts empty (a build folder must not reuse leftovers).
options:
  root: {description: The state folder., type: path, default: /var/lib/hvdcluster}
  name: {description: "Sub-folder for one role's work (letters, digits, '.', '_', '-').", type: str, required: true}
  clean: {description: Empty the sub-folder first., type: bool, default: false}
author: hvdcluster developers (@hvdcluster)
"""

EXAMPLES = r"""
- name: Start from a clean private work folder (/var/lib/hvdcluster/bundle, root-owned 0700)
  hvd.cluster.hvd_workdir:
    name: bundle
    clean: true
  register: work

- name: Make the private download folder, keeping what it holds
  hvd.cluster.hvd_workdir:
    name: nvidia-repo
  register: download
"""

RETURN = r"""
path: {description: The sub-folder's absolute path., type: str, returned: always}
"""

import os
import re
import shutil
import stat

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


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "default": "/var/lib/hvdcluster"},
            "name": {"type": "str", "required": True},
            "clean": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    try:
        path, changed = workdir(module.params["root"], module.params["name"], module.params["clean"],
                                module.check_mode)
    except (ValueError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=changed, path=path)


if __name__ == "__main__":
    main()
