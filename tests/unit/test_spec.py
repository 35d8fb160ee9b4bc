"""hosts.yaml loading: every mistake is one SpecError at the exact line and field; good files load fully."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hvdcluster.errors import HvdError, SpecError
from hvdcluster.spec import ClusterSpec, HostSpec, NetworkSpec, SshSpec, load, loads

BAD_HOSTS = Path(__file__).parent / "bad_hosts"
BAD_FILES = sorted(BAD_HOSTS.glob("*.yaml"))
EXPECT = re.compile(r"# expect: (?P<field>\S+) @ (?P<line>\d+)")
MESSAGE_PREFIX = "# message: "


def _expectation(path: Path) -> tuple[str, int, str | None]:
    lines = path.read_text(encoding="utf-8").splitlines()
    match = EXPECT.fullmatch(lines[0])
    assert match, f"{path.name}: the first line must be '# expect: <field> @ <line>'"
    message = lines[1][len(MESSAGE_PREFIX) :] if len(lines) > 1 and lines[1].startswith(MESSAGE_PREFIX) else None
    return match["field"], int(match["line"]), message


def _error(text: str, path: str = "<string>") -> SpecError:
    with pytest.raises(SpecError) as caught:
        loads(text, path)
    return caught.value


# ------------------------------------------------------------------------------------------ the bad corpus


def test_bad_corpus_covers_at_least_24_mistakes() -> None:
    assert len(BAD_FILES) >= 24


@pytest.mark.parametrize("case", BAD_FILES, ids=lambda path: path.stem)
def test_bad_hosts_file_is_rejected_at_its_field_and_line(case: Path) -> None:
    field, line, message = _expectation(case)
    with pytest.raises(SpecError) as caught:
        load(str(case))
    err = caught.value
    assert (err.field, err.line) == (field, line), str(err)
    assert str(err).startswith(f"{case}:{line}:")
    assert field in str(err)
    assert "\n" not in str(err)
    if message is not None:
        assert message in err.message, str(err)


# ------------------------------------------------------------------------------------------ error shape


def test_spec_error_is_one_located_line_with_exit_code_2() -> None:
    err = _error("cluster: lab\nhosts:\n  - address: 10.0.0.1\n    port: 0\n", "site/hosts.yaml")
    assert isinstance(err, HvdError)
    assert err.exit_code == 2
    assert (err.path, err.line, err.column, err.field) == ("site/hosts.yaml", 4, 11, "hosts[0].port")
    assert str(err) == f"site/hosts.yaml:4:11: hosts[0].port: {err.message}"


def test_spec_error_str_never_spans_lines() -> None:
    err = SpecError("h.yaml", 1, 2, "cluster", "first\nsecond\r\n  third")
    assert str(err) == "h.yaml:1:2: cluster: first second third"


def test_unknown_key_suggests_closest_valid_key() -> None:
    err = _error("cluster: lab\nssh: {usr: ubuntu}\nhosts: [10.0.0.1]\n")
    assert (err.field, err.line, err.column) == ("ssh.usr", 2, 7)
    assert "did you mean 'user'?" in err.message


def test_unknown_key_without_close_match_lists_the_allowed_keys() -> None:
    err = _error("cluster: lab\nhosts: [10.0.0.1]\nnetwork: {mirror: x}\n")
    assert err.field == "network.mirror"
    assert "allowed keys: ca_bundle, apt_proxy, pip_index, wheelhouse" in err.message


def test_unknown_stack_key_is_rejected_with_line_number() -> None:
    err = _error("cluster: lab\nhosts: [10.0.0.1]\nstack:\n  cuda: '12.4'\n  cudnn_version: '9.1'\n")
    assert (err.field, err.line) == ("stack.cudnn_version", 5)
    assert "did you mean 'cudnn'?" in err.message


def test_invalid_choice_lists_the_allowed_values() -> None:
    err = _error("cluster: lab\nhosts: [10.0.0.1]\nstack: {python: {manager: pip}}\n")
    assert err.field == "stack.python.manager"
    assert "allowed: venv, conda" in err.message


def test_boolean_is_not_accepted_as_an_integer() -> None:
    err = _error("cluster: lab\nhosts:\n  - {address: 10.0.0.1, slots: true}\n")
    assert err.field == "hosts[0].slots"
    assert "expected an integer, got boolean true" in err.message


def test_quoted_number_is_a_string_not_a_port() -> None:
    err = _error("cluster: lab\nssh: {port: '22'}\nhosts: [10.0.0.1]\n")
    assert err.field == "ssh.port"
    assert "got string '22'" in err.message


def test_float_version_is_rejected_with_a_hint_to_quote_it() -> None:
    err = _error("cluster: lab\nhosts: [10.0.0.1]\nstack: {python: {version: 3.10}}\n")
    assert err.field == "stack.python.version"
    assert err.message == 'write versions as strings ("3.10"): YAML reads 3.10 as 3.1'


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("gpu_01", "bad character '_' in label 'gpu_01'"),
        ("gpu-", "label 'gpu-' ends with a hyphen"),
        ("-gpu", "label '-gpu' starts with a hyphen"),
        ("gpu..lab", "empty label"),
        ("a" * 64, "is 64 characters long (at most 63)"),
        (".".join(["a" * 63] * 4) + ".ab", "characters long (at most 253)"),
        ("node.123", "last label '123' is all digits"),
        ("gpü", "bad character 'ü'"),
    ],
)
def test_invalid_hostname_error_gives_the_reason(name: str, reason: str) -> None:
    err = _error(f"cluster: lab\nhosts:\n  - {{name: '{name}', address: 10.0.0.1}}\n")
    assert err.field == "hosts[0].name"
    assert reason in err.message


def test_missing_required_key_points_at_the_parent_mapping() -> None:
    err = _error("# header\n\ncluster: lab\nhosts:\n  - 10.0.0.1\n  - {name: gpu02, port: 2222}\n")
    assert (err.field, err.line, err.column) == ("hosts[1].address", 6, 5)


def test_yaml_syntax_error_points_at_the_problem() -> None:
    err = _error("cluster: lab\nhosts:\n  - 10.0.0.1\n - 10.0.0.2\n")
    assert err.field == "<yaml>"
    assert err.line == 4


def test_control_character_is_a_yaml_error_with_its_position() -> None:
    err = _error("cluster: lab\nhosts: [gpu\x0701]\n")
    assert (err.field, err.line, err.column) == ("<yaml>", 2, 12)


def test_load_reports_an_unreadable_file_as_spec_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(SpecError) as caught:
        load(missing)
    assert caught.value.path == str(missing)
    assert caught.value.field == "<file>"


def test_load_reports_invalid_utf8_with_its_line(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_bytes(b"cluster: lab\nhosts: [gpu\xff]\n")
    with pytest.raises(SpecError) as caught:
        load(hosts)
    assert (caught.value.line, caught.value.column) == (2, 12)


# ------------------------------------------------------------------------------------------ good files


def test_full_example_loads_every_field(tmp_path: Path) -> None:
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "id_lab").write_text("key")
    (tmp_path / "corp-ca.pem").write_text("ca")
    (tmp_path / "wheels").mkdir()
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
    installer: https://example.invalid/Miniforge3.sh
    installer_sha256: "0000000000000000000000000000000000000000000000000000000000000000"
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
                "environment_file": "env.yml",
                "installer": "https://example.invalid/Miniforge3.sh",
                "installer_sha256": "0" * 64,
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
    (home / ".ssh" / "id_ed25519").write_text("key")
    monkeypatch.setenv("HOME", str(home))
    site = tmp_path / "site"
    (site / "wheels").mkdir(parents=True)
    (site / "corp-ca.pem").write_text("ca")
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
    (tmp_path / "keys" / "id").write_text("key")
    spec = loads("cluster: lab\nssh: {identity: keys/../keys/id}\nhosts: [10.0.0.1]\n", str(tmp_path / "hosts.yaml"))
    assert spec.ssh.identity == str(tmp_path / "keys" / "id")


def test_identity_tilde_expands_to_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_ed25519").write_text("key")
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
