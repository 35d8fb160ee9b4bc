"""Rendering hosts.yaml into a plain inventory, comparing it with expected files, and reading it back.

The inventory's SSH (a bastion, connection masters, pinned host keys): test_inventory_ssh.py.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hvdcluster import compat, inventory, spec
from hvdcluster.errors import HvdError
from tests.conftest import ROOT, readme_golden_image

EXPECTED = Path(__file__).parent / "expected" / "inventory"
FIXTURES = Path(__file__).parent / "bad_hosts" / "fixtures"  # id_test: a private key's shape; ca.pem: a real cert

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
    shutil.copy(FIXTURES / "id_test", tmp_path / "keys" / "id_test")
    shutil.copy(FIXTURES / "ca.pem", tmp_path / "corp-ca.pem")
    (tmp_path / "hosts.yaml").write_text(HOSTS)
    return spec.load("hosts.yaml")


def rendered_files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*.yml"))}


def test_rendered_inventory_matches_expected_files(cluster: spec.ClusterSpec, tmp_path: Path) -> None:
    root = inventory.render(cluster, tmp_path / "inventories", compat.resolve(cluster.stack))
    got = {name: text.replace(os.path.realpath(tmp_path), "<tmp>") for name, text in rendered_files(root).items()}
    # The expected files are written by hand (a change to them is reviewed as a diff), never by the code under test.
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
    assert back.vars["hvd_become"] is True and "ansible_become" not in back.vars
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
    assert gpu02["ansible_user"] == "ubuntu"
    # Ansible reads the path as data it must never template (ansible-inventory shows the marker).
    assert gpu02["hvd_base_ca_bundle"] == {"__ansible_unsafe": str(tmp_path / "corp-ca.pem")}


def test_ansible_reads_only_the_inventory_from_a_folder_the_cli_has_run_in(
    cluster: spec.ClusterSpec, tmp_path: Path
) -> None:
    """The operator's `ansible-playbook -i inventories/<cluster>` after `up`: the folder then also holds the cluster
    keypair and known_hosts (ssh/, an OpenSSH key as hvd_ssh_mesh makes it), the run logs (runs/), the node records
    (state/, by the CLI's own writers) and the run lock. Ansible, configured by the checkout's ansible.cfg, reads
    hosts.yml and group_vars/ only: no record taken for a group, no key file tried as a source, no warning."""
    from hvdcluster import lock, nodestate

    root = inventory.render(cluster, tmp_path / "inventories")
    for host in ("gpu02", "ip-192-168-3-3"):
        nodestate.record(root, host, {"base.hosts": "abc", "env.dist.torch": "2.13.0", "gpu.count": 2})
    nodestate.record_inputs(root, "0" * 64)
    (root / "runs" / "artifacts" / "x-site" / "job_events").mkdir(parents=True)
    (root / "runs" / "artifacts" / "x-site" / "job_events" / "1-a.json").write_text('{"event": "playbook_on_start"}')
    (root / "ssh").mkdir(exist_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / "ssh" / "id_ed25519")], check=True)
    (root / "ssh" / "known_hosts").write_text("[192.168.3.4]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample\n")
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    with lock.hold(root, "up"):
        out = subprocess.run([str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(root), "--list"],
                             capture_output=True, text=True, env=env, cwd=tmp_path)
    assert out.returncode == 0 and "WARNING" not in out.stderr, out.stderr[-3000:]
    data = json.loads(out.stdout)
    assert sorted(data) == ["_meta", "all", "hvd_nodes"]
    assert sorted(data["_meta"]["hostvars"]) == ["gpu02", "ip-192-168-3-3"]


def _tags(text: str) -> dict[str, str]:
    """Each scalar's value -> the tag it was written with ("" for plain), over a rendered file."""
    tags: dict[str, str] = {}
    for event in yaml.parse(text):
        if isinstance(event, yaml.ScalarEvent):
            tags[event.value] = event.tag or ""
    return tags


def test_every_string_from_hosts_yaml_is_written_unsafe_unless_a_bare_word(
    cluster: spec.ClusterSpec, tmp_path: Path
) -> None:
    root = inventory.render(cluster, tmp_path / "inventories", compat.resolve(cluster.stack))
    tags: dict[str, str] = {}
    for text in rendered_files(root).values():
        tags.update(_tags(text))
    for value in (str(tmp_path / "keys" / "id_test"), str(tmp_path / "corp-ca.pem"), "http://proxy.example:3142",
                  "/opt/hvd/env", "torch==2.6.*"):
        assert tags[value] == "!unsafe", value
    for bare in ("ubuntu", "192.168.3.4", "lab-a", "12.4"):  # nothing Jinja could read as code
        assert tags[bare] in ("", "tag:yaml.org,2002:str"), bare
    assert tags[inventory.SSH_COMMON_ARGS] == ""  # ours, templated on purpose (inventory_dir)


def test_ansible_never_evaluates_a_value_from_hosts_yaml(cluster: spec.ClusterSpec, tmp_path: Path) -> None:
    # The loader refuses '{{' in every field; the inventory must hold even if such a value got through.
    hostile = dataclasses.replace(
        cluster,
        network=dataclasses.replace(cluster.network, apt_proxy="http://proxy/{{ 6 * 7 }}{{ lookup('env', 'HOME') }}"),
    )
    root = inventory.render(hostile, tmp_path / "inventories")
    ansible = Path(sys.executable).parent / "ansible"
    proc = subprocess.run(
        [str(ansible), "gpu02", "-i", str(root / "hosts.yml"), "-m", "ansible.builtin.debug",
         "-a", json.dumps({"msg": "[{{ hvd_base_apt_proxy }}] [{{ hvd_base_ca_bundle }}/x]"})],
        capture_output=True, text=True, check=True, env={**os.environ, "ANSIBLE_NOCOLOR": "1"},
    )
    assert "[http://proxy/{{ 6 * 7 }}{{ lookup('env', 'HOME') }}]" in proc.stdout
    assert "proxy/42" not in proc.stdout  # evaluated, it would read http://proxy/42... (a temp path may hold "42")
    assert f"[{tmp_path / 'corp-ca.pem'}/x]" in proc.stdout  # an unsafe value still renders inside a template


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
    import jinja2

    args = inventory.group_vars(cluster)["ssh.yml"]["ansible_ssh_common_args"]
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["quote"] = shlex.quote  # Ansible's quote filter
    for pins, checking in (({}, "accept-new"), ({"hvd_host_keys": []}, "accept-new"),
                           ({"hvd_host_keys": ["ssh-ed25519 AAAA"]}, "yes")):
        argv = shlex.split(env.from_string(args).render(inventory_dir="/inv", **pins))
        assert argv == ["-o", f"StrictHostKeyChecking={checking}", "-o", 'UserKnownHostsFile="/inv/ssh/known_hosts"']
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


def test_without_device_forces_the_driver_on_nodes_the_probe_found_no_gpu_on() -> None:
    """A golden image built where no NVIDIA device is: the stack stays a GPU stack and the driver role is forced."""
    spec_ = spec.loads('cluster: img\nhosts: [10.0.0.1]\nstack: {driver: "535", without_device: true}\n', "hosts.yaml")
    forced = inventory.stack_vars(compat.resolve(spec_.stack, compat.NodeInfo(), gpu=None).stack)
    assert forced["hvd_gpu"] is True
    assert forced["hvd_nvidia_driver_force"] is True
    assert forced["hvd_nvidia_driver_version"] == "535"
    unforced = inventory.stack_vars(compat.resolve({"driver": "535"}).stack)
    assert "hvd_nvidia_driver_force" not in unforced  # the role's default (false) stands
    cpu = inventory.stack_vars(compat.resolve({"without_device": True, "horovod": {"gpu_operations": "none"}}).stack)
    assert cpu["hvd_gpu"] is False and "hvd_nvidia_driver_force" not in cpu


def test_gpu_repo_takes_the_whole_gpu_stack_to_the_distros_packages() -> None:
    """stack.gpu_repo sets hvd_gpu_repo, the default of the driver's and the system CUDA/cuDNN/NCCL repository; on a
    CPU stack it is dropped with the rest of the GPU stack, and left out it leaves the roles' default (nvidia)."""
    spec_ = spec.loads('cluster: img\nhosts: [10.0.0.1]\nstack: {driver: "535", gpu_repo: distro}\n', "hosts.yaml")
    assert spec_.stack["gpu_repo"] == "distro"
    distro = inventory.stack_vars(compat.resolve(spec_.stack, compat.NodeInfo(), gpu=None).stack)
    assert distro["hvd_gpu"] is True and distro["hvd_gpu_repo"] == "distro"
    assert "hvd_gpu_repo" not in inventory.stack_vars(compat.resolve({"driver": "535"}).stack)
    cpu = inventory.stack_vars(compat.resolve({"gpu_repo": "distro", "horovod": {"gpu_operations": "none"}}).stack)
    assert cpu["hvd_gpu"] is False and "hvd_gpu_repo" not in cpu


def test_the_readmes_golden_image_writes_the_variables_the_gpu_scenario_converges_with() -> None:
    """README's golden-image stack on a Debian 12 node (what the probe reads there) gives the role variables the
    molecule `gpu` scenario converges with in a container (user space) and `driver` with DKMS (kernel side): `up`
    with that hosts.yaml runs the stack those scenarios prove. Left to the scenario: the packages it pins exactly
    (torch 2.0.1 in the resolver's 2.0 series, and the NCCL wheel torch 2.0.1 pins anyway), and what a node with no
    GPU cannot tell the build (its compute capabilities)."""
    hosts = f"cluster: img\nhosts: [10.0.0.1]\n{readme_golden_image()}\n"
    stack = spec.loads(hosts, "hosts.yaml").stack
    plan = compat.resolve(stack)  # as `up` resolves: before it reaches a node
    ours = inventory.stack_vars(plan.stack, plan.patches)
    debian12 = compat.NodeInfo(os_id="debian", os_version="12", gcc="12.2.0", python="3.11.2")
    probed = compat.resolve(stack, debian12)  # as `plan --probe` resolves, with what the nodes run
    assert inventory.stack_vars(probed.stack, probed.patches) == ours
    assert compat.preflight_vars(plan.stack)["hvd_preflight_supported_os"] == {"Debian": ["12"]}
    scenario = yaml.safe_load((ROOT / "molecule" / "gpu" / "molecule.yml").read_text())
    theirs = scenario["provisioner"]["inventory"]["group_vars"]["hvd_nodes"]
    driver = yaml.safe_load((ROOT / "molecule" / "driver" / "molecule.yml").read_text())
    assert {k: ours[k] for k in ("hvd_nvidia_driver_version", "hvd_gpu_repo", "hvd_nvidia_driver_force")} == {
        k: v for k, v in driver["provisioner"]["inventory"]["group_vars"]["hvd_nodes"].items() if k in ours}
    left = {"hvd_pyenv_packages", "hvd_horovod_cuda_cc_list", "hvd_cuda_source"}
    shared = sorted(set(ours) & set(theirs) - left)
    assert len(shared) >= 12, shared
    assert {k: ours[k] for k in shared} == {k: theirs[k] for k in shared}
    assert theirs.get("hvd_horovod_patches", []) == list(plan.patches) == []
    assert theirs["hvd_cuda_source"] == ours["hvd_gpu_source"] == "system"
    pinned = {p.split("==")[0].split("<")[0]: p for p in theirs["hvd_pyenv_packages"]}
    assert ours["hvd_pyenv_packages"] == ["torch==2.0.*", "setuptools<70"]
    assert pinned["torch"] == "torch==2.0.1" and pinned["setuptools"] == "setuptools<70"
    assert pinned["nvidia-nccl-cu11"] == f"nvidia-nccl-cu11=={ours['hvd_nccl_version']}"


@pytest.mark.parametrize("damage", ["all: [unclosed\n", "- a list\n", "\xff\xfe"])
def test_a_damaged_inventory_file_is_one_line_naming_it(
    cluster: spec.ClusterSpec, tmp_path: Path, damage: str
) -> None:
    root = inventory.render(cluster, tmp_path / "inventories")
    (root / "group_vars" / "all" / "local.yml").write_bytes(damage.encode("latin-1"))
    with pytest.raises(HvdError) as caught:
        inventory.read(root)
    assert str(caught.value).startswith(f"{root / 'group_vars' / 'all' / 'local.yml'}")
    assert "cannot read the inventory" in str(caught.value) and "\n" not in str(caught.value)


def test_a_hosts_file_name_cannot_break_out_of_the_header_comment(cluster: spec.ClusterSpec, tmp_path: Path) -> None:
    odd = dataclasses.replace(cluster, path="hosts.yaml\nansible_become_exe: /tmp/evil")
    root = inventory.render(odd, tmp_path / "inventories")
    assert "ansible_become_exe" not in inventory.read(root).vars


def test_nccl_tests_of_a_gpu_stack_becomes_the_roles_tarball_and_a_cpu_stack_writes_none(tmp_path: Path) -> None:
    """stack.nccl_tests: its release, tarball and sha256 become hvd_nccl_tests_* (the role's on-switch is the url);
    on a CPU stack, or a stack that does not ask for it, nothing is written: the role's defaults leave it off."""
    tarball = tmp_path / "mirror" / "nccl-tests-2.19.6.tar.gz"
    tarball.parent.mkdir()
    tarball.write_bytes(b"tarball")
    pin = "a93c09241f55985677caa5151caaa8b1fc7cd6dfa40201e2ea1534d3326c983f"
    text = (f"cluster: img\nhosts: [10.0.0.1]\nstack: {{driver: '535', gpu_repo: distro, without_device: true,\n"
            f"        nccl_tests: {{url: mirror/nccl-tests-2.19.6.tar.gz, sha256: {pin}}}}}\n")
    gpu = spec.loads(text, str(tmp_path / "hosts.yaml"))
    written = inventory.group_vars(gpu, compat.resolve(gpu.stack))["stack.yml"]
    assert {k: v for k, v in written.items() if k.startswith("hvd_nccl_tests_")} == {
        "hvd_nccl_tests_version": "2.19.6", "hvd_nccl_tests_url": str(tarball), "hvd_nccl_tests_sha256": pin}
    assert written["hvd_gpu"] is True and written["hvd_stack"]["nccl_tests"]["url"] == str(tarball)
    cpu = inventory.stack_vars(compat.resolve({"nccl_tests": {"url": str(tarball), "sha256": pin}}, gpu=False).stack)
    assert cpu["hvd_gpu"] is False and not [k for k in cpu if k.startswith("hvd_nccl_tests_")]
    none = inventory.stack_vars(compat.resolve({"driver": "535"}).stack)
    assert not [k for k in none if k.startswith("hvd_nccl_tests_")]


def test_the_horovod_sdist_pin_is_written_beside_the_horovod_version(cluster: spec.ClusterSpec) -> None:
    stack = inventory.group_vars(cluster, compat.resolve(cluster.stack))["stack.yml"]
    assert stack["hvd_horovod_sdist_sha256"] == "92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0"
    names = list(stack)
    assert names.index("hvd_horovod_sdist_sha256") == names.index("hvd_horovod_version") + 1
    other = inventory.stack_vars({"horovod": {"version": "0.27.0"}})
    assert other["hvd_horovod_sdist_sha256"] == ""


def _member_filters():
    module = importlib.import_module("ansible_collections.hvd.cluster.plugins.filter.hvd_cluster")
    return module


def test_the_written_member_list_is_what_the_roles_derive_from_hosts_yml(cluster: spec.ClusterSpec) -> None:
    written = inventory.group_vars(cluster)["cluster.yml"]["hvd_members"]
    hosts = inventory.host_vars(cluster)
    # slots not written in hosts.yaml stay open (null) until the node's GPUs are known
    assert written == [
        {"name": "ip-192-168-3-3", "fabric": "192.168.3.3", "port": 2200, "slots": None},
        {"name": "gpu02", "fabric": "10.0.0.4", "port": 2222, "slots": 2},
    ]
    filters = _member_filters()
    assert filters.hvd_members(list(hosts), hosts, written) == filters.hvd_members(list(hosts), hosts) == [
        {"name": "ip-192-168-3-3", "fabric": "192.168.3.3", "port": 2200, "slots": 1},
        {"name": "gpu02", "fabric": "10.0.0.4", "port": 2222, "slots": 2},
    ]


@pytest.mark.parametrize(("gpus", "written", "slots"), [
    (0, None, 1), (1, None, 1), (8, None, 8), (8, 2, 2), (None, None, 1), (0, 3, 3)])
def test_slots_default_to_the_gpus_the_node_reports_else_one(gpus, written, slots) -> None:
    host = {"ansible_host": "10.0.0.9"} | ({"hvd_slots": written} if written else {})
    if gpus is not None:
        host["ansible_local"] = {"hvd_nvidia_driver": {"gpu_count": gpus}}
    filters = _member_filters()
    assert filters.hvd_members(["n1"], {"n1": host})[0]["slots"] == slots
    listed = [{"name": "n1", "fabric": "10.0.0.9", "port": 22, "slots": written}]
    assert filters.hvd_members(["n1"], {"n1": host}, listed)[0]["slots"] == slots


def test_member_strings_from_hosts_yaml_are_written_unsafe_unless_bare_words(
    cluster: spec.ClusterSpec, tmp_path: Path
) -> None:
    host = dataclasses.replace(cluster.hosts[1], fabric_address="fe80::1%eth0")
    root = inventory.render(dataclasses.replace(cluster, hosts=(cluster.hosts[0], host)), tmp_path / "inventories")
    tags = _tags((root / "group_vars" / "all" / "cluster.yml").read_text())
    assert tags["fe80::1%eth0"] == "!unsafe" and tags["gpu02"] in ("", "tag:yaml.org,2002:str")


def test_roles_take_the_members_the_inventory_wrote(cluster: spec.ClusterSpec, tmp_path: Path) -> None:
    root = inventory.render(cluster, tmp_path / "inventories")
    cluster_yml = root / "group_vars" / "all" / "cluster.yml"
    cluster_yml.write_text(cluster_yml.read_text().replace("slots: 2", "slots: 7"))  # edited by hand
    ansible = Path(sys.executable).parent / "ansible"
    expression = "{{ groups['hvd_nodes'] | hvd.cluster.hvd_members(hostvars, hvd_members | default([])) | to_json }}"
    proc = subprocess.run(
        [str(ansible), "gpu02", "-i", str(root), "-m", "ansible.builtin.debug", "-a", json.dumps({"msg": expression})],
        capture_output=True, text=True, check=True,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")},
    )
    assert '{"name": "gpu02", "fabric": "10.0.0.4", "port": 2222, "slots": 7}' in proc.stdout.replace('\\"', '"')
