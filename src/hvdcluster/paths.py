"""Where the Ansible content lives: inside the installed wheel, or at the top of a checkout."""

from __future__ import annotations

import json
import os
import re
from functools import cache
from pathlib import Path

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_defaults

_PACKAGE = Path(__file__).resolve().parent


@cache
def ansible_home() -> Path:
    """The root of the hvd.cluster collection this command runs: ``galaxy.yml``, ``ansible.cfg``, ``plugins/``,
    ``roles/`` and ``playbooks/``.

    A checkout (editable install or ``PYTHONPATH=src``) is itself the collection, so edits there take effect without a
    rebuild; a wheel carries its copy at ``ansible_collections/hvd/cluster`` beside the ``hvdcluster`` package.
    """
    for candidate in (_PACKAGE.parent.parent, _PACKAGE.parent / "ansible_collections" / "hvd" / "cluster"):
        if (candidate / "galaxy.yml").is_file() and (candidate / "playbooks" / "site.yml").is_file():
            return candidate
    raise RuntimeError(f"hvdcluster is installed without its Ansible content (looked beside {_PACKAGE})")


def collections_dir() -> Path:
    """The folder that holds ``ansible_collections/hvd/cluster`` for `ansible_home`: what Ansible's collections path
    names. A checkout's is its ``collections/`` folder, whose ``ansible_collections/hvd/cluster`` points back at it."""
    home = ansible_home()
    if home == _PACKAGE.parent.parent:
        return home / "collections"
    return home.parents[2]


def collection_version(root: Path) -> str:
    """The ``version:`` of a collection's galaxy.yml (or MANIFEST.json, for one ansible-galaxy installed)."""
    manifest = root / "MANIFEST.json"
    if manifest.is_file():
        try:
            return str(json.loads(manifest.read_text())["collection_info"]["version"])
        except (ValueError, KeyError, TypeError):
            return "?"
    try:
        text = (root / "galaxy.yml").read_text()
    except OSError:
        return "?"
    found = re.search(r"(?m)^version:\s*(\S+)\s*$", text)
    return found.group(1) if found else "?"


def other_collections(search: list[Path]) -> list[tuple[Path, str]]:
    """Other copies of hvd.cluster on a collections search path (the operator's own, e.g. from ansible-galaxy):
    they do not run (ours comes first on the path), and the command says so."""
    ours = ansible_home().resolve()
    found = []
    for folder in search:
        root = folder.expanduser() / "ansible_collections" / "hvd" / "cluster"
        if root.is_dir() and root.resolve() != ours and (root, collection_version(root)) not in found:
            found.append((root, collection_version(root)))
    return found


def playbook(name: str) -> Path:
    return ansible_home() / "playbooks" / name


def controller_cache() -> Path:
    """The controller cache the roles use (their ``*_cache_dir`` default): $HVDCLUSTER_CACHE, else ~/.cache/hvdcluster."""
    return Path(hvd_defaults.controller_cache())
