"""A read-only look at the nodes for the resolver (``hvdcluster plan --probe``): OS, kernel, gcc, python, GPU
models and the loaded NVIDIA driver.

It is the same probe as the pre-flight's and ``check``'s: playbooks/state.yml in check mode, whose one module call
per node (plugins/modules/hvd_node_state.py) also looks at the host when asked (``hvd_state_look``). The nodes are reached
through a connection-only inventory in a temporary folder; host keys are pinned exactly as the playbook runs pin
them, in ``<inventory>/ssh/known_hosts`` (keys pinned in hosts.yaml are written there first and checked strictly;
another node's key seen for the first time is recorded; a changed key is refused), and the run's log stays in
``<inventory>/runs``. Nothing is written on the nodes.
"""

from __future__ import annotations

import re
import shlex
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import inventory, nodestate
from .compat import NodeInfo
from .errors import HvdError
from .progress import PIN_REFUSED
from .spec import ClusterSpec, known_hosts_name


@dataclass(frozen=True)
class NodeFacts:
    host: str
    os_id: str = ""
    os_version: str = ""
    kernel: str = ""
    gcc: str = ""
    python: str = ""
    gpus: tuple[str, ...] = ()
    driver_loaded: str = ""


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _clean(value: Any) -> str:
    """A value a node reported, as printable text (a terminal escape, say, is dropped), 200 characters at most."""
    return _CONTROL.sub("", str(value if value is not None else "")).strip()[:200]


def from_look(host: str, look: dict[str, Any]) -> NodeFacts:
    """The facts in a node's host look (hvd_node_state's ``host``)."""
    release = look.get("release") or {}
    nvidia = look.get("nvidia") or {}
    return NodeFacts(host, _clean(release.get("id")), _clean(release.get("version")),
                     _clean((look.get("kernel") or {}).get("running")), _clean((look.get("gcc") or {}).get("gcc")),
                     _clean(look.get("python")), tuple(g for g in map(_clean, nvidia.get("gpus") or []) if g),
                     _clean(nvidia.get("loaded")))


def merge(facts: list[NodeFacts]) -> NodeInfo:
    """One NodeInfo for the resolver; nodes that disagree on what a build depends on are refused."""
    if not facts:
        return NodeInfo()
    for field in ("os_id", "os_version", "gcc", "python"):
        seen = {getattr(f, field) for f in facts if getattr(f, field)}
        if len(seen) > 1:
            listing = ", ".join(f"{f.host}: {getattr(f, field) or '-'}" for f in facts)
            raise HvdError(f"nodes differ in {field.replace('_', ' ')} ({listing}): one build serves every node, "
                           "so converge them to one OS image first")
    first = facts[0]
    gpus = tuple(dict.fromkeys(g for f in facts for g in f.gpus))
    driver = next((f.driver_loaded for f in facts if f.driver_loaded), None)
    return NodeInfo(os_id=first.os_id or None, os_version=first.os_version or None, kernel=first.kernel or None,
                    gcc=first.gcc or None, python=first.python or None, gpus=gpus, driver_loaded=driver)


def read_looks(cluster: ClusterSpec, inventory_dir: Path) -> nodestate.Reading:
    """Every node's host look, through a connection-only inventory whose ``ssh`` and ``runs`` are those of
    ``inventory_dir`` (pinned host keys, run logs)."""
    for name in ("ssh", "runs"):
        (inventory_dir / name).mkdir(mode=0o700, parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hvd-probe-") as tmp:
        root = Path(tmp) / cluster.cluster
        root.mkdir()
        for name in ("ssh", "runs"):
            (root / name).symlink_to((inventory_dir / name).resolve(), target_is_directory=True)
        # Rendered through the links: the bastion's key and the pinned node keys land in the inventory's own ssh/,
        # merged with the keys recorded there before (never replacing that known_hosts by a fresh one).
        inventory.render(cluster, tmp)
        return nodestate.read(root, hosts=[h.name for h in cluster.hosts], look=True)


def probe(cluster: ClusterSpec, inventory_dir: Path,
          read: Callable[[ClusterSpec, Path], nodestate.Reading] = read_looks) -> tuple[NodeInfo, list[NodeFacts]]:
    """What every node looks like, merged for the resolver; a node that cannot be read is refused by name."""
    reading = read(cluster, inventory_dir)
    jump = cluster.ssh.proxy_jump
    if jump is not None and any(h.name not in reading.looks for h in cluster.hosts):
        problem = inventory.bastion_problem(vars(jump), str(inventory_dir / "ssh"))
        if problem:
            raise HvdError(f"cannot probe the nodes: {problem}")
    for host in cluster.hosts:
        if host.name in reading.looks:
            continue
        why = reading.unreachable.get(host.name) or f"no answer (see {reading.log})"
        if "REMOTE HOST IDENTIFICATION HAS CHANGED" in why or "Host key verification failed" in why:
            if host.host_keys:
                raise HvdError(f"{host.name} ({host.address}:{host.port}): {PIN_REFUSED}")
            known = inventory_dir / "ssh" / "known_hosts"
            raise HvdError(f"{host.name} ({host.address}:{host.port}): host key changed since it was pinned in "
                           f"{known}; if the node was reinstalled, remove the old key (ssh-keygen -f "
                           f"{shlex.quote(str(known))} -R {shlex.quote(known_hosts_name(host.address, host.port))})")
        raise HvdError(f"{host.name} ({host.address}:{host.port}): cannot probe: {why}")
    facts = [from_look(host.name, reading.looks[host.name]) for host in cluster.hosts]
    return merge(facts), facts


def describe(facts: NodeFacts) -> str:
    gpus = ", ".join(f"{n}x {g}" for g, n in _count(facts.gpus)) or "no GPU"
    return (f"{facts.host}: {facts.os_id} {facts.os_version}, kernel {facts.kernel or '?'}, gcc {facts.gcc or '-'}, "
            f"python {facts.python or '-'}, {gpus}" + (f", driver {facts.driver_loaded}" if facts.driver_loaded else ""))


def _count(items: tuple[str, ...]) -> list[tuple[str, int]]:
    out: dict[str, int] = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return list(out.items())

