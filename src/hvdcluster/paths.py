"""Where the Ansible content lives: inside the installed wheel, or at the top of a checkout."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


@cache
def ansible_home() -> Path:
    """The folder holding ``ansible.cfg``, ``roles/`` and ``playbooks/``.

    A wheel carries them in ``hvdcluster/_ansible``; a checkout (editable install or ``PYTHONPATH=src``)
    uses the ones at its top, so edits there take effect without a rebuild.
    """
    for candidate in (_PACKAGE / "_ansible", _PACKAGE.parent.parent):
        if (candidate / "playbooks" / "site.yml").is_file() and (candidate / "ansible.cfg").is_file():
            return candidate
    raise RuntimeError(f"hvdcluster is installed without its Ansible content (looked beside {_PACKAGE})")


def playbook(name: str) -> Path:
    return ansible_home() / "playbooks" / name


def controller_cache() -> Path:
    """The controller cache the roles use (their ``*_cache_dir`` default): $HVDCLUSTER_CACHE, else ~/.cache/hvdcluster."""
    return Path(os.environ.get("HVDCLUSTER_CACHE") or Path.home() / ".cache" / "hvdcluster")
