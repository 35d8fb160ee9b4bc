"""Where the Ansible content lives: inside the installed wheel, or at the top of a checkout."""

from __future__ import annotations

import importlib
import os
from functools import cache
from pathlib import Path
from types import ModuleType

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


def module_utils(name: str) -> ModuleType:
    """``module_utils/<name>.py``, imported the way Ansible's modules import it (``ansible.module_utils.<name>``):
    the folder shipped beside the playbooks joins ``ansible.module_utils``' package path once, so the command and the
    modules run the same code, and the shared files import each other one way."""
    import ansible.module_utils as package

    folder = str(ansible_home() / "module_utils")
    if folder not in package.__path__:
        package.__path__.append(folder)
    return importlib.import_module(f"ansible.module_utils.{name}")
