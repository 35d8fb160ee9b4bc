"""The cluster's members and their slots, one rule for every side that needs them: the inventory hvdcluster writes
(src/hvdcluster/inventory/variables.py: ``hvd_members``), the roles reading a hand-written inventory
(plugins/filter/hvd_cluster.py: ``hvd_members``, ``hvd_host_list``) and ``hvdcluster run`` (src/hvdcluster/launch.py)::

    fabric  hvd_fabric_address, else ansible_host, else the inventory name
    port    hvd_fabric_port, else ansible_port, else 22
    slots   hvd_slots, else one per GPU the node reports (ansible_local.hvd_nvidia_driver.gpu_count), else 1

and horovodrun's ``-H`` list (``name:slots,...``). Plain functions over plain data; a value that is not a number is a
ValueError naming the host. Standard library only.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional


def _unset(value: Any) -> bool:
    """Null or empty: not set (a hand-written inventory may write either)."""
    return value is None or value == ""


def _set(host: Mapping[str, Any], name: str) -> Any:
    """The host's variable ``name``, or None when it is not set (absent, null or empty)."""
    value = host.get(name)
    return None if _unset(value) else value


def number(value: Any, host: str, what: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"hvd_members: {host}: {what} {value!r} is not a number") from None


def member(name: str, host: Mapping[str, Any]) -> dict[str, Any]:
    """One member from its host variables: {name, fabric, port, slots}; slots None where hvd_slots is not set (one
    per GPU, decided where the GPUs are known: :func:`slots`)."""
    fabric = _set(host, "hvd_fabric_address")
    fabric = fabric if fabric is not None else _set(host, "ansible_host")
    port = _set(host, "hvd_fabric_port")
    port = port if port is not None else _set(host, "ansible_port")
    written = _set(host, "hvd_slots")
    return {
        "name": name,
        "fabric": fabric if fabric is not None else name,
        "port": number(port if port is not None else 22, name, "port"),
        "slots": number(written, name, "slots") if written is not None else None,
    }


def slots(name: str, written: Any, gpus: Optional[int]) -> int:
    """A member's processes: ``written`` (hvd_slots) where set, else one per GPU (``gpus``), else 1."""
    if _unset(written):
        return int(gpus or 0) or 1
    return number(written, name, "slots")


def host_list(per_host: Mapping[str, int]) -> str:
    """horovodrun's and mpirun's ``-H``: ``name:slots`` of each host, in order, comma-separated."""
    return ",".join(f"{name}:{count}" for name, count in per_host.items())
