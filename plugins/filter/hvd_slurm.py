"""slurm.conf, gres.conf and cgroup.conf from the inventory and the nodes' facts (hvd_slurm), the way
stackhpc/ansible-role-openhpc's slurm_conf filter does it: the policy here, in Python that pytest calls with plain
dictionaries (tests/unit/plugins/filter/test_hvd_slurm.py); the role's Jinja only hands the values over.

- ``hvd_slurm_nodes(members, hostvars, reserve_percent)``: one entry per member, from its facts - the name Slurm
  knows it by (its short hostname: what slurmd registers as), its fabric address, CPUs, sockets, cores per socket,
  threads per core, memory (less ``reserve_percent``: a kernel update that takes a few MB must not make the node
  "Low RealMemory"), and its GPUs (ansible_local.hvd_nvidia_driver.gpu_count).
- ``hvd_slurm_conf(nodes, options)``: the whole slurm.conf, the same text on every node (Slurm compares it).
- ``hvd_slurm_gres_conf(node, nvml)``: a node's gres.conf (AutoDetect=nvml where Slurm's NVML plugin is there).
- ``hvd_slurm_cgroup_conf(settings)``: cgroup.conf.
- ``hvd_slurm_resumable(lines, names, slurm_user)``: which nodes a converge puts back in service, and
  ``hvd_slurm_unregistered(lines, names)``: which it still waits for (plugins/module_utils/hvd_slurm.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

from ansible_collections.hvd.cluster.plugins.filter.hvd_cluster import gpu_count
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_slurm import SLURM_USER, resumable, unregistered

HEADER = ("# Managed by hvdcluster (hvd_slurm): rendered from the inventory and the nodes' facts, the same on every\n"
          "# node. `hvdcluster up` rewrites it and applies it with `scontrol reconfigure`; `hvdcluster check` names a\n"
          "# node where it differs. Site settings: hvd_slurm_settings in group_vars.\n")
_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", re.I)  # a node's short hostname, as Slurm takes it
_WORD = re.compile(r"[A-Za-z0-9_./:,=+@%()-]+")  # a value written into a Slurm config line: no space, no '#'


def _number(facts: Mapping[str, Any], key: str, host: str) -> int:
    try:
        value = int(facts[key])
    except (KeyError, TypeError, ValueError):
        raise AnsibleFilterError(f"hvd_slurm: {host}: no {key} fact (was the node reachable when facts were gathered?): "
                                 "slurm.conf names every node's CPUs and memory") from None
    if value < 1:
        raise AnsibleFilterError(f"hvd_slurm: {host}: {key} is {value}")
    return value


def node_entry(name: str, fabric: str, facts: Mapping[str, Any], gpus: int, reserve_percent: float = 2) -> dict[str, Any]:
    """One node of slurm.conf from its facts (ansible_facts: processor_vcpus, processor_count, processor_cores,
    processor_threads_per_core, memtotal_mb, hostname). Sockets, cores and threads are written only where their
    product is the CPU count (a VM that reports them otherwise gets CPUs alone, which Slurm accepts)."""
    hostname = str(facts.get("hostname") or "").split(".", 1)[0]
    if not _NAME.fullmatch(hostname):
        raise AnsibleFilterError(f"hvd_slurm: {name}: its hostname {hostname[:80]!r} is not a name Slurm can use "
                                 "(set set_hostname: true in hosts.yaml)")
    cpus = _number(facts, "processor_vcpus", name)
    memory = _number(facts, "memtotal_mb", name)
    entry: dict[str, Any] = {"name": hostname, "inventory": name, "addr": fabric, "cpus": cpus,
                             "memory": max(int(memory * (100 - float(reserve_percent)) / 100), 1), "gpus": int(gpus)}
    keys = ("processor_count", "processor_cores", "processor_threads_per_core")
    try:
        sockets, cores, threads = (int(facts[k]) for k in keys)
    except (KeyError, TypeError, ValueError):
        return entry
    if sockets > 0 and cores > 0 and threads > 0 and sockets * cores * threads == cpus:
        entry.update(sockets=sockets, cores=cores, threads=threads)
    return entry


def hvd_slurm_nodes(members: Iterable[Mapping[str, Any]], hostvars: Mapping[str, Mapping[str, Any]],
                    reserve_percent: float = 2) -> list[dict[str, Any]]:
    """Every member (hvd_members' entries: name, fabric) as a node of slurm.conf, in inventory order; two members that
    call themselves by one hostname are refused (slurmd registers by its hostname)."""
    nodes: list[dict[str, Any]] = []
    for member in members:
        host = hostvars[member["name"]]
        facts = host.get("ansible_facts") or {}
        nodes.append(node_entry(member["name"], str(member["fabric"]), facts, gpu_count(host), reserve_percent))
    seen: dict[str, str] = {}
    for node in nodes:
        if node["name"] in seen:
            raise AnsibleFilterError(f"hvd_slurm: {seen[node['name']]} and {node['inventory']} both have the hostname "
                                     f"{node['name']}: Slurm tells nodes apart by it (set set_hostname: true in "
                                     "hosts.yaml)")
        seen[node["name"]] = node["inventory"]
    return nodes


def _value(key: str, value: Any) -> str:
    text = str(value).lower() if isinstance(value, bool) else str(value)
    if not _WORD.fullmatch(text):
        raise AnsibleFilterError(f"hvd_slurm: {key}={text[:80]!r}: a slurm.conf value is one word (no space, no '#')")
    return text


def _node_line(node: Mapping[str, Any]) -> str:
    words = [f"NodeName={node['name']}", f"NodeAddr={_value('NodeAddr', node['addr'])}", f"CPUs={node['cpus']}"]
    if "sockets" in node:
        words += ["Boards=1", f"SocketsPerBoard={node['sockets']}", f"CoresPerSocket={node['cores']}",
                  f"ThreadsPerCore={node['threads']}"]
    words.append(f"RealMemory={node['memory']}")
    if node.get("gpus"):
        words.append(f"Gres=gpu:{int(node['gpus'])}")
    return " ".join(words + ["State=UNKNOWN"])


def hvd_slurm_conf(nodes: list[Mapping[str, Any]], options: Mapping[str, Any]) -> str:
    """slurm.conf for ``nodes`` (hvd_slurm_nodes). ``options``: cluster, controller (the inventory name of the node
    that runs slurmctld), partition, proctrack, task_plugin, return_to_service, mpi_default, slurm_user, and settings
    (more ``Key: value`` lines, after ours: a site's SchedulerType, timeouts ...)."""
    if not nodes:
        raise AnsibleFilterError("hvd_slurm: no node to write into slurm.conf")
    controller = next((n for n in nodes if n["inventory"] == options["controller"]), None)
    if controller is None:
        raise AnsibleFilterError(f"hvd_slurm: the controller {options['controller']!r} is not a member of the cluster")
    head = {
        "ClusterName": options["cluster"],
        "SlurmctldHost": f"{controller['name']}({_value('NodeAddr', controller['addr'])})",
        "SlurmUser": options.get("slurm_user") or SLURM_USER,
        "AuthType": "auth/munge",
        "MpiDefault": options.get("mpi_default") or "pmix",
        "ProctrackType": options["proctrack"],
        "TaskPlugin": options["task_plugin"],
        "SelectType": "select/cons_tres",
        "SelectTypeParameters": "CR_Core",
        "ReturnToService": int(options.get("return_to_service", 1)),
        "StateSaveLocation": "/var/spool/slurmctld",
        "SlurmdSpoolDir": "/var/spool/slurmd",
        "SlurmctldPidFile": "/run/slurmctld.pid",
        "SlurmdPidFile": "/run/slurmd.pid",
        "SlurmctldLogFile": "/var/log/slurm/slurmctld.log",
        "SlurmdLogFile": "/var/log/slurm/slurmd.log",
        "JobAcctGatherType": "jobacct_gather/none",
        "AccountingStorageType": "accounting_storage/none",
        # Slurm's 10 s default for a daemon's answer fails a job step's launch ("Socket timed out on send/recv
        # operation") on a node busy with its own work, as GPU nodes are during a converge or a data load
        "MessageTimeout": 30,
    }
    if any(node.get("gpus") for node in nodes):
        head["GresTypes"] = "gpu"
    settings = dict(options.get("settings") or {})
    lines = [f"{key}={_value(key, settings.pop(key) if key in settings else value)}" for key, value in head.items()]
    lines += [f"{key}={_value(key, value)}" for key, value in settings.items()]
    lines += [_node_line(node) for node in nodes]
    names = ",".join(node["name"] for node in nodes)
    lines.append(f"PartitionName={_value('PartitionName', options['partition'])} Nodes={names} Default=YES "
                 "MaxTime=INFINITE State=UP")
    return HEADER + "\n".join(lines) + "\n"


def hvd_slurm_gres_conf(node: Mapping[str, Any], nvml: bool = False) -> str:
    """The node's gres.conf: its GPUs found by Slurm's NVML plugin where it is installed (``nvml``), else named by
    their device files; nothing for a node without GPUs."""
    gpus = int(node.get("gpus") or 0)
    if not gpus:
        body = "# No GPU on this node.\n"
    elif nvml:
        body = f"AutoDetect=nvml\nName=gpu Count={gpus}\n"
    else:
        files = "/dev/nvidia0" if gpus == 1 else f"/dev/nvidia[0-{gpus - 1}]"
        body = f"Name=gpu File={files} Count={gpus}\n"
    return HEADER + body


def hvd_slurm_cgroup_conf(settings: Mapping[str, Any]) -> str:
    """cgroup.conf from ``settings`` (Key: value)."""
    return HEADER + "".join(f"{key}={_value(key, value)}\n" for key, value in settings.items())


def hvd_slurm_resumable(lines: Iterable[str], names: Iterable[str], slurm_user: str = SLURM_USER) -> list[str]:
    """The nodes of ``names`` that Slurm itself took out of service (plugins/module_utils/hvd_slurm.py)."""
    return resumable([str(line) for line in lines], [str(name) for name in names], slurm_user)


def hvd_slurm_unregistered(lines: Iterable[str], names: Iterable[str]) -> list[str]:
    """The nodes of ``names`` slurmctld has not heard from yet (plugins/module_utils/hvd_slurm.py)."""
    return unregistered([str(line) for line in lines], [str(name) for name in names])


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"hvd_slurm_nodes": hvd_slurm_nodes, "hvd_slurm_conf": hvd_slurm_conf,
                "hvd_slurm_gres_conf": hvd_slurm_gres_conf, "hvd_slurm_cgroup_conf": hvd_slurm_cgroup_conf,
                "hvd_slurm_resumable": hvd_slurm_resumable, "hvd_slurm_unregistered": hvd_slurm_unregistered}
