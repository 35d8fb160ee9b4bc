"""Node state on the controller: reading every node (playbooks/state.yml), the desired state, the run's inputs.

- ``read(root, limit)`` runs playbooks/state.yml in check mode (one read-only module call per node, no sudo) and
  collects each node's answer from the run's events.
- ``desired(root, hosts)`` loads what the last successful converge recorded: ``<root>/state/<node>.json``, written
  by ``record`` once ``up`` has read the node back at the end of site.yml (the last play) and found it to be what
  it must be (drift.confirm): a converge never records a node's deviations. A record that is missing or
  unreadable is None: the node is then judged by its peers.
- ``inputs_digest(root)`` covers everything a converge depends on (the inventory files, hvdcluster's own Ansible
  content and version); ``up`` records it after a full successful converge and takes the fast path only while it
  is unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import __version__, paths

STATE_TASK = "Read the node's state"
INPUTS = "inputs.json"


@dataclass
class Reading:
    """What one read of every node gave."""

    found: dict[str, dict[str, Any]] = field(default_factory=dict)  # node -> state
    unreachable: dict[str, str] = field(default_factory=dict)  # node -> why (unreachable or the module failed)
    rc: int = 0
    log: str = ""
    seconds: float = 0.0
    looks: dict[str, dict[str, Any]] = field(default_factory=dict)  # node -> the host look, when one was asked for


def collect(events: Iterable[dict], looks: dict[str, dict[str, Any]] | None = None, task: str = STATE_TASK,
            key: str = "state") -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Each node's state from a state.yml run's events, and the nodes that gave none (with why); ``looks``, when
    given, receives each node's host look. ``task`` and ``key``: another read-only playbook's task and the result
    key its module answers in (health.yml's ``reading``)."""
    found: dict[str, dict[str, Any]] = {}
    missing: dict[str, str] = {}
    for event in events:
        data = event.get("event_data") or {}
        host = data.get("host")
        if not host:
            continue
        kind = event.get("event", "")
        if kind == "runner_on_unreachable":
            missing[host] = f"unreachable: {str((data.get('res') or {}).get('msg', '')).strip()[:300]}"
        elif data.get("task") == task and kind == "runner_on_ok":
            state = (data.get("res") or {}).get(key)
            if isinstance(state, dict):
                found[host] = state
            look = (data.get("res") or {}).get("host")
            if looks is not None and isinstance(look, dict):
                looks[host] = look
        elif data.get("task") == task and kind == "runner_on_failed":
            missing[host] = f"failed: {str((data.get('res') or {}).get('msg', '')).strip()[:300]}"
    for host in found:
        missing.pop(host, None)
    return found, missing


def read(root: Path, limit: str | None = None, hosts: Iterable[str] = (), look: bool = False,
         deep: bool = False) -> Reading:
    """Read every node (or ``limit``) in check mode; ``hosts``: the nodes expected to answer; ``look``: the hosts
    themselves too (``plan --probe``); ``deep``: every env file's sha256 too (``check --deep``)."""
    extravars = {**({"hvd_state_look": {}} if look else {}), **({"hvd_state_deep": True} if deep else {})}
    return read_with("state.yml", root, limit, hosts, extravars)


def read_with(playbook: str, root: Path, limit: str | None, hosts: Iterable[str], extravars: dict[str, Any],
              task: str = STATE_TASK, key: str = "state") -> Reading:
    """Run a read-only ``playbook`` in check mode and collect each node's answer (``task``'s result ``key``); a node
    of ``hosts`` that gave none is named."""
    import time

    from .runner import run_playbook

    events: list[dict] = []
    start = time.monotonic()
    result = run_playbook(root, playbook, limit=limit, check=True, on_event=events.append,
                          extravars=extravars or None)
    looks: dict[str, dict[str, Any]] = {}
    found, missing = collect(events, looks, task=task, key=key)
    for host in hosts:
        if host not in found and host not in missing:
            missing[host] = f"no answer (ansible-playbook rc {result.rc}; see {result.log})"
    return Reading(found, missing, result.rc, str(result.log), time.monotonic() - start, looks)


def state_dir(root: Path) -> Path:
    return root / "state"


def desired(root: Path, hosts: Iterable[str]) -> dict[str, dict[str, Any] | None]:
    """The recorded desired state of each of ``hosts`` (None where there is no readable record)."""
    out: dict[str, dict[str, Any] | None] = {}
    for host in hosts:
        try:
            record = json.loads((state_dir(root) / f"{host}.json").read_text())
            out[host] = record["state"] if isinstance(record.get("state"), dict) else None
        except (OSError, ValueError, KeyError, AttributeError):
            out[host] = None
    return out


def record(root: Path, host: str, state: dict[str, Any]) -> None:
    """``host``'s desired state, as read back after a converge that left it as it must be (atomic, 0600)."""
    import datetime

    folder = state_dir(root)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    part = folder / f".{host}.json.part-{os.getpid()}"
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        recorded = datetime.datetime.now(datetime.timezone.utc).isoformat()
        handle.write(json.dumps({"state": state, "recorded": recorded}, indent=4, sort_keys=True) + "\n")
    os.replace(part, folder / f"{host}.json")


def _digest_tree(digest: Any, folder: Path, label: str) -> None:
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            path = Path(dirpath, name)
            if name.endswith(".pyc"):
                continue
            digest.update(f"{label}/{path.relative_to(folder)}\0".encode())
            digest.update(path.read_bytes() + b"\0")


def inputs_digest(root: Path) -> str:
    """sha256 of what a converge depends on: the inventory (hosts.yml, every group_vars and host_vars file, by meaning:
    its YAML without comments or layout; the cluster key's public half) and hvdcluster itself (its version and Ansible
    content). Nothing in it depends on where the inventory or hosts.yaml lie or how they were reached: file names are
    relative to ``root``, and the paths the inventory holds are canonical (inventory.canonical)."""
    import yaml

    def meaning(node: Any) -> Any:
        """A composed YAML node as plain data: tags (``!unsafe`` included), values and order; no comment, quoting
        style, layout or flow/block choice."""
        if isinstance(node, yaml.ScalarNode):
            return [node.tag, node.value]
        if isinstance(node, yaml.SequenceNode):
            return [node.tag, [meaning(item) for item in node.value]]
        if isinstance(node, yaml.MappingNode):
            return [node.tag, [[meaning(key), meaning(value)] for key, value in node.value]]
        return None

    def inventory_file(path: Path) -> bytes:
        """An inventory file by what it says (its YAML node tree), so comments and headers (which name the hosts.yaml
        they came from) never count; its bytes when it is not one YAML document."""
        data = path.read_bytes()
        try:
            return json.dumps(meaning(yaml.compose(data.decode("utf-8"), Loader=yaml.SafeLoader)),
                              separators=(",", ":")).encode()
        except (UnicodeDecodeError, yaml.YAMLError, RecursionError):
            return b"bytes\0" + data

    digest = hashlib.sha256(f"hvdcluster {__version__}\0".encode())
    for path in sorted([root / "hosts.yml", *root.glob("group_vars/**/*"), *root.glob("host_vars/**/*")]):
        if path.is_file() and not path.name.startswith("."):  # Ansible reads no hidden file (nor a write's part)
            digest.update(f"{path.relative_to(root)}\0".encode() + inventory_file(path) + b"\0")
    key = root / "ssh" / "id_ed25519.pub"
    if key.is_file():
        digest.update(f"{key.relative_to(root)}\0".encode() + key.read_bytes() + b"\0")
    home = paths.ansible_home()
    for part in ("ansible.cfg",):
        digest.update((home / part).read_bytes())
    for folder in ("roles", "playbooks", "plugins"):
        if (home / folder).is_dir():
            _digest_tree(digest, home / folder, folder)
    return digest.hexdigest()


def recorded_inputs(root: Path) -> str:
    try:
        return str(json.loads((state_dir(root) / INPUTS).read_text())["inputs"])
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def record_inputs(root: Path, digest: str) -> None:
    """After a full successful converge: what it converged from."""
    folder = state_dir(root)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    part = folder / f".{INPUTS}.part-{os.getpid()}"
    part.write_text(json.dumps({"inputs": digest}) + "\n")
    os.replace(part, folder / INPUTS)


def forget_inputs(root: Path) -> None:
    """Something changed outside a full converge (a failed run, a partial one): the next `up` converges fully."""
    (state_dir(root) / INPUTS).unlink(missing_ok=True)
