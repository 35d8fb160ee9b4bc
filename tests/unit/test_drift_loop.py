"""The loop contract of `up`'s repairs (drift.confirm): what a repair left is named with the role that failed and
never accepted into the records; items judged on their own (anything added to the env, a next-boot kernel
without the NVIDIA modules, what a rank inherits at launch, nccl-tests' build); the role order repairs start
from."""

from __future__ import annotations

import pytest

from hvdcluster import drift, drift_text
from hvdcluster.drift import compare, gate, owner
from hvdcluster.drift_text import exit_code, render
from hvdcluster.output import show
from tests.unit.drift_states import NODES3, nodes, state


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
    """drift.ROLES (the order a fast-path repair starts from) is read off playbooks/site.yml's imports (a play's role,
    or the task that includes a role with an on/off switch)."""
    import yaml

    from tests.conftest import ROOT

    order = []
    for entry in yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text()):
        for play in yaml.safe_load((ROOT / "playbooks" / entry["ansible.builtin.import_playbook"]).read_text()):
            for entry in play.get("roles", []) + play.get("tasks", []):
                order += [tag for tag in entry.get("tags", []) if tag.startswith("hvd_")]
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
