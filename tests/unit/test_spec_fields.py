"""hosts.yaml's fields: good files load fully, with their defaults, shorthands and paths resolved against
hosts.yaml's folder; the files it names on the controller (an Open MPI tarball, nccl-tests, a conda environment
file and channel) are read when it is."""

from __future__ import annotations

from pathlib import Path

import pytest

from hvdcluster.errors import SpecError
from hvdcluster.spec import ClusterSpec, HostSpec, NetworkSpec, SshSpec, load, loads
from tests.unit.spec_helpers import CA, KEY, _error


# ------------------------------------------------------------------------------------------ good files


def test_full_example_loads_every_field(tmp_path: Path) -> None:
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "id_lab").write_text(KEY)
    (tmp_path / "corp-ca.pem").write_text(CA)
    (tmp_path / "wheels").mkdir()
    (tmp_path / "env.yml").write_text("channels: [conda-forge]\ndependencies: [python=3.11, {pip: [torch==2.3.1]}]\n")
    hosts_file = tmp_path / "hosts.yaml"
    hosts_file.write_text(
        """\
cluster: lab-a
ssh:
  user: ubuntu
  port: 2200
  identity: keys/id_lab
  become: false
hosts:
  - 192.168.3.3
  - name: GPU02
    address: 192.168.3.4
    port: 2222
    fabric_address: 10.0.0.4
    fabric_port: 22
    slots: 2
set_hostname: true
stack:
  driver: 550
  cuda: "12.4"
  cudnn: "9.1.0"
  nccl: "2.21.5"
  gpu_source: env
  gcc: "12"
  mpi:
    impl: openmpi
    version: "4.1.6"
    source: source
    url: https://download.open-mpi.org/release/open-mpi/v4.1/openmpi-4.1.6.tar.bz2
    sha256: F740994485516DEB63B5311AF122C265179F5328A0D857A567B85DB00B11E415
  python:
    manager: conda
    version: "3.11"
    prefix: /opt/hvd/env/
    packages: ["torch==2.3.1", numpy]
    environment_file: env.yml
    conda_packages: ["numpy >=1.26"]
    channels: [conda-forge]
  horovod:
    version: "0.28.1"
    frameworks: [pytorch, tensorflow]
    gpu_operations: nccl
    cpu_operations: gloo
    controllers: [mpi, gloo]
network:
  ca_bundle: ./corp-ca.pem
  apt_proxy: http://proxy.lab:3142
  pip_index: https://pypi.lab/simple
  wheelhouse: ./wheels
""",
        encoding="utf-8",
    )

    spec = load(hosts_file)

    assert spec == ClusterSpec(
        path=str(hosts_file),
        cluster="lab-a",
        ssh=SshSpec(user="ubuntu", port=2200, identity=str(tmp_path / "keys" / "id_lab"), become=False),
        hosts=(
            HostSpec("ip-192-168-3-3", "192.168.3.3", 2200, "192.168.3.3", 2200, None, 8),
            HostSpec("gpu02", "192.168.3.4", 2222, "10.0.0.4", 22, 2, 9),
        ),
        stack={
            "driver": "550",
            "cuda": "12.4",
            "cudnn": "9.1.0",
            "nccl": "2.21.5",
            "gpu_source": "env",
            "gcc": "12",
            "mpi": {
                "impl": "openmpi",
                "version": "4.1.6",
                "source": "source",
                "url": "https://download.open-mpi.org/release/open-mpi/v4.1/openmpi-4.1.6.tar.bz2",
                "sha256": "f740994485516deb63b5311af122c265179f5328a0d857a567b85db00b11e415",
            },
            "python": {
                "manager": "conda",
                "version": "3.11",
                "prefix": "/opt/hvd/env",
                "packages": ["torch==2.3.1", "numpy"],
                "environment_file": str(tmp_path / "env.yml"),
                "conda_packages": ["numpy >=1.26"],
                "channels": ["conda-forge"],
            },
            "horovod": {
                "version": "0.28.1",
                "frameworks": ["pytorch", "tensorflow"],
                "gpu_operations": "nccl",
                "cpu_operations": "gloo",
                "controllers": ["mpi", "gloo"],
            },
        },
        network=NetworkSpec(
            ca_bundle=str(tmp_path / "corp-ca.pem"),
            apt_proxy="http://proxy.lab:3142",
            pip_index="https://pypi.lab/simple",
            wheelhouse=str(tmp_path / "wheels"),
        ),
        set_hostname=True,
    )


def test_architecture_example_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(KEY)
    monkeypatch.setenv("HOME", str(home))
    site = tmp_path / "site"
    (site / "wheels").mkdir(parents=True)
    (site / "corp-ca.pem").write_text(CA)
    text = """\
cluster: lab-a
ssh: {user: ubuntu, port: 22, identity: ~/.ssh/id_ed25519}
hosts:
  - 192.168.3.3                       # shorthand: address only
  - name: gpu02
    address: 192.168.3.4              # how the controller reaches it
    port: 2222
    fabric_address: 10.0.0.4          # how nodes reach each other (optional)
    slots: 2                          # processes; default: detected GPU count
stack:                                # every key optional; the resolver fills the rest
  driver: "550"
  cuda: "12.4"
  nccl: "2.21"
  mpi: {impl: openmpi, version: "4.1.6", source: package}   # or source
  python: {manager: venv, version: "3.11", prefix: /opt/hvd/env, packages: ["torch==2.3.1"]}
  horovod: {version: "0.28.1", frameworks: [pytorch], gpu_operations: nccl}
network: {ca_bundle: ./corp-ca.pem, apt_proxy: null, pip_index: null, wheelhouse: ./wheels}
"""
    spec = loads(text, str(site / "hosts.yaml"))
    assert spec.ssh.identity == str(home / ".ssh" / "id_ed25519")
    assert [host.name for host in spec.hosts] == ["ip-192-168-3-3", "gpu02"]
    assert spec.network == NetworkSpec(ca_bundle=str(site / "corp-ca.pem"), wheelhouse=str(site / "wheels"))
    assert spec.stack["python"]["packages"] == ["torch==2.3.1"]


MINIMAL = "cluster: lab\nhosts:\n"


@pytest.mark.parametrize(
    ("entry", "name"),
    [
        ("10.0.0.3", "ip-10-0-0-3"),
        ("GPU01.Lab.Example", "gpu01.lab.example"),
        ("'::1'", "ip6-0000-0000-0000-0000-0000-0000-0000-0001"),
        ("'fd00:1::a'", "ip6-fd00-0001-0000-0000-0000-0000-0000-000a"),
        ("{address: 10.0.0.7}", "ip-10-0-0-7"),
    ],
)
def test_shorthand_host_is_named_after_its_address(entry: str, name: str) -> None:
    spec = loads(f"{MINIMAL}  - {entry}\n")
    assert spec.hosts[0].name == name


def test_shorthand_host_keeps_the_address_as_written() -> None:
    (host,) = loads(f"{MINIMAL}  - GPU01.lab\n").hosts
    assert (host.name, host.address, host.fabric_address) == ("gpu01.lab", "GPU01.lab", "GPU01.lab")


def test_host_ports_default_to_ssh_port_and_fabric_to_address_and_port() -> None:
    spec = loads("cluster: lab\nssh: {port: 2022}\nhosts:\n  - 10.0.0.1\n  - {address: 10.0.0.2, port: 2222}\n")
    first, second = spec.hosts
    assert (first.port, first.fabric_address, first.fabric_port, first.slots) == (2022, "10.0.0.1", 2022, None)
    assert (second.port, second.fabric_address, second.fabric_port) == (2222, "10.0.0.2", 2222)


def test_host_line_is_where_its_entry_starts() -> None:
    spec = loads(f"{MINIMAL}  - 10.0.0.1\n  # gpu02 follows\n  - name: gpu02\n    address: 10.0.0.2\n")
    assert [host.line for host in spec.hosts] == [3, 5]


def test_defaults_when_only_cluster_and_hosts_are_given() -> None:
    spec = loads(f"{MINIMAL}  - 10.0.0.1\n", "somewhere/hosts.yaml")
    assert spec.path == "somewhere/hosts.yaml"
    assert spec.ssh == SshSpec(user="root", port=22, identity=None, become=False)
    assert spec.stack == {}
    assert spec.network == NetworkSpec()
    assert spec.set_hostname is False


def test_become_defaults_to_whether_the_user_is_not_root() -> None:
    assert SshSpec().become is False
    assert SshSpec(user="ubuntu").become is True
    assert SshSpec(user="ubuntu", become=False).become is False
    assert loads("cluster: lab\nssh: {user: ubuntu}\nhosts: [10.0.0.1]\n").ssh.become is True


def test_null_optional_fields_mean_unset() -> None:
    spec = loads(
        "cluster: lab\nssh: {user: null, port: ~, identity: null}\nhosts:\n"
        "  - {address: 10.0.0.1, port: null, slots: null, name: null}\n"
        "stack: {cuda: null, mpi: {version: null}}\nnetwork:\nset_hostname: null\n"
    )
    assert spec.ssh == SshSpec()
    assert spec.hosts[0] == HostSpec("ip-10-0-0-1", "10.0.0.1", 22, "10.0.0.1", 22, None, 4)
    assert spec.stack == {"mpi": {}}
    assert spec.network == NetworkSpec()


def test_relative_identity_resolves_against_the_hosts_file_folder(tmp_path: Path) -> None:
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "id").write_text(KEY)
    spec = loads("cluster: lab\nssh: {identity: keys/../keys/id}\nhosts: [10.0.0.1]\n", str(tmp_path / "hosts.yaml"))
    assert spec.ssh.identity == str(tmp_path / "keys" / "id")


def test_identity_tilde_expands_to_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_ed25519").write_text(KEY)
    monkeypatch.setenv("HOME", str(tmp_path))
    spec = loads("cluster: lab\nssh: {identity: ~/.ssh/id_ed25519}\nhosts: [10.0.0.1]\n", "/elsewhere/hosts.yaml")
    assert spec.ssh.identity == str(tmp_path / ".ssh" / "id_ed25519")


def test_missing_identity_error_shows_the_resolved_path(tmp_path: Path) -> None:
    err = _error("cluster: lab\nssh: {identity: ./id_none}\nhosts: [10.0.0.1]\n", str(tmp_path / "hosts.yaml"))
    assert err.field == "ssh.identity"
    assert str(tmp_path / "id_none") in err.message


def test_hosts_may_share_an_address_on_different_ports() -> None:
    spec = loads(
        f"{MINIMAL}"
        "  - {name: n1, address: 127.0.0.1, port: 2201, fabric_address: 172.20.0.2, fabric_port: 22}\n"
        "  - {name: n2, address: 127.0.0.1, port: 2202, fabric_address: 172.20.0.3, fabric_port: 22}\n"
    )
    assert [(host.address, host.port) for host in spec.hosts] == [("127.0.0.1", 2201), ("127.0.0.1", 2202)]


def test_same_address_written_differently_is_still_a_duplicate() -> None:
    err = _error(f"{MINIMAL}  - {{name: a, address: '::1'}}\n  - {{name: b, address: '0:0::1'}}\n")
    assert err.field == "hosts[1].address"


def test_hosts_sharing_an_address_need_names() -> None:
    err = _error(
        f"{MINIMAL}  - {{address: 127.0.0.1, port: 2201, fabric_address: 10.0.0.1}}\n"
        "  - {address: 127.0.0.1, port: 2202, fabric_address: 10.0.0.2}\n"
    )
    assert err.field == "hosts[1].name"
    assert "give the host a 'name:'" in err.message


def test_integer_versions_are_accepted_as_strings() -> None:
    spec = loads(f"{MINIMAL}  - 10.0.0.1\nstack: {{driver: 550, gcc: 12, cuda: !!str 12.10}}\n")
    assert spec.stack == {"driver": "550", "gcc": "12", "cuda": "12.10"}


def test_yaml_merge_keys_apply_and_explicit_keys_win() -> None:
    spec = loads(
        f"{MINIMAL}"
        "  - &gpu {name: gpu01, address: 10.0.0.1, port: 2222, slots: 8}\n"
        "  - <<: *gpu\n"
        "    name: gpu02\n"
        "    address: 10.0.0.2\n"
    )
    assert spec.hosts[1] == HostSpec("gpu02", "10.0.0.2", 2222, "10.0.0.2", 2222, 8, 4)


def test_repeated_frameworks_are_rejected() -> None:
    err = _error(f"{MINIMAL}  - 10.0.0.1\nstack: {{horovod: {{frameworks: [pytorch, pytorch]}}}}\n")
    assert err.field == "stack.horovod.frameworks[1]"
    assert "listed twice" in err.message


def test_host_entry_must_be_an_address_or_a_mapping() -> None:
    err = _error(f"{MINIMAL}  - [10.0.0.1, 2222]\n")
    assert (err.field, err.line) == ("hosts[0]", 3)
    assert "expected an address or a mapping with 'address', got a list" in err.message


# ------------------------------------------------------------------------------------------ controller files named


def test_an_open_mpi_tarball_on_the_controller_is_taken_relative_to_hosts_yaml(tmp_path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "openmpi-4.1.4.tar.xz").write_bytes(b"tarball")
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("cluster: lab\nhosts: [10.0.0.1]\n"
                     "stack: {mpi: {source: source, version: '4.1.4', url: src/openmpi-4.1.4.tar.xz}}\n")
    assert load(str(hosts)).stack["mpi"]["url"] == str(tmp_path / "src" / "openmpi-4.1.4.tar.xz")


def test_nccl_tests_names_a_controller_path_or_a_mirror_and_its_sha256_with_their_lines(tmp_path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "nccl-tests-2.19.6.tar.gz").write_bytes(b"tarball")
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("cluster: lab\nhosts: [10.0.0.1]\nstack:\n  driver: '535'\n  nccl_tests:\n"
                     "    version: '2.19.6'\n    url: src/nccl-tests-2.19.6.tar.gz\n    sha256: " + "A" * 64 + "\n")
    spec = load(str(hosts))
    assert spec.stack["nccl_tests"] == {"version": "2.19.6", "url": str(tmp_path / "src" / "nccl-tests-2.19.6.tar.gz"),
                                        "sha256": "a" * 64}
    assert {k: v for k, v in spec.stack_lines.items() if k.startswith("stack.nccl_tests")} == {
        "stack.nccl_tests": 6, "stack.nccl_tests.version": 6, "stack.nccl_tests.url": 7, "stack.nccl_tests.sha256": 8}
    mirror = loads("cluster: lab\nhosts: [10.0.0.1]\n"
                   "stack: {nccl_tests: {url: 'https://mirror.example/nccl-tests-2.19.6.tar.gz'}}\n")
    assert mirror.stack == {"nccl_tests": {"url": "https://mirror.example/nccl-tests-2.19.6.tar.gz"}}
    assert loads("cluster: lab\nhosts: [10.0.0.1]\nstack: {nccl_tests: {}}\n").stack == {"nccl_tests": {}}


@pytest.mark.parametrize(
    ("content", "field", "line", "message"),
    [
        ("channels: [conda-forge]\ndependencies:\n  - python=3.11\n  - {{ evil }}\n", "dependencies[1]", 4, "plain names"),
        ("dependencies:\n  - python=3.11\n  - 'numpy; rm -f x'\n", "dependencies[1]", 3, "not a conda match spec"),
        ("dependencies:\n  - pip:\n      - torch==2.3.1\n  - pip: [numpy]\n", "dependencies[1]", 4, "second pip"),
        ("dependencies:\n  - pip:\n      - https://example.invalid/x.whl\n", "dependencies[0].pip[0]", 3,
         "not a package requirement"),
        ("prefix: /opt/x\ndependencies: [python]\n", "prefix", 1, "unknown key 'prefix'"),
        ("channels: ['bad channel']\n", "channels[0]", 1, "not a channel name"),
    ],
)
def test_a_bad_environment_file_is_named_by_its_own_path_line_and_field(
        tmp_path: Path, content: str, field: str, line: int, message: str) -> None:
    """The environment file is read when hosts.yaml is: a mistake in it stops the run before any node is touched."""
    (tmp_path / "env.yml").write_text(content)
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("cluster: lab\nhosts: [10.0.0.1]\nstack: {python: {manager: conda, environment_file: env.yml}}\n")
    with pytest.raises(SpecError) as caught:
        load(hosts)
    err = caught.value
    assert (err.path, err.field, err.line) == (str(tmp_path / "env.yml"), field, line), str(err)
    assert message in err.message, str(err)


def test_a_good_environment_file_and_a_local_conda_channel_load(tmp_path: Path) -> None:
    (tmp_path / "env.yml").write_text("name: hvd\nchannels: [conda-forge, https://mirror.invalid/conda]\n"
                                      "dependencies:\n  - python=3.11\n  - numpy >=1.26,<2\n  - pip:\n"
                                      "      - torch==2.13.0\n")
    (tmp_path / "channel" / "noarch").mkdir(parents=True)
    (tmp_path / "channel" / "noarch" / "repodata.json").write_text("{}")
    (tmp_path / "empty").mkdir()
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("cluster: lab\nhosts: [10.0.0.1]\nnetwork: {conda_channel: ./channel}\n"
                     "stack: {python: {manager: conda, environment_file: env.yml}}\n")
    spec = load(hosts)
    assert spec.stack["python"]["environment_file"] == str(tmp_path / "env.yml")
    assert spec.network.conda_channel == str(tmp_path / "channel")
    hosts.write_text("cluster: lab\nhosts: [10.0.0.1]\nnetwork: {conda_channel: ./empty}\n")
    with pytest.raises(SpecError, match="not an indexed conda channel"):
        load(hosts)
