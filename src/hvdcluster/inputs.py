"""A converge's inputs: their digest, what they are made of, and which roles a change of them reaches.

- ``digest(root)`` covers everything a converge depends on: the inventory (hosts.yml, every group_vars and host_vars
  file, by meaning: its YAML without comments or layout; the cluster key's public half) and hvdcluster itself (its
  version and Ansible content). `up` records it after a successful converge and takes the fast path only while it
  is unchanged.
- ``parts(root)`` splits the same inputs into each variable of group_vars and host_vars (by meaning) and a frame
  (everything else); `up` records them beside the digest.
- ``change(root, recorded)``: when the digest moved, which variables changed and the earliest role of site.yml that
  reads any of them: `up` converges from that role on, as a repair of the fast path does, instead of running every
  role on every node for a package added to the env. Where a role reads a variable is found in the Ansible content
  itself (its roles and playbooks, by name), so a new role or variable needs no table here. Anything else that
  changed (hosts.yml, the cluster key, hvdcluster or its Ansible content, an ``ansible_*`` variable Ansible reads by
  itself, a file that is not a mapping of variables), or a variable the pre-flight reads: every role, as before.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import __version__, paths

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _meaning(node: Any) -> Any:
    """A composed YAML node as plain data: tags (``!unsafe`` included), values and order; no comment, quoting style,
    layout or flow/block choice."""
    import yaml

    if isinstance(node, yaml.ScalarNode):
        return [node.tag, node.value]
    if isinstance(node, yaml.SequenceNode):
        return [node.tag, [_meaning(item) for item in node.value]]
    if isinstance(node, yaml.MappingNode):
        return [node.tag, [[_meaning(key), _meaning(value)] for key, value in node.value]]
    return None


_NOT_YAML = object()


def _compose(data: bytes) -> Any:
    """An inventory file's YAML node tree (None for an empty one); _NOT_YAML when it is not one YAML document."""
    import yaml

    try:
        return yaml.compose(data.decode("utf-8"), Loader=yaml.SafeLoader)
    except (UnicodeDecodeError, yaml.YAMLError, RecursionError):
        return _NOT_YAML


def _dump(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _inventory_files(root: Path) -> list[Path]:
    """hosts.yml, then every group_vars and host_vars file Ansible reads (no hidden file, nor a write's part)."""
    found = [root / "hosts.yml", *root.glob("group_vars/**/*"), *root.glob("host_vars/**/*")]
    return sorted(p for p in found if p.is_file() and not p.name.startswith("."))


def _by_meaning(path: Path) -> bytes:
    """An inventory file by what it says (its YAML node tree), so comments and headers (which name the hosts.yaml they
    came from) never count; its bytes when it is not one YAML document."""
    data = path.read_bytes()
    node = _compose(data)
    return b"bytes\0" + data if node is _NOT_YAML else _dump(_meaning(node))


def _frame(digest: Any, root: Path) -> None:
    """The inputs besides the inventory files: the cluster key's public half, hvdcluster's version and Ansible
    content."""
    key = root / "ssh" / "id_ed25519.pub"
    if key.is_file():
        digest.update(f"{key.relative_to(root)}\0".encode() + key.read_bytes() + b"\0")
    home = paths.ansible_home()
    digest.update((home / "ansible.cfg").read_bytes())
    for folder in ("roles", "playbooks", "plugins"):
        if (home / folder).is_dir():
            digest_tree(digest, home / folder, folder)


def digest_tree(digest: Any, folder: Path, label: str) -> None:
    """Feed ``digest`` with every file below ``folder`` in name order, each as ``label/<relative path>`` and its bytes;
    byte caches (``__pycache__``, ``*.pyc``) left out. The test harness keys its kept labs with it too."""
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            path = Path(dirpath, name)
            if name.endswith(".pyc"):
                continue
            digest.update(f"{label}/{path.relative_to(folder)}\0".encode())
            digest.update(path.read_bytes() + b"\0")


def digest(root: Path) -> str:
    """sha256 of what a converge depends on. Nothing in it depends on where the inventory or hosts.yaml lie or how
    they were reached: file names are relative to ``root``, and the paths the inventory holds are canonical
    (inventory.canonical)."""
    total = hashlib.sha256(f"hvdcluster {__version__}\0".encode())
    for path in _inventory_files(root):
        total.update(f"{path.relative_to(root)}\0".encode() + _by_meaning(path) + b"\0")
    _frame(total, root)
    return total.hexdigest()


def _variables(root: Path) -> tuple[dict[str, Any], list[Path]]:
    """Each variable of the group_vars and host_vars files (``<file>:<name>`` -> its value's meaning), and the
    inventory files that are not read here variable by variable (hosts.yml, a file that is not a mapping)."""
    import yaml

    out: dict[str, Any] = {}
    whole: list[Path] = []
    for path in _inventory_files(root):
        relative = str(path.relative_to(root))
        node = _compose(path.read_bytes()) if relative != "hosts.yml" else None
        if not isinstance(node, yaml.MappingNode) or not all(isinstance(k, yaml.ScalarNode) for k, _ in node.value):
            whole.append(path)
            continue
        for key, value in node.value:
            out[f"{relative}:{key.value}"] = _meaning(value)
    return out, whole


def parts(root: Path) -> dict[str, Any]:
    """The inputs in parts: ``variables`` (``<file>:<name>`` -> sha256 of its value's meaning) and ``frame`` (sha256
    of everything else digest() covers)."""
    return _parts(root, *_variables(root))


def _parts(root: Path, variables: dict[str, Any], whole: list[Path]) -> dict[str, Any]:
    frame = hashlib.sha256(f"hvdcluster {__version__}\0".encode())
    for path in whole:
        frame.update(f"{path.relative_to(root)}\0".encode() + _by_meaning(path) + b"\0")
    _frame(frame, root)
    return {"frame": frame.hexdigest(),
            "variables": {k: hashlib.sha256(_dump(v)).hexdigest() for k, v in sorted(variables.items())}}


@functools.lru_cache(maxsize=4)
def readers(home: Path) -> dict[str, int]:
    """Each name the Ansible content of site.yml's roles mentions -> the position (in drift.ROLES) of the earliest
    role that mentions it: in its own files, in its playbook (a play's hosts, become, when), or in an inner role it
    includes (hvd_fanout: at the earliest role that names it). The read-back (state.yml) runs in every converge and
    counts nowhere; a playbook that runs none of these roles (bundle, health) is not part of `up`."""
    from .drift import ROLES

    def names_in(folder: Path) -> set[str]:
        found: set[str] = set()
        for path in sorted(folder.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                found.update(_NAME.findall(path.read_text(errors="replace")))
        return found

    roles = home / "roles"
    mentions = {role: names_in(roles / role) for role in sorted(p.name for p in roles.iterdir() if p.is_dir())}
    for playbook in sorted((home / "playbooks").glob("*.yml")):
        if playbook.name in ("site.yml", "state.yml"):
            continue
        text = set(_NAME.findall(playbook.read_text()))
        runs = [role for role in ROLES if role in text]
        if runs:
            mentions.setdefault(runs[0], set()).update(text)
    position = {role: n for n, role in enumerate(ROLES)}
    for inner in [r for r in mentions if r not in position]:  # included roles take their includers' place
        at = [position[r] for r in ROLES if inner in mentions.get(r, ())]
        if at:
            position[inner] = min(at)
    out: dict[str, int] = {}
    for role, names in mentions.items():
        if role in position:
            for name in names:
                out[name] = min(out.get(name, position[role]), position[role])
    return out


@dataclass(frozen=True)
class Change:
    """What moved in the inputs since they were recorded: the changed variables and the first role to run."""

    variables: list[str]
    first_role: str


def change(root: Path, recorded: dict[str, Any]) -> Change | None:
    """The variables that changed since ``recorded`` (parts() of the recorded inputs) and the earliest role that reads
    any of them. None: converge every node with every role (nothing recorded to compare with, the frame moved, an
    ``ansible_*`` variable, or a variable the pre-flight reads)."""
    from .drift import ROLES

    then = recorded.get("variables")
    values, whole = _variables(root)  # read once: for the parts and for the names the values hold
    now = _parts(root, values, whole)
    if not isinstance(then, dict) or recorded.get("frame") != now["frame"]:
        return None
    moved = {k for k in set(then) | set(now["variables"]) if then.get(k) != now["variables"].get(k)}
    changed = {k.split(":", 1)[1] for k in moved}
    # a variable whose value names a changed one (Jinja in group_vars) changed with it
    texts = {k.split(":", 1)[1]: set(_NAME.findall(json.dumps(v))) for k, v in values.items()}
    grown = True
    while grown:
        grown = False
        for name, words in texts.items():
            if name not in changed and words & changed:
                changed.add(name)
                grown = True
    if not changed or any(name.startswith("ansible_") for name in changed):
        return None
    read = readers(paths.ansible_home())
    at = [read[name] for name in changed if name in read]
    first = min(at, default=len(ROLES) - 1)  # read by no role: the post-flight proves the nodes, as every run does
    return None if first == 0 else Change(sorted(changed), ROLES[first])
