"""Cluster policy kept in filter plugins (plugins/filter/hvd_horovod.py, hvd_cluster.py), called without Ansible.

The Horovod build environment and what its --check-build must list; the reading of that output; the member list
every role derives from the inventory.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest
from ansible.errors import AnsibleFilterError


def _load(name: str) -> ModuleType:
    return importlib.import_module(f"ansible_collections.hvd.cluster.plugins.filter.{name}")


horovod = _load("hvd_horovod")
cluster = _load("hvd_cluster")

# `horovodrun --check-build` of Horovod 0.28.1 (horovod/runner/launch.py check_build), built with PyTorch, both
# controllers and NCCL; its last line carries the trailing space the release prints.
CHECK_BUILD_0_28_1 = """\

Horovod v0.28.1:

Available Frameworks:
    [ ] TensorFlow
    [X] PyTorch
    [ ] MXNet

Available Controllers:
    [X] MPI
    [X] Gloo

Available Tensor Operations:
    [X] NCCL
    [ ] DDL
    [ ] CCL
    [X] MPI
    [X] Gloo \n"""

CPU = {"controllers": ["mpi", "gloo"], "cpu_operations": "gloo", "gpu_operations": "none"}
GPU_STACK = {"cuda_home": "/usr/local/cuda", "nccl_home": "/opt/nccl", "nccl_link": "SHARED", "cuda_cc_list": "80,90",
             "cuda_host_cxx": "/usr/bin/g++-12"}


# ------------------------------------------------------------------------------------------ build environment


def test_cpu_build_switches_every_framework_and_controller_explicitly() -> None:
    env = horovod.hvd_horovod_build_vars(["pytorch"], make_jobs=8, **CPU)
    assert env == {
        "MAKEFLAGS": "-j8",
        "HOROVOD_WITHOUT_MXNET": "1",
        "HOROVOD_WITH_PYTORCH": "1",
        "HOROVOD_WITHOUT_TENSORFLOW": "1",
        "HOROVOD_WITH_MPI": "1",
        "HOROVOD_WITH_GLOO": "1",
        "HOROVOD_CPU_OPERATIONS": "GLOO",
    }


def test_cpu_build_ignores_the_gpu_stack_it_is_given() -> None:
    env = horovod.hvd_horovod_build_vars(["pytorch"], make_jobs=2, **CPU, **GPU_STACK)
    assert not {"HOROVOD_GPU_OPERATIONS", "HOROVOD_CUDA_HOME", "HOROVOD_NCCL_HOME", "HOROVOD_NCCL_LINK",
                "HOROVOD_BUILD_CUDA_CC_LIST", "CUDAHOSTCXX"} & set(env)


def test_nccl_build_names_its_operations_and_the_gpu_stack_in_the_order_the_build_key_uses() -> None:
    env = horovod.hvd_horovod_build_vars(["pytorch"], make_jobs=4, **{**CPU, "gpu_operations": "nccl"}, **GPU_STACK)
    assert list(env.items())[-6:] == [
        ("HOROVOD_GPU_OPERATIONS", "NCCL"),
        ("HOROVOD_CUDA_HOME", "/usr/local/cuda"),
        ("HOROVOD_NCCL_HOME", "/opt/nccl"),
        ("HOROVOD_NCCL_LINK", "SHARED"),
        ("HOROVOD_BUILD_CUDA_CC_LIST", "80,90"),
        ("CUDAHOSTCXX", "/usr/bin/g++-12"),
    ]


def test_nccl_build_leaves_empty_gpu_settings_to_horovods_defaults() -> None:
    env = horovod.hvd_horovod_build_vars(["pytorch"], **{**CPU, "gpu_operations": "nccl"},
                                         cuda_home="/usr/local/cuda", nccl_home="", nccl_link=None, cuda_cc_list="",
                                         cuda_host_cxx="")
    assert env["HOROVOD_CUDA_HOME"] == "/usr/local/cuda"
    assert not {"HOROVOD_NCCL_HOME", "HOROVOD_NCCL_LINK", "HOROVOD_BUILD_CUDA_CC_LIST", "CUDAHOSTCXX"} & set(env)


@pytest.mark.parametrize("frameworks", [["pytorch"], ["pytorch", "mxnet"], ["mxnet", "tensorflow", "pytorch"]])
def test_mxnet_is_built_only_when_asked_for_and_switched_off_otherwise(frameworks: list[str]) -> None:
    env = horovod.hvd_horovod_build_vars(frameworks, **CPU)
    wanted = "mxnet" in frameworks
    assert ("HOROVOD_WITH_MXNET" in env, "HOROVOD_WITHOUT_MXNET" in env) == (wanted, not wanted)
    assert all(("HOROVOD_WITH_" + fw.upper() in env) == (fw in frameworks) for fw in ("pytorch", "tensorflow"))


def test_switch_order_is_unchanged_with_and_without_mxnet() -> None:
    # The build key digests this dictionary as JSON, in order: the order the role's Jinja produced.
    assert list(horovod.hvd_horovod_build_vars(["pytorch", "mxnet"], **CPU))[:4] == [
        "MAKEFLAGS", "HOROVOD_WITH_PYTORCH", "HOROVOD_WITHOUT_TENSORFLOW", "HOROVOD_WITH_MXNET"]
    assert list(horovod.hvd_horovod_build_vars(["tensorflow"], **CPU))[:4] == [
        "MAKEFLAGS", "HOROVOD_WITHOUT_MXNET", "HOROVOD_WITHOUT_PYTORCH", "HOROVOD_WITH_TENSORFLOW"]


def test_missing_controller_is_switched_off_and_cpu_operations_are_upper_case() -> None:
    env = horovod.hvd_horovod_build_vars(["pytorch"], controllers=["gloo"], cpu_operations="mpi",
                                         gpu_operations="none")
    assert (env["HOROVOD_WITHOUT_MPI"], env["HOROVOD_WITH_GLOO"], env["HOROVOD_CPU_OPERATIONS"]) == ("1", "1", "MPI")
    assert "HOROVOD_WITH_MPI" not in env


def test_extra_build_env_overrides_what_is_derived_and_adds_the_rest() -> None:
    env = horovod.hvd_horovod_build_vars(["pytorch"], **{**CPU, "gpu_operations": "nccl"}, **GPU_STACK,
                                         extra={"CUDAHOSTCXX": "/usr/bin/g++-11", "HOROVOD_WITH_GLOO": "0", "CC": "gcc"})
    assert env["CUDAHOSTCXX"] == "/usr/bin/g++-11" and env["HOROVOD_WITH_GLOO"] == "0" and env["CC"] == "gcc"
    keys = list(env)
    assert keys.index("HOROVOD_WITH_GLOO") < keys.index("HOROVOD_CPU_OPERATIONS")  # overridden in place
    assert keys[-1] == "CC"


# ------------------------------------------------------------------------------------------ expected build


def test_expected_sections_name_what_check_build_prints_sorted() -> None:
    assert horovod.hvd_horovod_expected_build(["tensorflow", "pytorch"], controllers=["mpi", "gloo"],
                                              cpu_operations="gloo", gpu_operations="nccl") == {
        "Frameworks": ["PyTorch", "TensorFlow"],
        "Controllers": ["Gloo", "MPI"],
        "Tensor Operations": ["Gloo", "MPI", "NCCL"],
    }


def test_expected_tensor_operations_follow_controllers_ccl_and_only_an_nccl_gpu_build() -> None:
    expected = horovod.hvd_horovod_expected_build(["mxnet"], controllers=["gloo"], cpu_operations="ccl",
                                                  gpu_operations="mpi")
    assert expected == {"Frameworks": ["MXNet"], "Controllers": ["Gloo"], "Tensor Operations": ["CCL", "Gloo"]}


# ------------------------------------------------------------------------------------------ check-build output


def test_check_build_output_is_read_into_the_built_items_of_each_section() -> None:
    assert horovod.hvd_horovod_check_build(CHECK_BUILD_0_28_1) == {
        "Frameworks": ["PyTorch"],
        "Controllers": ["Gloo", "MPI"],
        "Tensor Operations": ["Gloo", "MPI", "NCCL"],
    }


def test_check_build_ignores_warnings_and_keeps_a_section_with_nothing_built() -> None:
    text = ("[W] Warning: something about the environment: Available nowhere\n"
            + CHECK_BUILD_0_28_1.replace("[X] MPI\n    [X] Gloo\n\nAvailable Tensor", "[ ] MPI\n    [ ] Gloo\n\n"
                                         "Available Tensor"))
    built = horovod.hvd_horovod_check_build(text)
    assert built["Controllers"] == [] and set(built) == {"Frameworks", "Controllers", "Tensor Operations"}


def test_a_build_exactly_as_requested_has_nothing_missing() -> None:
    expected = horovod.hvd_horovod_expected_build(["pytorch"], controllers=["mpi", "gloo"], cpu_operations="gloo",
                                                  gpu_operations="nccl")
    assert horovod.hvd_horovod_build_missing(horovod.hvd_horovod_check_build(CHECK_BUILD_0_28_1), expected) == []


def test_missing_and_unexpected_items_are_named_per_section() -> None:
    expected = horovod.hvd_horovod_expected_build(["tensorflow"], controllers=["mpi", "gloo"], cpu_operations="ccl",
                                                  gpu_operations="none")
    built = horovod.hvd_horovod_check_build(CHECK_BUILD_0_28_1)
    assert horovod.hvd_horovod_build_missing(built, expected) == [
        "Frameworks missing TensorFlow",
        "Frameworks unexpected PyTorch",
        "Tensor Operations missing CCL",
        "Tensor Operations unexpected NCCL",
    ]


def test_output_without_sections_reports_everything_as_missing() -> None:
    expected = horovod.hvd_horovod_expected_build(["pytorch"], **CPU)
    assert horovod.hvd_horovod_build_missing(horovod.hvd_horovod_check_build("Traceback: no module horovod"),
                                             expected) == [
        "Frameworks missing PyTorch", "Controllers missing Gloo, MPI", "Tensor Operations missing Gloo, MPI"]


# ------------------------------------------------------------------------------------------ members


def test_member_with_only_a_name_is_reached_by_its_name_on_port_22_with_one_slot() -> None:
    assert cluster.hvd_members(["node1"], {"node1": {}}) == [{"name": "node1", "fabric": "node1", "port": 22,
                                                              "slots": 1}]


def test_member_without_fabric_settings_is_reached_as_the_controller_reaches_it() -> None:
    hostvars = {"gpu01": {"ansible_host": "192.168.3.3", "ansible_port": 2200}}
    assert cluster.hvd_members(["gpu01"], hostvars) == [{"name": "gpu01", "fabric": "192.168.3.3", "port": 2200,
                                                         "slots": 1}]


def test_fabric_address_port_and_slots_win_over_the_controllers_address() -> None:
    hostvars = {"gpu02": {"ansible_host": "192.168.3.4", "ansible_port": 2200, "hvd_fabric_address": "10.0.0.4",
                          "hvd_fabric_port": "2222", "hvd_slots": "4"}}
    assert cluster.hvd_members(["gpu02"], hostvars) == [{"name": "gpu02", "fabric": "10.0.0.4", "port": 2222,
                                                         "slots": 4}]


def test_null_settings_count_as_unset() -> None:
    hostvars = {"n": {"ansible_host": "10.0.0.9", "hvd_fabric_address": None, "hvd_fabric_port": None,
                      "hvd_slots": None}}
    assert cluster.hvd_members(["n"], hostvars) == [{"name": "n", "fabric": "10.0.0.9", "port": 22, "slots": 1}]


def test_members_come_in_the_order_of_the_names_given() -> None:
    hostvars = {name: {} for name in ("a", "b", "c")}
    assert [m["name"] for m in cluster.hvd_members(["c", "a", "b"], hostvars)] == ["c", "a", "b"]


def test_the_inventorys_written_members_are_used_and_others_derived() -> None:
    written = [{"name": "a", "fabric": "10.0.0.1", "port": 2222, "slots": 8}]
    hostvars = {"a": {"ansible_host": "192.168.0.1"}, "b": {"ansible_host": "192.168.0.2"}}
    assert cluster.hvd_members(["a", "b"], hostvars, written) == [
        {"name": "a", "fabric": "10.0.0.1", "port": 2222, "slots": 8},
        {"name": "b", "fabric": "192.168.0.2", "port": 22, "slots": 1},
    ]


def test_a_hosts_variables_are_read_only_where_they_decide_something() -> None:
    """Ansible computes every variable of a host at each ``hostvars[name]`` (and the roles ask for the members on every
    node): a written member with its slots reads none; one whose slots are left to its GPUs, or not written, once."""

    class Counted(dict):
        reads: list[str] = []

        def __getitem__(self, name: str) -> dict:
            self.reads.append(name)
            return super().__getitem__(name)

    hostvars = Counted(a={}, b={"ansible_local": {"hvd_nvidia_driver": {"gpu_count": 4}}}, c={"ansible_host": "10.0.0.3"})
    written = [{"name": "a", "fabric": "10.0.0.1", "port": 22, "slots": 2},
               {"name": "b", "fabric": "10.0.0.2", "port": 22, "slots": None}]
    assert [m["slots"] for m in cluster.hvd_members(["a", "b", "c"], hostvars, written)] == [2, 4, 1]
    assert Counted.reads == ["b", "c"]


def test_a_written_member_outside_the_names_is_not_a_member() -> None:
    written = [{"name": "gone", "fabric": "10.0.0.1", "port": 22, "slots": 1}]
    assert [m["name"] for m in cluster.hvd_members(["a"], {"a": {}}, written)] == ["a"]


def test_a_port_that_is_not_a_number_is_named() -> None:
    with pytest.raises(AnsibleFilterError, match="gpu01: port 'ssh' is not a number"):
        cluster.hvd_members(["gpu01"], {"gpu01": {"hvd_fabric_port": "ssh"}})


def test_peers_are_every_other_member_by_fabric_address_with_extra_fields() -> None:
    members = cluster.hvd_members(["a", "b", "c"], {"a": {}, "b": {"hvd_fabric_address": "10.0.0.2"},
                                                    "c": {"ansible_port": 2200}})
    assert cluster.hvd_member_peers(members, "a", probe_port=50123) == [
        {"name": "b", "address": "10.0.0.2", "port": 22, "probe_port": 50123},
        {"name": "c", "address": "c", "port": 2200, "probe_port": 50123},
    ]



# ------------------------------------------------------------------------------------------ post-flight allreduce


def test_allreduce_ranks_are_ok_when_every_rank_saw_every_process_and_the_expected_sum() -> None:
    lines = ["[1,0]<stdout>:hvd-verify rank=0 size=4 host=node1 sum=10 expected=10",
             "some warning from Gloo", "hvd-verify rank=3 size=4 host=node2 sum=10 expected=10"]
    ranks = cluster.hvd_allreduce_ranks(lines, 4)
    assert [(r["rank"], r["host"], r["ok"]) for r in ranks] == [(0, "node1", True), (3, "node2", True)]


def test_an_allreduce_rank_with_a_wrong_sum_or_size_is_not_ok() -> None:
    lines = ["hvd-verify rank=0 size=2 host=node1 sum=3 expected=3", "hvd-verify rank=1 size=4 host=n2 sum=9 expected=10"]
    assert [r["ok"] for r in cluster.hvd_allreduce_ranks(lines, 4)] == [False, False]
    assert cluster.hvd_allreduce_ranks(["nothing here"], 4) == []


def test_every_node_walks_its_peers_from_its_own_position_so_no_peer_gets_the_whole_cluster_at_once() -> None:
    nodes = [f"node{i}" for i in range(1, 17)]
    walks = {node: cluster.hvd_rotate([p for p in nodes if p != node], i) for i, node in enumerate(nodes)}
    for node, walk in walks.items():
        assert sorted(walk) == sorted(p for p in nodes if p != node)  # every peer, once
    for step in range(15):
        targets = [walk[step] for walk in walks.values()]
        assert max(targets.count(t) for t in targets) <= 2, (step, targets)  # not 15 on one sshd
    assert cluster.hvd_rotate([], 3) == [] and cluster.hvd_rotate(["a", "b"], 5) == ["b", "a"]


def test_the_post_flight_throughput_is_read_from_rank_zeros_line_among_the_others() -> None:
    lines = ["hvd-verify rank=0 size=4 host=node1 sum=10 expected=10",
             "[1]<stdout>:hvd-verify rank=1 size=4 host=node1 sum=10 expected=10",
             "[0]<stdout>:hvd-verify-throughput size=4 device=cpu bytes=16777216 iters=5 seconds=0.041943 "
             "algbw_gbs=0.4000 busbw_gbs=0.6000"]
    assert cluster.hvd_allreduce_throughput(lines) == {
        "ranks": 4, "device": "cpu", "bytes": 16777216, "iters": 5, "seconds": 0.041943, "algbw_gbs": 0.4,
        "busbw_gbs": 0.6}
    assert cluster.hvd_allreduce_throughput(lines[:2]) == {}


def test_the_post_flight_names_each_members_fabric_interface_once_from_this_run_or_its_fact() -> None:
    """As `hvdcluster run` names them to horovodrun: found by hvd_base in this run (its `ip -o addr show to`
    line), else recorded in its fact on a run that did not reach hvd_base."""
    found = {"stdout": "2: eth0    inet 10.0.0.1/24 brd 10.0.0.255 scope global eth0\\       valid_lft forever"}
    hostvars = {"a": {"__hvd_base_fabric_if": found},
                "b": {"ansible_local": {"hvd_base": {"fabric_interface": "eth0"}}},
                "c": {"__hvd_base_fabric_if": {"stdout": "3: ib0    inet 10.1.0.3/24 scope global ib0"},
                      "ansible_local": {"hvd_base": {"fabric_interface": "stale0"}}}}
    assert cluster.hvd_fabric_interfaces(["a", "b", "c"], hostvars) == ["eth0", "ib0"]
    assert cluster.hvd_fabric_interfaces(["b"], hostvars) == ["eth0"]


@pytest.mark.parametrize("unknown", [{}, {"ansible_local": {"hvd_base": {"fabric_interface": ""}}},
                                     {"__hvd_base_fabric_if": {"stdout": ""}}])
def test_one_member_whose_interface_is_unknown_leaves_finding_them_to_horovodrun(unknown: dict) -> None:
    hostvars = {"a": {"ansible_local": {"hvd_base": {"fabric_interface": "eth0"}}}, "b": unknown}
    assert cluster.hvd_fabric_interfaces(["a", "b"], hostvars) == []


def test_the_unattended_entry_point_writes_the_guard_text_hvd_packages_writes() -> None:
    """hvd_base's `unattended` entry point (the hvd_uu_guard filter) and hvd_packages' guard: one text."""
    from ansible_collections.hvd.cluster.plugins.module_utils.hvd_apt_conf import uu_guard

    packages, prefixes = ["openmpi-bin", "libfoo1:i386", "g++-12"], ["linux-image-"]
    assert cluster.hvd_uu_guard("hvd_openmpi", packages, prefixes) == uu_guard("hvd_openmpi", packages, prefixes)[1]
    with pytest.raises(AnsibleFilterError, match="is not a role name"):
        cluster.hvd_uu_guard("../x", packages)
