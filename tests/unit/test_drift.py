"""Drift report: nodes against their desired records and their peers, folded like clush -b; launch gate."""

from __future__ import annotations

import json

import pytest

from hvdcluster import drift, drift_text
from hvdcluster.drift import compare, gate, owner
from hvdcluster.drift_text import exit_code, render, to_json
from hvdcluster.output import show

DIGEST = "3f" * 32


def state(**over):
    base = {
        "os.release": "debian 12",
        "os.kernel": "6.1.0-18-amd64",
        "pkg.openmpi-bin": "4.1.4-3",
        "pkg.libnccl2": "2.21.5-1+cuda12.4",
        "pkg.libnccl2.hold": True,
        "driver.installed": "550.54.15",
        "driver.loaded": "550.54.15",
        "gpu.count": 8,
        "cuda.version": "12.4",
        "cuda.home": "/usr/local/cuda-12.4",
        "nccl.version": "2.21.5",
        "nccl.header": "2.21.5",
        "mpi.path": "/usr/bin/mpirun",
        "mpi.version": "4.1.4",
        "env.python": "3.11.2",
        "env.key": "k" * 16,
        "env.lock": "l" * 16,
        "env.dist.torch": f"2.3.1 {DIGEST}",
        "env.files": "ok",
        "horovod.version": "0.28.1",
        "horovod.record": "r" * 16,
        "horovod.key": "h" * 16,
        "horovod.checked": "pytorch,nccl,mpi",
        "mesh.authorized": True,
        "base.ca": "ok",
        "profile.hvd-cuda.sh": "ok",
        "ldconf.hvd-openmpi.conf": "ok",
    }
    base.update(over)
    return base


def nodes(names, **over):
    return {n: state(**over) for n in names}


NODES3 = ["node1", "node2", "node3"]


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


# ------------------------------------------------------------------------------------------ the loop contract


def test_a_repair_that_left_the_drift_is_named_with_the_role_that_failed():
    desired = nodes(NODES3)
    after = nodes(NODES3)
    after["node2"]["env.dist.extra-pkg"] = "1.0 abc"
    report = drift.confirm(desired, after, converged=["node2"], records_current=True, order=NODES3)
    assert report.in_sync == ["node1", "node3"] and list(report.drifted) == ["node2"]
    assert drift_text.unrepaired_lines(report) == [
        'node2: env.dist.extra-pkg: expected absent, found 1.0 abc (hvd_pyenv did not repair it)']


def test_a_repair_may_rewrite_the_per_node_stamps_of_the_nodes_it_converged_only():
    desired = nodes(NODES3, **{"os.machine-id": "m1"})
    after = nodes(NODES3, **{"os.machine-id": "m1"})
    after["node2"].update({"horovod.checked": "new stamp", "os.machine-id": "m2"})
    assert drift.confirm(desired, after, converged=["node2"], records_current=True).drifted == {}
    after["node3"]["horovod.checked"] = "new stamp"  # node3 was not converged: its stamp must not move
    report = drift.confirm(desired, after, converged=["node2"], records_current=True)
    assert list(report.drifted) == ["node3"]


def test_after_changed_inputs_nodes_are_held_against_their_peers_not_their_old_records():
    desired = nodes(NODES3)
    after = nodes(NODES3, **{"env.lock": "n" * 16})  # a new env everywhere: not drift
    assert drift.confirm(desired, after, converged=NODES3, records_current=False).drifted == {}
    after["node3"]["os.release"] = "debian 13"  # what no role changes, odd among the peers
    report = drift.confirm(desired, after, converged=NODES3, records_current=False, order=NODES3)
    assert drift_text.unrepaired_lines(report) == [
        "node3: os.release: expected debian 12, found debian 13 (no role repairs it)"]


def test_an_env_holding_anything_added_is_never_accepted_even_when_every_node_has_it():
    after = nodes(NODES3, **{"env.files": "added: sitecustomize.py"})
    for current in (True, False):
        report = drift.confirm(nodes(NODES3, **{"env.files": "added: sitecustomize.py"}), after, converged=NODES3,
                               records_current=current, order=NODES3)
        assert list(report.drifted) == NODES3
        assert drift_text.unrepaired_lines(report)[0] == (
            "node1: env.files: expected ok, found added: sitecustomize.py (hvd_pyenv did not repair it)")


def test_a_next_boot_kernel_without_nvidia_modules_is_drift_and_never_accepted():
    broken = "6.1.0-28-amd64 has no NVIDIA module (nvidia, nvidia-modeset, nvidia-uvm): headers missing"
    desired = nodes(NODES3, **{"driver.next_boot": "ok"})
    found = nodes(NODES3, **{"driver.next_boot": "ok"})
    found["node2"]["driver.next_boot"] = broken
    report = compare(desired, found, order=NODES3)
    assert report.in_sync == ["node1", "node3"] and report.first_role("node2") == "hvd_nvidia_driver"
    assert f"  driver.next_boot: expected ok, found {show(broken)} (repair: hvd_nvidia_driver)" in render(report)
    after = nodes(NODES3, **{"driver.next_boot": broken})  # every node alike: still not as it must be
    for current in (True, False):
        report = drift.confirm(desired, after, converged=NODES3, records_current=current, order=NODES3)
        assert list(report.drifted) == NODES3
        assert [d.item for d in report.drifted["node1"]] == ["driver.next_boot"]


@pytest.mark.parametrize("item, wrong", [
    ("driver.next_boot", "6.1.0-28-amd64 has no NVIDIA module (nvidia): headers missing"),
    ("env.files", "changed: lib/python3.11/site-packages/torch/lib/libtorch_cpu.so"),
    ("driver.peermem", "nvidia-peermem not loaded"),
])
def test_a_self_evident_item_is_judged_on_a_node_without_a_record_and_alone_by_check_and_by_runs_gate(item, wrong):
    """A node converged with --tags only (no record) and without peers: its value alone says it is wrong."""
    found = {"node1": state(**{item: wrong})}
    report = compare({"node1": None}, found, order=["node1"])
    assert exit_code(report) == 1 and [d.item for d in report.drifted["node1"]] == [item], report
    assert report.drifted["node1"][0].role == owner(item) and report.drifted["node1"][0].note == drift.SELF_EVIDENT_NOTE
    assert gate(found) == [f"node1: {item} is {show(wrong)} ({drift.SELF_EVIDENT_NOTE}: expected ok)"]
    # recorded nodes that all agree on the wrong value: still wrong, each of them
    three = nodes(NODES3, **{item: wrong})
    assert list(compare(three, three, order=NODES3).drifted) == NODES3
    assert len(gate(three, NODES3)) == 3
    assert compare({"node1": None}, {"node1": state(**{item: "ok"})}).in_sync == ["node1"]


def test_a_reinstalled_node_is_converged_from_the_pre_flight():
    assert owner("os.machine-id") == "hvd_preflight" and owner("os.release") == ""
    desired = nodes(NODES3, **{"os.machine-id": "m1"})
    found = nodes(NODES3, **{"os.machine-id": "m1"})
    found["node2"]["os.machine-id"] = "m2"
    report = compare(desired, found)
    assert report.first_role("node2") == "hvd_preflight"


def test_a_managed_block_shows_the_line_that_differs_not_two_digests():
    desired = nodes(NODES3, **{"base.hosts": "10.0.0.1 node1\n10.0.0.2 node2\n10.0.0.3 node3 ct3-node3"})
    found = nodes(NODES3, **{"base.hosts": "10.0.0.1 node1\n10.0.0.2 node2\n10.0.0.3 node3 ct3-node3"})
    found["node2"]["base.hosts"] = "10.0.0.1 node1\n10.0.0.2 node2\n10.99.99.99 node3 ct3-node3"
    text = render(compare(desired, found))
    assert ("  base.hosts: line expected 10.0.0.3 node3 ct3-node3, line found 10.99.99.99 node3 ct3-node3 "
            "(repair: hvd_base)") in text


def test_the_role_order_up_repairs_in_is_the_order_site_yml_runs():
    """drift.ROLES (the order a fast-path repair starts from) is read off playbooks/site.yml's imports."""
    import yaml

    from tests.conftest import ROOT

    order = []
    for entry in yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text()):
        for play in yaml.safe_load((ROOT / "playbooks" / entry["ansible.builtin.import_playbook"]).read_text()):
            for role in play.get("roles", []):
                order += [tag for tag in role.get("tags", []) if tag.startswith("hvd_")]
    assert order == drift.ROLES


def test_a_manifest_changed_to_vouch_for_an_addition_is_held_to_the_record_even_after_a_repair():
    desired = nodes(NODES3, **{"env.manifest": "m" * 16})
    after = nodes(NODES3, **{"env.manifest": "m" * 16})
    after["node2"]["env.manifest"] = "x" * 16
    report = drift.confirm(desired, after, converged=["node2"], records_current=True, order=NODES3)
    assert [d.item for d in report.drifted["node2"]] == ["env.manifest"]
    assert report.first_role("node2") == "hvd_pyenv"


LAUNCH_ENV = "/etc/environment: OMPI_MCA_mpi_yield_when_idle=1"


def test_what_a_rank_inherits_is_named_by_file_and_line_and_repaired_by_hand():
    """launch.* items (plugins/module_utils/hvd_state_mesh.launch_state): a line another node lacks is named with its file,
    no role repairs it, and `up` names it as something no role repairs."""
    desired = nodes(NODES3, **{"launch.env": LAUNCH_ENV, "launch.ld": "absent",
                               "launch.ssh.node3": "hostname node3\nport 22"})
    found = nodes(NODES3, **{"launch.env": LAUNCH_ENV, "launch.ld": "absent",
                             "launch.ssh.node3": "hostname node3\nport 22"})
    found["node2"]["launch.env"] = LAUNCH_ENV + "\n/etc/environment: PYTHONPATH=/srv/planted"
    found["node2"]["launch.ld"] = "/etc/ld.so.preload: /opt/x/libhook.so"
    found["node2"]["launch.ssh.node3"] = "hostname node3\nport 2222"
    report = compare(desired, found)
    assert list(report.drifted) == ["node2"] and report.repair_roles("node2") == []
    assert [d.item for d in report.by_hand("node2")] == ["launch.env", "launch.ld", "launch.ssh.node3"]
    text = render(report)
    assert "node2: drifted (repair by hand)" in text
    assert "  launch.env: line found /etc/environment: PYTHONPATH=/srv/planted (repair: by hand)" in text
    assert "  launch.ld: line found /etc/ld.so.preload: /opt/x/libhook.so (repair: by hand)" in text
    assert "  launch.ssh.node3: line expected port 22, line found port 2222 (repair: by hand)" in text
    assert any(line.startswith("node2: launch.env: line found /etc/environment: PYTHONPATH=/srv/planted")
               and line.endswith("(no role repairs it)") for line in drift_text.unrepaired_lines(report))


def test_a_launch_item_a_converged_node_recorded_oddly_is_named_against_its_peers():
    """The record itself odd among its peers' records: the peers' lines are expected."""
    desired = nodes(NODES3, **{"launch.nccl": "absent"})
    desired["node3"]["launch.nccl"] = "/etc/nccl.conf: NCCL_P2P_DISABLE=1"
    found = {n: dict(desired[n]) for n in NODES3}
    report = compare(desired, found)
    [d] = report.drifted["node3"]
    assert (d.item, d.note, d.role) == ("launch.nccl", drift.PEERS_NOTE, "")
    assert "launch.nccl: line found /etc/nccl.conf: NCCL_P2P_DISABLE=1" in render(report)


def test_keys_beyond_the_clusters_are_a_notice_never_a_drift():
    """mesh.other_keys differs from the record and the peers on node2: in sync all the same, exit 0; the notice is
    named folded, node by node."""
    controller = "ssh-ed25519 SHA256:abc lab@controller"
    desired = nodes(NODES3, **{"mesh.other_keys": controller})
    found = nodes(NODES3, **{"mesh.other_keys": controller})
    found["node2"]["mesh.other_keys"] = controller + "\nssh-rsa SHA256:def mallory@elsewhere"
    found["node3"]["mesh.other_keys"] = "absent"
    report = compare(desired, found)
    assert report.in_sync == NODES3 and exit_code(report) == 0
    assert drift.confirm(desired, found, converged=[], records_current=True).drifted == {}
    notes = drift.notices(found)
    assert notes == {"node1": {"mesh.other_keys": controller},
                     "node2": {"mesh.other_keys": found["node2"]["mesh.other_keys"]}}
    text = drift_text.render_notices(notes, NODES3)
    assert text.splitlines() == [
        "node1: notice: mesh.other_keys: keys in the login user's authorized_keys beyond the cluster's (not a drift):",
        f"    {controller}",
        "node2: notice: mesh.other_keys: keys in the login user's authorized_keys beyond the cluster's (not a drift):",
        f"    {controller}", "    ssh-rsa SHA256:def mallory@elsewhere"]


NCCL_TESTS = {"nccl_tests.version": "2.19.6", "nccl_tests.key": "n" * 16, "nccl_tests.files": "ok"}


def test_a_removed_nccl_tests_binary_is_named_and_repaired_from_hvd_nccl_tests_on():
    desired = nodes(NODES3, **NCCL_TESTS)
    found = nodes(NODES3, **NCCL_TESTS)
    found["node3"]["nccl_tests.files"] = "missing: bin/all_reduce_perf"
    report = compare(desired, found, [], order=NODES3)
    [diff] = report.drifted["node3"]
    assert (diff.item, diff.expected, diff.found, diff.role) == (
        "nccl_tests.files", "ok", "missing: bin/all_reduce_perf", "hvd_nccl_tests")
    assert report.first_role("node3") == "hvd_nccl_tests"
    assert drift.ROLES.index("hvd_openmpi") < drift.ROLES.index("hvd_nccl_tests") < drift.ROLES.index("hvd_pyenv")
    assert ("  nccl_tests.files: expected ok, found missing: bin/all_reduce_perf (repair: hvd_nccl_tests)"
            in render(report))


def test_a_node_whose_nccl_tests_build_differs_from_its_peers_records_is_named():
    desired = nodes(NODES3, **NCCL_TESTS)
    desired["node2"]["nccl_tests.key"] = "o" * 16  # recorded so, and still so: odd among its peers
    report = compare(desired, {n: dict(s) for n, s in desired.items()}, [], order=NODES3)
    [diff] = report.drifted["node2"]
    assert (diff.item, diff.expected, diff.note, diff.role) == (
        "nccl_tests.key", "n" * 16, drift.PEERS_NOTE, "hvd_nccl_tests")
