"""horovodrun command lines built from an inventory (no nodes needed)."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.hvd.cluster.plugins.filter import hvd_cluster

from hvdcluster import inventory, launch, spec
from hvdcluster.errors import HvdError

FIXTURES = Path(__file__).parent / "bad_hosts" / "fixtures"  # id_test: a private key's shape; ca.pem: a real cert

HOSTS = """\
cluster: c1
ssh: {user: ubuntu, identity: id_test}
hosts:
  - {name: gpu01, address: 10.1.0.1, fabric_address: 10.0.0.1, slots: 2}
  - {name: gpu02, address: 10.1.0.2, port: 2222, fabric_address: 10.0.0.2, slots: 2}
stack: {python: {prefix: /opt/envs/hvd}}
"""


@pytest.fixture
def inv(tmp_path: Path) -> inventory.Inventory:
    shutil.copy(FIXTURES / "id_test", tmp_path / "id_test")
    (tmp_path / "hosts.yaml").write_text(HOSTS)
    cluster = spec.load(tmp_path / "hosts.yaml")
    root = inventory.render(cluster, tmp_path / "inv")
    (root / "group_vars" / "all" / "stack.yml").write_text("hvd_pyenv_prefix: /opt/envs/hvd\n")
    return inventory.read(root)


def test_every_slot_of_every_host_by_default_with_the_envs_interpreter(inv: inventory.Inventory) -> None:
    plan = launch.build(inv, ["python", "train.py", "--epochs", "2"], controller="gloo", network_interface="ib0")
    assert plan.horovodrun == ["/opt/envs/hvd/bin/horovodrun", "-np", "4", "-H", "gpu01:2,gpu02:2", "--gloo",
                               "--network-interfaces", "ib0", *launch.SAME_IMPORTS, "/opt/envs/hvd/bin/python", "train.py",
                               "--epochs", "2"]


def test_a_one_node_launch_leaves_the_interface_to_horovodrun(inv: inventory.Inventory) -> None:
    """run --limit gpu02: horovodrun finds its only host local and wants the interface that holds 127.0.0.1; a fabric
    interface given to it fails the launch ("No interface is found for address 127.0.0.1", seen on the lab)."""
    one = dataclasses.replace(inv, hosts={"gpu02": inv.hosts["gpu02"]})
    plan = launch.build(one, ["python", "t.py"], np=1, network_interface="ib0")
    assert "--network-interfaces" not in plan.horovodrun and plan.hosts == ("gpu02",)
    assert plan.horovodrun[:5] == ["/opt/envs/hvd/bin/horovodrun", "-np", "1", "-H", "gpu02:2"]


def test_runs_on_the_first_node_with_pinned_host_keys(inv: inventory.Inventory) -> None:
    plan = launch.build(inv, ["./job.sh"], np=3)
    ssh = plan.ssh
    assert ssh[0] == "ssh" and ssh[-1] == "ubuntu@10.1.0.1"
    assert "StrictHostKeyChecking=yes" in ssh and f'UserKnownHostsFile="{inv.path / "ssh" / "known_hosts"}"' in ssh
    assert ssh[ssh.index("-i") + 1].endswith("id_test")
    assert plan.argv()[-1] == (launch.activation("/opt/envs/hvd") +
                               "; exec /opt/envs/hvd/bin/horovodrun -np 3 -H gpu01:2,gpu02:2 "
                               f"{shlex.join(launch.SAME_IMPORTS)} ./job.sh")


SYS_PATH = "import json, sys; print(json.dumps(sys.path))"


def test_every_rank_imports_alike_whatever_its_nodes_ssh_session_sets(inv: inventory.Inventory, tmp_path: Path) -> None:
    """A rank's command as horovodrun runs it (the program after its own options), run under the variables a node's
    SSH session may hold (pam_env's /etc/environment): the same sys.path as on a clean node, and an interpreter that
    starts (a PYTHONHOME elsewhere stops it); the first node's are unset before horovodrun. A variable the job's own
    command sets still reaches it."""
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "sitecustomize.py").write_text("print('planted')\n")
    node = {"PATH": os.environ["PATH"], "PYTHONPATH": str(planted), "PYTHONHOME": str(tmp_path / "nowhere"),
            "PYTHONUSERBASE": str(tmp_path), "PYTHONSAFEPATH": "1", "PYTHONPLATLIBDIR": "lib64"}
    plan = launch.build(inv, [sys.executable, "-c", SYS_PATH])
    rank = plan.horovodrun[plan.horovodrun.index(launch.SAME_IMPORTS[0]):]
    clean = subprocess.run(rank, capture_output=True, text=True, env={"PATH": os.environ["PATH"]}, check=True)
    dirty = subprocess.run(rank, capture_output=True, text=True, env=node)
    assert dirty.returncode == 0 and dirty.stdout == clean.stdout, dirty.stderr
    assert str(planted) not in json.loads(dirty.stdout)
    unset = subprocess.run(["sh", "-c", plan.activate + "; echo ${PYTHONPATH-unset} ${PYTHONHOME-unset}"],
                           capture_output=True, text=True, env=node)
    assert unset.stdout.split() == ["unset", "unset"], unset.stderr
    mine = launch.build(inv, ["env", f"PYTHONPATH={planted}", sys.executable, "-c", SYS_PATH])
    rank = mine.horovodrun[mine.horovodrun.index(launch.SAME_IMPORTS[0]):]
    given = subprocess.run(rank, capture_output=True, text=True, env=node, check=True)
    assert given.stdout.startswith("planted\n") and str(planted) in json.loads(given.stdout.split("\n", 1)[1])

@pytest.mark.parametrize(("manager", "marker"), [("venv", "VIRTUAL_ENV"), ("conda", "CONDA_PREFIX")])
def test_the_job_runs_with_the_envs_bin_first_on_path_and_its_marker_set(tmp_path: Path, manager: str,
                                                                         marker: str) -> None:
    """What horovodrun hands every rank: a wrapper's bare `python` is the env's, whatever the prefix holds."""
    prefix = tmp_path / "my env"  # a space: the activation quotes what it writes
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python").write_text("#!/bin/sh\necho env-python\n")
    (prefix / "bin" / "python").chmod(0o755)
    script = launch.activation(str(prefix), manager) + f'; echo "${marker}"; python'
    proc = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert proc.stdout.splitlines() == [str(prefix), "env-python"], proc.stderr


def test_more_processes_than_slots_is_refused_naming_the_slots(inv: inventory.Inventory) -> None:
    with pytest.raises(HvdError, match=r"-np 5 is more than the 4 slots of the cluster \(gpu01:2, gpu02:2\)"):
        launch.build(inv, ["python", "x.py"], np=5)


def test_a_command_is_required(inv: inventory.Inventory) -> None:
    with pytest.raises(HvdError, match="give the command"):
        launch.build(inv, [])


@pytest.mark.parametrize("np", [0, -1])
def test_fewer_than_one_process_is_refused(inv: inventory.Inventory, np: int) -> None:
    with pytest.raises(HvdError, match=rf"-np must be at least 1 \(got {np}\)"):
        launch.build(inv, ["python", "x.py"], np=np)


def test_the_interface_the_inventory_names_is_used_without_asking_a_node(inv: inventory.Inventory) -> None:
    assert launch.recorded_interface(inv) is None
    named = inventory.Inventory(inv.path, inv.hosts, {**inv.vars, "hvd_fabric_interface": "ib0"})
    assert launch.recorded_interface(named) == "ib0"


@pytest.fixture
def open_inv(tmp_path: Path) -> inventory.Inventory:
    """gpu01 leaves its slots open (one per GPU found), gpu02 fixes 2."""
    shutil.copy(FIXTURES / "id_test", tmp_path / "id_test")
    (tmp_path / "hosts.yaml").write_text(HOSTS.replace(", slots: 2}", "}", 1))
    return inventory.read(inventory.render(spec.load(tmp_path / "hosts.yaml"), tmp_path / "inv"))


@pytest.mark.parametrize(("gpus", "expected"), [(0, 1), (1, 1), (8, 8)])
def test_open_slots_are_one_per_gpu_found_else_one_and_written_slots_win(open_inv, gpus: int, expected: int) -> None:
    assert launch.open_slots(open_inv) == ["gpu01"]
    assert launch.slots(open_inv, {"gpu01": gpus, "gpu02": 8}) == {"gpu01": expected, "gpu02": 2}
    plan = launch.build(open_inv, ["python", "x.py"], gpus={"gpu01": gpus})
    assert plan.horovodrun[1:5] == ["-np", str(expected + 2), "-H", f"gpu01:{expected},gpu02:2"]


def test_while_the_gpus_are_unknown_a_large_np_is_not_refused_but_a_known_overflow_is(open_inv, inv) -> None:
    assert launch.build(open_inv, ["python", "x.py"], np=16, gpus=None).horovodrun[1:3] == ["-np", "16"]
    with pytest.raises(HvdError, match="more than the 10 slots"):
        launch.build(open_inv, ["python", "x.py"], np=16, gpus={"gpu01": 8})
    with pytest.raises(HvdError, match="more than the 4 slots"):
        launch.build(inv, ["python", "x.py"], np=16, gpus=None)  # every slot written: known now



def test_the_roles_and_run_share_one_rule_for_members_slots_and_the_host_list() -> None:
    """hvd_verify's -H list (hvd_host_list over the members' slots) is `hvdcluster run`'s (launch.build): one rule,
    plugins/module_utils/hvd_members.py; the slots of a member without hvd_slots are its GPUs, else 1, on both sides."""
    hostvars = {"a": {"hvd_slots": 2}, "b": {"ansible_local": {"hvd_nvidia_driver": {"gpu_count": 4}}}, "c": {}}
    members = hvd_cluster.hvd_members(["a", "b", "c"], hostvars)
    per_host = {m["name"]: m["slots"] for m in members}
    assert hvd_cluster.hvd_host_list(per_host) == "a:2,b:4,c:1"
    inv = inventory.Inventory(path=Path("/srv/inventories/lab"), vars={},
                              hosts={"a": {"hvd_slots": 2, "ansible_host": "a"}, "b": {"ansible_host": "b"},
                                     "c": {"ansible_host": "c"}})
    assert launch.slots(inv, {"b": 4}) == per_host
    assert launch.build(inv, ["true"], gpus={"b": 4}).horovodrun[3:5] == ["-H", "a:2,b:4,c:1"]
