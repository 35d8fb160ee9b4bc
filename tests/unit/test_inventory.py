"""Rendering hosts.yaml into a plain inventory, comparing it with expected files, and reading it back."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hvdcluster import compat, inventory, spec

EXPECTED = Path(__file__).parent / "expected" / "inventory"

HOSTS = """\
cluster: lab-a
ssh: {user: ubuntu, port: 2200, identity: keys/id_test}
hosts:
  - 192.168.3.3
  - name: gpu02
    address: 192.168.3.4
    port: 2222
    fabric_address: 10.0.0.4
    slots: 2
set_hostname: true
stack:
  cuda: "12.4"
  horovod: {version: "0.28.1", frameworks: [pytorch]}
network: {ca_bundle: corp-ca.pem, apt_proxy: "http://proxy.example:3142"}
"""


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> spec.ClusterSpec:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "id_test").write_text("not a real key\n")
    (tmp_path / "corp-ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    (tmp_path / "hosts.yaml").write_text(HOSTS)
    return spec.load("hosts.yaml")


def rendered_files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*.yml"))}


def test_rendered_inventory_matches_expected_files(cluster: spec.ClusterSpec, tmp_path: Path) -> None:
    root = inventory.render(cluster, tmp_path / "inventories", compat.resolve(cluster.stack))
    got = {name: text.replace(str(tmp_path), "<tmp>") for name, text in rendered_files(root).items()}
    if os.environ.get("HVD_REGENERATE_EXPECTED"):
        shutil.rmtree(EXPECTED / "lab-a", ignore_errors=True)
        for name, text in got.items():
            (EXPECTED / "lab-a" / name).parent.mkdir(parents=True, exist_ok=True)
            (EXPECTED / "lab-a" / name).write_text(text)
    assert got == rendered_files(EXPECTED / "lab-a")


def test_reading_a_rendered_inventory_gives_back_the_same_hosts_and_variables(
    cluster: spec.ClusterSpec, tmp_path: Path
) -> None:
    back = inventory.read(inventory.render(cluster, tmp_path / "inventories"))
    assert back.hosts == inventory.host_vars(cluster)
    expected_vars: dict[str, object] = {}
    for mapping in inventory.group_vars(cluster).values():
        expected_vars.update(mapping)
    assert back.vars == expected_vars
    assert list(back.hosts) == ["ip-192-168-3-3", "gpu02"]
    assert back.hosts["gpu02"]["hvd_fabric_address"] == "10.0.0.4"
    assert back.vars["ansible_become"] is True
    assert back.vars["hvd_stack"]["cuda"] == "12.4"


def test_ansible_reads_the_inventory_with_every_host_in_the_cluster_group(
    cluster: spec.ClusterSpec, tmp_path: Path
) -> None:
    root = inventory.render(cluster, tmp_path / "inventories")
    ansible_inventory = Path(sys.executable).parent / "ansible-inventory"
    out = subprocess.run([str(ansible_inventory), "-i", str(root), "--list"], capture_output=True, text=True,
                         check=True)
    data = json.loads(out.stdout)
    assert sorted(data["hvd_nodes"]["hosts"]) == ["gpu02", "ip-192-168-3-3"]
    gpu02 = data["_meta"]["hostvars"]["gpu02"]
    assert (gpu02["ansible_host"], gpu02["ansible_port"], gpu02["hvd_slots"]) == ("192.168.3.4", 2222, 2)
    assert gpu02["ansible_user"] == "ubuntu" and gpu02["hvd_base_ca_bundle"] == str(tmp_path / "corp-ca.pem")


def test_rerender_keeps_user_files_and_rewrites_only_its_own(cluster: spec.ClusterSpec, tmp_path: Path) -> None:
    root = inventory.render(cluster, tmp_path / "inventories")
    local = root / "group_vars" / "all" / "local.yml"
    local.write_text("hvd_base_packages: [vim]\n")
    (root / "hosts.yml").write_text("edited by hand\n")
    inventory.render(cluster, tmp_path / "inventories")
    assert local.read_text() == "hvd_base_packages: [vim]\n"
    assert "hvd_nodes" in (root / "hosts.yml").read_text()
    assert inventory.read(root).vars["hvd_base_packages"] == ["vim"]


def test_key_folder_is_private(cluster: spec.ClusterSpec, tmp_path: Path) -> None:
    root = inventory.render(cluster, tmp_path / "inventories")
    assert stat.S_IMODE((root / "ssh").stat().st_mode) == 0o700


def test_controller_pins_host_keys_and_never_disables_checking(cluster: spec.ClusterSpec) -> None:
    args = inventory.group_vars(cluster)["ssh.yml"]["ansible_ssh_common_args"]
    assert "StrictHostKeyChecking=accept-new" in args and "UserKnownHostsFile=" in args
    assert "StrictHostKeyChecking=no" not in args and "/dev/null" not in args


def test_resolved_stack_becomes_role_variables(cluster: spec.ClusterSpec) -> None:
    plan = compat.resolve({"python": {"packages": ["torch==2.13.0"]}})
    stack = inventory.group_vars(cluster, plan)["stack.yml"]
    assert stack["hvd_stack"] == plan.stack
    assert stack["hvd_pyenv_packages"] == ["torch==2.13.0"]
    assert stack["hvd_horovod_patches"] == ["cxx17"]
    assert stack["hvd_horovod_controllers"] == ["mpi", "gloo"]
    assert "hvd_nvidia_driver_version" not in stack  # a CPU stack: nothing GPU, no nulls for roles


def test_a_cpu_stack_turns_the_gpu_roles_off_and_a_gpu_stack_on() -> None:
    cpu = compat.resolve({"horovod": {"frameworks": ["pytorch"]}}).stack
    gpu = compat.resolve({"cuda": "12.4", "horovod": {"frameworks": ["pytorch"]}}).stack
    assert inventory.stack_vars(cpu)["hvd_gpu"] is False
    assert inventory.stack_vars(gpu)["hvd_gpu"] is True
