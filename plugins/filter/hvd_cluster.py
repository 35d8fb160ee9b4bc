"""The cluster's members as every role sees them: name, fabric address, SSH port on the fabric, slots.

The generated inventory writes the list once (``hvd_members`` in group_vars/all/cluster.yml, by
src/hvdcluster/inventory/variables.py); a hand-written inventory need not: the roles derive each member from its
host variables with the same rules (plugins/module_utils/hvd_members.py, which `hvdcluster run` uses too)::

    fabric  hvd_fabric_address, else ansible_host, else the inventory name
    port    hvd_fabric_port, else ansible_port, else 22
    slots   hvd_slots, else one per GPU the node reports, else 1

Roles name the hosts (their group, or the hosts of this run) and take the written entries where there are::

    groups[hvd_base_group] | hvd_members(hostvars, hvd_members | default([]))

Plain functions over plain data: tests/unit/plugins/filter/test_hvd_filters.py calls them with dictionaries for hostvars.
"""

from __future__ import annotations

import functools
import re

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.hvd.cluster.plugins.module_utils import hvd_members as member_rules
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_apt_conf import uu_guard


def member(name: str, host: Mapping[str, Any]) -> dict[str, Any]:
    """One member from its host variables (plugins/module_utils/hvd_members.py's rules)."""
    try:
        return member_rules.member(name, host)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from None


def gpu_count(host: Mapping[str, Any]) -> int:
    """The GPUs hvd_nvidia_driver found on the node (ansible_local.hvd_nvidia_driver.gpu_count), else 0."""
    fact = ((host.get("ansible_local") or {}).get("hvd_nvidia_driver") or {}) if isinstance(host, Mapping) else {}
    try:
        return max(int(fact.get("gpu_count") or 0), 0)
    except (TypeError, ValueError):
        return 0


def _with_slots(entry: dict[str, Any], host: Callable[[], Mapping[str, Any]]) -> dict[str, Any]:
    """``entry`` with its slots decided: the ones written, else one per GPU the node reports (``host()``: its
    variables, read only then), else 1."""
    written = entry.get("slots")
    try:
        entry["slots"] = member_rules.slots(entry["name"], written, gpu_count(host()) if written in (None, "") else None)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from None
    return entry


def hvd_members(names: Iterable[str], hostvars: Mapping[str, Mapping[str, Any]],
                written: Iterable[Mapping[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The members called ``names``, in that order: each one's entry of ``written`` (the inventory's
    ``hvd_members``) where it has one, else derived from ``hostvars``. A host's variables are read only where they
    decide something (no entry written, or its slots left to the GPUs): Ansible computes all of a host's variables
    at each ``hostvars[name]``, and the roles ask for the members on every node."""
    known = {entry["name"]: entry for entry in written or [] if isinstance(entry, Mapping) and "name" in entry}
    members = []
    for name in names:
        host = functools.cache(functools.partial(hostvars.__getitem__, name))
        members.append(_with_slots(dict(known[name]) if name in known else member(name, host()), host))
    return members


def hvd_member_peers(members: Iterable[Mapping[str, Any]], me: str, **extra: Any) -> list[dict[str, Any]]:
    """Every member but ``me`` as its peers reach it: {name, address (its fabric address), port}, plus ``extra``
    (e.g. the pre-flight's probe_port) in each."""
    return [{"name": m["name"], "address": m["fabric"], "port": m["port"], **extra}
            for m in members if m["name"] != me]


_RANK = re.compile(r"hvd-verify rank=(\d+) size=(\d+) host=(\S+) sum=(\S+) expected=(\S+)")


def hvd_allreduce_ranks(lines: Iterable[str], np: int) -> list[dict[str, Any]]:
    """The post-flight allreduce's rank lines (roles/hvd_verify/files/allreduce.py) as {line, rank, host, ok}: a rank
    is ok when it saw ``np`` processes and its sum is the expected one. Other output is ignored."""
    ranks = []
    for line in lines:
        found = _RANK.search(line)
        if found:
            rank, size, host, total, expected = found.groups()
            ranks.append({"line": line.strip(), "rank": int(rank), "host": host,
                          "ok": int(size) == int(np) and total == expected})
    return ranks


_THROUGHPUT = re.compile(r"hvd-verify-throughput size=(\d+) device=(\S+) bytes=(\d+) iters=(\d+) seconds=(\S+) "
                         r"algbw_gbs=(\S+) busbw_gbs=(\S+)")


def hvd_allreduce_throughput(lines: Iterable[str]) -> dict[str, Any]:
    """The post-flight allreduce's own throughput (rank 0's ``hvd-verify-throughput`` line of
    roles/hvd_verify/files/allreduce.py) as {ranks, device, bytes, iters, seconds, algbw_gbs, busbw_gbs}; {} when
    no such line was printed."""
    for line in lines:
        found = _THROUGHPUT.search(line)
        if found:
            ranks, device, size, iters, seconds, algbw, busbw = found.groups()
            return {"ranks": int(ranks), "device": device, "bytes": int(size), "iters": int(iters),
                    "seconds": float(seconds), "algbw_gbs": float(algbw), "busbw_gbs": float(busbw)}
    return {}


def hvd_fabric_interfaces(names: Iterable[str], hostvars: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The fabric interfaces of the hosts ``names``, each once, in order: where hvd_base ran in this run, the one
    its lookup found (``__hvd_base_fabric_if``, ``ip -o addr show to <address>``), else the one its fact recorded
    (``ansible_local.hvd_base.fabric_interface``). Empty where any host's is unknown: then horovodrun finds them."""
    out: list[str] = []
    for name in names:
        host = hostvars[name]
        found = host.get("__hvd_base_fabric_if") or {}
        words = str(found.get("stdout") or "").split() if isinstance(found, Mapping) else []
        recorded = ((host.get("ansible_local") or {}).get("hvd_base") or {}).get("fabric_interface")
        interface = words[1] if len(words) > 1 else recorded
        if not interface:
            return []
        if interface not in out:
            out.append(str(interface))
    return out


def hvd_host_list(per_host: Mapping[str, int]) -> str:
    """horovodrun's ``-H`` list of ``per_host`` (name -> slots): plugins/module_utils/hvd_members.py's, as `run`'s."""
    return member_rules.host_list(per_host)


def hvd_uu_guard(owner: str, packages: Iterable[str], prefixes: Iterable[str] = ()) -> str:
    """The text of ``owner``'s unattended-upgrades guard file (hvd_apt_conf.uu_guard: the one hvd_packages writes)."""
    try:
        return uu_guard(owner, list(packages or []), list(prefixes or []))[1]
    except ValueError as error:
        raise AnsibleFilterError(f"hvd_uu_guard: {error}") from error


def hvd_rotate(items: list[Any], start: int) -> list[Any]:
    """``items`` starting at position ``start`` (modulo its length) and wrapping round: when every node walks its
    peers from its own position, no two nodes knock on the same peer at once (sshd drops connections beyond
    MaxStartups, 10 by default, when a whole cluster calls on one node together)."""
    if not items:
        return []
    start = int(start) % len(items)
    return list(items[start:]) + list(items[:start])


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"hvd_members": hvd_members, "hvd_member_peers": hvd_member_peers,
                "hvd_allreduce_ranks": hvd_allreduce_ranks,
                "hvd_allreduce_throughput": hvd_allreduce_throughput, "hvd_rotate": hvd_rotate,
                "hvd_fabric_interfaces": hvd_fabric_interfaces, "hvd_host_list": hvd_host_list,
                "hvd_uu_guard": hvd_uu_guard}
