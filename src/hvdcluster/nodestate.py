"""Node state on the controller: reading every node (playbooks/state.yml), the desired state, the run's inputs.

- ``read(root, limit)`` runs playbooks/state.yml in check mode (one read-only module call per node, no sudo) and
  collects each node's answer from the run's events.
- ``desired(root, hosts)`` loads what the last successful converge recorded: ``<root>/state/<node>.json``, written
  by ``record`` once ``up`` has read the node back at the end of site.yml (the last play) and found it to be what
  it must be (drift.confirm): a converge never records a node's deviations. A record that is missing or
  unreadable is None: the node is then judged by its peers.
- ``inputs_digest(root)`` (inputs.digest) covers everything a converge depends on (the inventory files, hvdcluster's
  own Ansible content and version); ``up`` records it, with its parts (inputs.parts), after a successful converge
  and takes the fast path only while it is unchanged.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import inputs
from .inputs import digest as inputs_digest  # noqa: F401 - the callers' name for it

STATE_TASK = "Read the node's state"  # with hvd_state_health: true (`up`), its result holds the health reading too
HEALTH_TASK = "Read the node's health"  # health.yml's task (`hvdcluster health`)
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
    health: dict[str, dict[str, Any]] = field(default_factory=dict)  # node -> its health reading, when one was asked for
    health_seconds: float = 0.0  # the health read's time on the slowest node (the module's own count)


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
         deep: bool = False, health: bool = False) -> Reading:
    """Read every node (or ``limit``) in check mode; ``hosts``: the nodes expected to answer; ``look``: the hosts
    themselves too (``plan --probe``); ``deep``: every env file's sha256 too (``check --deep``); ``health``: the quick
    health read too, in the same module run (``Reading.health``; `up`)."""
    extravars = {**({"hvd_state_look": {}} if look else {}), **({"hvd_state_deep": True} if deep else {}),
                 **({"hvd_state_health": True} if health else {})}
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
    health = health_in(events) if task == STATE_TASK else {}
    took = health_seconds_in(events) if task == STATE_TASK else 0.0
    return Reading(found, missing, result.rc, str(result.log), time.monotonic() - start, looks, health, took)


def health_in(events: Iterable[dict]) -> dict[str, dict[str, Any]]:
    """Each node's quick health reading from a state.yml run's events (hvd_state_health: true, which `up` passes: the
    state task's ``health``, read in the same module run)."""
    found, _ = collect(events, key="health")
    return found


def health_seconds_in(events: Iterable[dict]) -> float:
    """How long the health read took on the slowest node (the state task's ``health_seconds``)."""
    return round(max((float(((e.get("event_data") or {}).get("res") or {}).get("health_seconds") or 0)
                      for e in events if (e.get("event_data") or {}).get("task") == STATE_TASK
                      and e.get("event") == "runner_on_ok"), default=0.0), 3)


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


def _recorded(root: Path) -> dict[str, Any]:
    try:
        record = json.loads((state_dir(root) / INPUTS).read_text())
        return record if isinstance(record, dict) else {}
    except (OSError, ValueError):
        return {}


def recorded_inputs(root: Path) -> str:
    return str(_recorded(root).get("inputs") or "")


def recorded_parts(root: Path) -> dict[str, Any]:
    """What the recorded inputs were made of (inputs.parts), to say which variables changed since; {} if not known."""
    found = _recorded(root).get("parts")
    return found if isinstance(found, dict) else {}


def record_inputs(root: Path, digest: str) -> None:
    """After a full successful converge: what it converged from (the inputs as they are now: ``digest`` is their
    digest), with the parts they are made of."""
    _write_inputs(root, (json.dumps({"inputs": digest, "parts": inputs.parts(root)}) + "\n").encode())


def _write_inputs(root: Path, data: bytes) -> None:
    """The inputs record written whole or not at all (a reader never sees half of it)."""
    folder = state_dir(root)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    part = folder / f".{INPUTS}.part-{os.getpid()}"
    part.write_bytes(data)
    os.replace(part, folder / INPUTS)


DEEP_FINDINGS = "deep.json"


def deep_findings(root: Path) -> list[str]:
    """The nodes the last `check --deep` found with env files that differ in content only (size and time kept): a
    plain read does not see it, so the next `up` reads deep until a deep read finds them as installed."""
    try:
        nodes = json.loads((state_dir(root) / DEEP_FINDINGS).read_text()).get("nodes")
    except (OSError, ValueError, AttributeError):
        return []
    return [str(n) for n in nodes] if isinstance(nodes, list) else []


def note_deep_findings(root: Path, found: Iterable[str], cleared: Iterable[str]) -> None:
    """After a deep read: ``found`` nodes differ in their env files, ``cleared`` ones were read as installed."""
    nodes = (set(deep_findings(root)) | set(found)) - (set(cleared) - set(found))
    folder = state_dir(root)
    path = folder / DEEP_FINDINGS
    if not nodes:
        path.unlink(missing_ok=True)
        return
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    part = folder / f".{DEEP_FINDINGS}.part-{os.getpid()}"
    part.write_text(json.dumps({"nodes": sorted(nodes)}) + "\n")
    os.replace(part, path)


def forget_inputs(root: Path) -> None:
    """Something changed outside a full converge (a failed run, a partial one): the next `up` converges fully."""
    (state_dir(root) / INPUTS).unlink(missing_ok=True)


def saved_inputs(root: Path) -> bytes | None:
    """The inputs record as it is (its bytes), to be put back by :func:`restore_inputs`; None when there is none."""
    try:
        return (state_dir(root) / INPUTS).read_bytes()
    except OSError:
        return None


def restore_inputs(root: Path, saved: bytes) -> None:
    """Put back a record :func:`saved_inputs` read (a run that changed no node: the nodes are as that record says)."""
    _write_inputs(root, saved)
