"""Drift report: nodes against their desired records and their peers, folded like clush -b; launch gate.

The loop contract of `up`'s repairs: test_drift_loop.py; the node states both build on: drift_states.py.
"""

from __future__ import annotations

import json

import pytest

from hvdcluster import drift
from hvdcluster.drift import compare, gate, owner
from hvdcluster.drift_text import exit_code, render, to_json
from tests.unit.drift_states import DIGEST, NODES3, nodes, state


def test_identical_nodes_are_in_sync_with_exit_0_and_fold_into_one_line():
    desired = nodes(NODES3)
    report = compare(desired, nodes(NODES3), [])
    assert report.in_sync == NODES3
    assert report.drifted == {} and report.unreachable == []
    assert exit_code(report) == 0
    assert render(report) == "node[1-3]: in sync\n"


def test_sixteen_gpu_nodes_fold_with_their_padding():
    names = [f"gpu{i:02d}" for i in range(1, 17)]
    report = compare(nodes(names), nodes(names), [])
    assert render(report) == "gpu[01-16]: in sync\n"


def test_deleted_env_file_on_one_node_is_repaired_by_hvd_pyenv():
    found = nodes(NODES3)
    found["node2"]["env.files"] = "missing: lib/python3.11/site-packages/torch/__init__.py"
    report = compare(nodes(NODES3), found, [])
    assert report.in_sync == ["node1", "node3"]
    [d] = report.drifted["node2"]
    assert (d.item, d.expected, d.role) == ("env.files", "ok", "hvd_pyenv")
    assert report.repair_roles("node2") == ["hvd_pyenv"]
    assert report.first_role("node2") == "hvd_pyenv"
    text = render(report)
    assert "node[1,3]: in sync" in text
    assert "node2: drifted (repair from hvd_pyenv)" in text
    assert "  env.files: expected ok, found missing: lib/python3.11/" in text
    assert text.rstrip().endswith("(repair: hvd_pyenv)")
    assert exit_code(report) == 1


def test_same_difference_on_two_nodes_is_one_folded_block():
    found = nodes(NODES3)
    for n in ("node2", "node3"):
        found[n]["nccl.version"] = "2.18.3"
        found[n]["env.lock"] = "x" * 16
    report = compare(nodes(NODES3), found, [])
    text = render(report)
    assert text.count("drifted") == 1
    assert "node[2-3]: drifted (repair from hvd_nccl)" in text
    assert text.count("nccl.version: expected 2.21.5, found 2.18.3 (repair: hvd_nccl)") == 1
    assert report.repair_roles("node3") == ["hvd_nccl", "hvd_pyenv"]


def test_different_differences_are_separate_blocks_in_inventory_order():
    found = nodes(NODES3)
    found["node3"]["mesh.authorized"] = False
    found["node1"]["base.ca"] = "changed"
    report = compare(nodes(NODES3), found, [])
    lines = render(report).splitlines()
    assert lines[0] == "node2: in sync"
    assert lines[1] == "node1: drifted (repair from hvd_base)"
    assert lines[3] == "node3: drifted (repair from hvd_ssh_mesh)"
    assert lines[4] == "  mesh.authorized: expected true, found false (repair: hvd_ssh_mesh)"


def test_node_without_desired_record_is_compared_with_its_peers():
    desired = nodes(NODES3)
    desired["node3"] = None  # wiped with what drifted
    found = nodes(NODES3)
    found["node3"]["horovod.record"] = "z" * 16
    found["node3"]["gpu.count"] = 4  # per node: never a peer difference
    found["node3"]["os.kernel"] = "6.1.0-21-amd64"
    report = compare(desired, found, [])
    assert report.unrecorded == ["node3"]
    [d] = report.drifted["node3"]
    assert (d.item, d.expected, d.found, d.role) == ("horovod.record", "r" * 16, "z" * 16, "hvd_horovod")
    assert d.note == drift.NO_RECORD_NOTE
    assert report.first_role("node3") == "hvd_horovod"


def test_node_without_record_that_matches_its_peers_is_in_sync():
    desired = nodes(NODES3)
    desired["node1"] = None
    report = compare(desired, nodes(NODES3), [])
    assert report.in_sync == NODES3
    assert report.unrecorded == ["node1"]


def test_peer_majority_tie_goes_to_the_first_node():
    found = {"node1": state(), "node2": state(**{"env.lock": "other"}), "node3": state()}
    found["node3"]["env.lock"] = "third"
    report = compare({"node1": None, "node2": None, "node3": None}, found, [])
    # nothing recorded: each node against what the reachable nodes have now; a three-way tie goes to node1
    assert "node1" in report.in_sync
    assert [d.expected for d in report.drifted["node2"]] == ["l" * 16]
    assert [d.expected for d in report.drifted["node3"]] == ["l" * 16]


def test_record_that_differs_from_the_peers_records_is_reported_even_when_the_node_matches_it():
    desired = nodes(NODES3)
    desired["node3"]["mpi.version"] = "4.1.2"
    desired["node3"]["gpu.count"] = 4  # per node: never compared with peers
    found = {n: dict(s) for n, s in desired.items()}
    report = compare(desired, found, [])
    assert report.in_sync == ["node1", "node2"]
    [d] = report.drifted["node3"]
    assert (d.item, d.expected, d.found, d.role, d.note) == (
        "mpi.version", "4.1.4", "4.1.2", "hvd_openmpi", drift.PEERS_NOTE)
    assert "(differs from peers; repair: hvd_openmpi)" in render(report)


def test_missing_key_reads_absent():
    found = nodes(NODES3)
    del found["node1"]["pkg.openmpi-bin"]
    found["node2"]["pkg.htop"] = "3.2.2-2"
    report = compare(nodes(NODES3), found, [])
    [d1] = report.drifted["node1"]
    assert (d1.item, d1.expected, d1.found, d1.role) == ("pkg.openmpi-bin", "4.1.4-3", "absent", "hvd_openmpi")
    [d2] = report.drifted["node2"]
    assert (d2.item, d2.expected, d2.found, d2.role) == ("pkg.htop", "absent", "3.2.2-2", "hvd_base")


@pytest.mark.parametrize(
    "item, role",
    [
        ("os.release", ""),
        ("os.kernel", ""),
        ("pkg.openmpi-bin", "hvd_openmpi"),
        ("pkg.libopenmpi-dev.hold", "hvd_openmpi"),
        ("pkg.nvidia-cuda-toolkit", "hvd_cuda"),
        ("pkg.cuda-toolkit-12-4", "hvd_cuda"),
        ("pkg.cuda-nvcc-12-4", "hvd_cuda"),
        ("pkg.cuda-drivers", "hvd_nvidia_driver"),
        ("pkg.cuda-drivers-550.hold", "hvd_nvidia_driver"),
        ("pkg.libcudnn9-cuda-12", "hvd_cudnn"),
        ("pkg.libnccl2.hold", "hvd_nccl"),
        ("pkg.libnccl-dev", "hvd_nccl"),
        ("pkg.nvidia-driver", "hvd_nvidia_driver"),
        ("pkg.libcuda1", "hvd_nvidia_driver"),
        ("pkg.libnvidia-compute-550", "hvd_nvidia_driver"),
        ("pkg.firmware-nvidia-gsp", "hvd_nvidia_driver"),
        ("pkg.ca-certificates", "hvd_base"),
        ("pkg.build-essential.hold", "hvd_base"),
        ("pkg.openmpi-bin.guard", "hvd_openmpi"),
        ("pkg.libnccl2.guard", "hvd_nccl"),
        ("pkg.nvidia-kernel-dkms.guard", "hvd_nvidia_driver"),
        ("driver.installed", "hvd_nvidia_driver"),
        ("driver.loaded", "hvd_nvidia_driver"),
        ("gpu.count", "hvd_nvidia_driver"),
        ("cuda.home", "hvd_cuda"),
        ("cudnn.version", "hvd_cudnn"),
        ("nccl.header", "hvd_nccl"),
        ("mpi.path", "hvd_openmpi"),
        ("nccl_tests.files", "hvd_nccl_tests"),
        ("nccl_tests.key", "hvd_nccl_tests"),
        ("nccl.version", "hvd_nccl"),
        ("env.dist.torch", "hvd_pyenv"),
        ("env.files", "hvd_pyenv"),
        ("horovod.checked", "hvd_horovod"),
        ("mesh.known_hosts", "hvd_ssh_mesh"),
        ("base.hosts", "hvd_base"),
        ("profile.hvd-cuda.sh", "hvd_cuda"),
        ("profile.hvd-proxy.sh", "hvd_base"),
        ("ldconf.hvd-openmpi.conf", "hvd_openmpi"),
        ("ldconf.hvd-nccl.conf", "hvd_nccl"),
        ("ldconf.hvd-cudnn.conf", "hvd_cudnn"),
        ("ldconf.other.conf", "hvd_base"),
        ("launch.env", ""),
        ("launch.mpi", ""),
        ("mpi.single_copy", "hvd_openmpi"),
        ("launch.ld", ""),
        ("launch.ssh.node2", ""),
    ],
)
def test_owner_names_the_role_that_repairs_an_item(item, role):
    assert owner(item) == role


def test_os_difference_is_repaired_by_hand_and_no_role_is_converged_for_it():
    found = nodes(NODES3)
    found["node1"]["os.kernel"] = "6.1.0-21-amd64"
    report = compare(nodes(NODES3), found, [])
    assert report.repair_roles("node1") == []
    assert report.first_role("node1") == ""
    assert [d.item for d in report.by_hand("node1")] == ["os.kernel"]
    text = render(report)
    assert "node1: drifted (repair by hand)" in text
    assert "(repair: by hand)" in text


def test_repair_roles_follow_site_order():
    found = nodes(NODES3)
    found["node1"]["horovod.version"] = "0.28.0"
    found["node1"]["pkg.libnccl2.hold"] = False
    found["node1"]["mesh.authorized"] = False
    report = compare(nodes(NODES3), found, [])
    assert report.repair_roles("node1") == ["hvd_ssh_mesh", "hvd_nccl", "hvd_horovod"]
    assert report.first_role("node1") == "hvd_ssh_mesh"


def test_unreachable_nodes_are_listed_folded_and_exit_1():
    names = [f"node{i}" for i in range(1, 9)]
    found = nodes(names)
    found["node3"] = None
    del found["node7"]
    report = compare(nodes(names), found, ["node7"])
    assert report.unreachable == ["node3", "node7"]
    assert "node3" not in report.in_sync
    assert exit_code(report) == 1
    lines = render(report).splitlines()
    assert lines == ["node[1-2,4-6,8]: in sync", "unreachable: node[3,7]"]


def test_json_shape():
    found = nodes(NODES3)
    found["node2"]["env.files"] = "changed: bin/python"
    found["node3"] = None
    report = compare(nodes(NODES3), found, ["node3"])
    data = to_json(report)
    assert json.loads(json.dumps(data)) == data
    assert set(data) == {"in_sync", "drifted", "unreachable", "exit"}
    assert data["in_sync"] == ["node1"]
    assert data["unreachable"] == ["node3"]
    assert data["exit"] == 1
    [entry] = data["drifted"]["node2"]
    assert {k: entry[k] for k in ("item", "expected", "found", "role")} == {
        "item": "env.files", "expected": "ok", "found": "changed: bin/python", "role": "hvd_pyenv"}
    assert to_json(compare(nodes(NODES3), nodes(NODES3), []))["exit"] == 0


def test_long_values_are_shortened_keeping_both_ends():
    found = nodes(NODES3)
    found["node1"]["env.dist.torch"] = f"2.3.1 {'a' * 64}"
    line = [ln for ln in render(compare(nodes(NODES3), found, [])).splitlines() if "env.dist.torch" in ln][0]
    expected_part = line.split("expected ", 1)[1].split(", found")[0]
    assert len(expected_part) <= 60 and expected_part.startswith("2.3.1 3f3f") and "..." in expected_part


def test_report_order_is_stable_whatever_the_dict_order():
    names = [f"gpu{i:02d}" for i in range(1, 7)]
    desired = nodes(names)
    found = nodes(names)
    for n in ("gpu02", "gpu05"):
        found[n]["nccl.header"] = "2.18.3"
        found[n]["cuda.home"] = "/opt/cuda"
    found["gpu04"]["env.files"] = "missing: x"
    a = compare(desired, found, [], order=names)
    shuffled = dict(reversed(list(found.items())))
    b = compare(dict(reversed(list(desired.items()))), shuffled, [], order=names)
    assert render(a) == render(b)
    assert to_json(a) == to_json(b)
    lines = render(a).splitlines()
    assert lines[0] == "gpu[01,03,06]: in sync"
    assert lines[1] == "gpu[02,05]: drifted (repair from hvd_cuda)"
    assert lines[2].startswith("  cuda.home:") and lines[3].startswith("  nccl.header:")
    assert lines[4] == "gpu04: drifted (repair from hvd_pyenv)"
    assert list(to_json(a)["drifted"]) == ["gpu02", "gpu04", "gpu05"]


def test_gate_passes_identical_nodes():
    assert gate(nodes(NODES3)) == []


def test_gate_ignores_what_may_differ_per_node():
    found = nodes(NODES3)
    found["node2"]["gpu.count"] = 4
    found["node2"]["os.kernel"] = "6.1.0-21-amd64"
    found["node2"]["env.files"] = "ok"
    assert gate(found) == []


def test_gate_refuses_an_odd_env_dist_naming_node_and_item():
    found = nodes(NODES3)
    found["node2"]["env.dist.torch"] = f"2.3.0 {DIGEST}"
    [message] = gate(found)
    assert message.startswith("node2: env.dist.torch is 2.3.0 ")
    assert f"2.3.1 {DIGEST}"[:20] in message


def test_gate_refuses_an_odd_nccl_and_a_dist_only_one_node_has():
    found = nodes(NODES3)
    found["node3"]["nccl.version"] = "2.18.3"
    found["node1"]["env.dist.extra"] = "1.0 abc"
    messages = gate(found)
    assert "node3: nccl.version is 2.18.3, the other nodes have 2.21.5" in messages
    assert "node1: env.dist.extra is 1.0 abc, the other nodes have absent" in messages
    assert len(messages) == 2


def test_gate_refuses_a_node_whose_state_could_not_be_read():
    found = nodes(NODES3)
    found["node2"] = None
    assert gate(found) == ["node2: no state could be read from it"]


def test_the_check_build_stamp_of_each_node_is_its_own_and_never_compared_with_peers() -> None:
    states = {n: {"horovod.checked": f"key {n}-record-time", "horovod.record": "r1"} for n in ("node1", "node2")}
    report = drift.compare(states, {n: dict(s) for n, s in states.items()}, [])
    assert report.drifted == {} and report.in_sync == ["node1", "node2"]
    moved = {**states["node2"], "horovod.checked": "key other"}
    assert [d.item for d in drift.compare(states, {"node1": states["node1"], "node2": moved}, []).drifted["node2"]] == [
        "horovod.checked"]


def test_a_cluster_where_only_some_nodes_refuse_the_single_copy_path_is_in_sync() -> None:
    """A container beside bare-metal nodes: hvd_openmpi turns Open MPI's single-copy path off on the one node whose
    ranks may not read each other's memory (its own block, ``mpi.single_copy``); the others have none. That is no
    difference from peers, recorded or not; the block gone from that node is drift hvd_openmpi repairs."""
    own = "/opt/hvd/openmpi-4.1.4/etc/openmpi-mca-params.conf: btl_vader_single_copy_mechanism = none"
    launch = "/etc/openmpi/openmpi-mca-params.conf: btl = ^openib"  # the site's, on every node
    states = {n: state(**{"launch.mpi": launch, "mpi.single_copy": own if n == "node3" else "absent"}) for n in NODES3}
    assert compare(states, {n: dict(s) for n, s in states.items()}, []).in_sync == NODES3
    unrecorded = {**states, "node3": None}
    assert compare(unrecorded, {n: dict(s) for n, s in states.items()}, []).in_sync == NODES3
    gone = {n: dict(s) for n, s in states.items()}
    gone["node3"]["mpi.single_copy"] = "absent"
    [d] = compare(states, gone, []).drifted["node3"]
    assert (d.item, d.expected, d.found, d.role) == ("mpi.single_copy", own, "absent", "hvd_openmpi")
