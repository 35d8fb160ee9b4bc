"""slurm.conf, gres.conf and cgroup.conf rendered from the nodes' facts (plugins/filter/hvd_slurm.py), and what a
node's record says about who took it out of service (plugins/module_utils/hvd_slurm.py), called without Ansible."""

from __future__ import annotations

import importlib

import pytest
from ansible.errors import AnsibleFilterError

slurm = importlib.import_module("ansible_collections.hvd.cluster.plugins.filter.hvd_slurm")
records = importlib.import_module("ansible_collections.hvd.cluster.plugins.module_utils.hvd_slurm")


def host(hostname: str, vcpus: int = 64, sockets: int = 2, cores: int = 16, threads: int = 2, memory: int = 515_000,
         gpus: int | None = None) -> dict:
    """A node's hostvars as Ansible hands them to a filter: its facts and, on a GPU node, hvd_nvidia_driver's fact."""
    facts = {"hostname": hostname, "processor_vcpus": vcpus, "processor_count": sockets, "processor_cores": cores,
             "processor_threads_per_core": threads, "memtotal_mb": memory}
    out: dict = {"ansible_facts": facts}
    if gpus is not None:
        out["ansible_local"] = {"hvd_nvidia_driver": {"gpu_count": gpus}}
    return out


MEMBERS = [{"name": "gpu01", "fabric": "10.0.0.1"}, {"name": "gpu02", "fabric": "10.0.0.2"}]
OPTIONS = {"cluster": "lab", "controller": "gpu01", "partition": "gpu", "proctrack": "proctrack/cgroup",
           "task_plugin": "task/cgroup,task/affinity", "return_to_service": 1, "settings": {}}


def test_each_node_is_written_from_its_facts_cpus_sockets_cores_threads_memory_and_gpus() -> None:
    hostvars = {"gpu01": host("gpu01", gpus=8), "gpu02": host("gpu02.lab.example", gpus=8)}
    nodes = slurm.hvd_slurm_nodes(MEMBERS, hostvars, 2)
    assert nodes[1] == {"name": "gpu02", "inventory": "gpu02", "addr": "10.0.0.2", "cpus": 64, "sockets": 2,
                        "cores": 16, "threads": 2, "memory": 504_700, "gpus": 8}
    conf = slurm.hvd_slurm_conf(nodes, OPTIONS)
    assert ("NodeName=gpu01 NodeAddr=10.0.0.1 CPUs=64 Boards=1 SocketsPerBoard=2 CoresPerSocket=16 ThreadsPerCore=2 "
            "RealMemory=504700 Gres=gpu:8 State=UNKNOWN") in conf.splitlines()
    assert "SlurmctldHost=gpu01(10.0.0.1)" in conf.splitlines() and "GresTypes=gpu" in conf.splitlines()
    assert "PartitionName=gpu Nodes=gpu01,gpu02 Default=YES MaxTime=INFINITE State=UP" in conf.splitlines()
    assert "MpiDefault=pmix" in conf and "ProctrackType=proctrack/cgroup" in conf and "ClusterName=lab" in conf
    assert conf == slurm.hvd_slurm_conf(nodes, OPTIONS)  # the same text every time, on every node


def test_a_cpu_node_has_no_gres_and_a_vm_whose_topology_does_not_add_up_gets_cpus_alone() -> None:
    hostvars = {"gpu01": host("gpu01", vcpus=2, sockets=1, cores=2, threads=1, memory=24152),
                "gpu02": host("gpu02", vcpus=6, sockets=1, cores=4, threads=1, memory=8000)}
    nodes = slurm.hvd_slurm_nodes(MEMBERS, hostvars, 2)
    conf = slurm.hvd_slurm_conf(nodes, OPTIONS).splitlines()
    assert ("NodeName=gpu01 NodeAddr=10.0.0.1 CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 "
            "RealMemory=23668 State=UNKNOWN") in conf
    assert "NodeName=gpu02 NodeAddr=10.0.0.2 CPUs=6 RealMemory=7840 State=UNKNOWN" in conf
    assert not any(line.startswith("GresTypes") for line in conf)


def test_site_settings_follow_the_roles_own_and_replace_the_same_key() -> None:
    nodes = slurm.hvd_slurm_nodes(MEMBERS, {"gpu01": host("gpu01"), "gpu02": host("gpu02")})
    conf = slurm.hvd_slurm_conf(nodes, {**OPTIONS, "settings": {"MpiDefault": "none", "SlurmdTimeout": 600}})
    assert "MpiDefault=none" in conf.splitlines() and "MpiDefault=pmix" not in conf
    assert conf.index("SlurmdTimeout=600") < conf.index("NodeName=")
    with pytest.raises(AnsibleFilterError, match="one word"):
        slurm.hvd_slurm_conf(nodes, {**OPTIONS, "settings": {"Prolog": "/bin/x # y"}})


@pytest.mark.parametrize(("hostvars", "message"), [
    ({"gpu01": host("gpu01"), "gpu02": {"ansible_facts": {"hostname": "gpu02"}}}, "gpu02: no processor_vcpus fact"),
    ({"gpu01": host("node"), "gpu02": host("node")}, "gpu01 and gpu02 both have the hostname node"),
    ({"gpu01": host("gpu01"), "gpu02": host("gpu_02")}, "its hostname 'gpu_02' is not a name Slurm can use"),
])
def test_a_node_slurm_cannot_tell_apart_or_whose_facts_are_missing_is_refused_by_name(hostvars, message) -> None:
    with pytest.raises(AnsibleFilterError, match=message):
        slurm.hvd_slurm_nodes(MEMBERS, hostvars)


def test_gres_conf_autodetects_with_nvml_where_the_plugin_is_there_and_names_the_devices_elsewhere() -> None:
    node = {"name": "gpu01", "gpus": 8}
    assert slurm.hvd_slurm_gres_conf(node, True).endswith("AutoDetect=nvml\nName=gpu Count=8\n")
    assert slurm.hvd_slurm_gres_conf(node, False).endswith("Name=gpu File=/dev/nvidia[0-7] Count=8\n")
    assert slurm.hvd_slurm_gres_conf({"name": "n", "gpus": 1}, False).endswith("File=/dev/nvidia0 Count=1\n")
    assert "Name=gpu" not in slurm.hvd_slurm_gres_conf({"name": "cpu1", "gpus": 0}, True)
    assert slurm.hvd_slurm_cgroup_conf({"CgroupPlugin": "autodetect", "ConstrainCores": "yes"}).endswith(
        "CgroupPlugin=autodetect\nConstrainCores=yes\n")


LINES = [
    "NodeName=n1 CoresPerSocket=2 State=IDLE Partitions=hvd",
    "NodeName=n2 State=DOWN+NOT_RESPONDING Partitions=hvd Reason=Not responding [slurm@2026-11-28T17:24:14]",
    "NodeName=n3 State=IDLE+DRAIN Partitions=hvd Reason=bad fan [root@2026-11-28T17:24:14]",
    "NodeName=n4 State=IDLE+DRAIN+INVALID_REG Reason=Low RealMemory (reported:24152 < 100.00% of configured:990000) "
    "[slurm@2026-11-28T17:27:23]",
    "NodeName=n5 State=MIXED+DRAIN Reason=hvdcluster health: gpu.xid.0000:91:00.0.79 [hvdadmin@2026-11-28T17:30:00]",
    "NodeName=n6 State=IDLE+DRAIN Reason=hvdcluster roll 20261128T173000-42 [root@2026-11-28T17:30:00]",
    "NodeName=n7 State=UNKNOWN Partitions=hvd",
]


def test_who_took_a_node_out_of_service_decides_what_check_names_and_what_a_converge_puts_back() -> None:
    judged = {line.split()[0][len("NodeName="):]: records.judge(records.fields(line)) for line in LINES}
    assert judged["n1"] == ("ok", "absent")
    assert judged["n2"] == ("down+not_responding: Not responding (set by slurm)", "absent")
    assert judged["n3"] == ("ok", "bad fan (set by root)")  # an operator's drain: a notice
    assert judged["n4"][0].startswith("drained by Slurm itself: Low RealMemory") and judged["n4"][1] == "absent"
    assert judged["n5"] == ("ok", "hvdcluster health: gpu.xid.0000:91:00.0.79 (set by hvdadmin)")
    assert judged["n6"] == ("ok", "hvdcluster roll 20261128T173000-42 (set by root)")
    names = [f"n{i}" for i in range(1, 8)]
    assert slurm.hvd_slurm_resumable(LINES, names) == ["n2", "n4"]  # never an operator's or hvdcluster's drain
    assert slurm.hvd_slurm_resumable(LINES, ["n1", "n3"]) == []
    assert slurm.hvd_slurm_unregistered(LINES, [*names, "n8"]) == ["n2", "n7", "n8"]
