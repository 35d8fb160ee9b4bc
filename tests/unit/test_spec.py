"""hosts.yaml loading: every mistake is one SpecError at the exact line and field; good files load fully."""

from __future__ import annotations

import base64
import json
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from hvdcluster.errors import HvdError, SpecError
from hvdcluster.spec import (
    MAX_CA_BUNDLE_BYTES,
    MAX_FILE_BYTES,
    SYSTEM_FOLDERS,
    SYSTEM_TREES,
    ClusterSpec,
    HostSpec,
    NetworkSpec,
    SshSpec,
    document,
    load,
    loader,
    loads,
)

BAD_HOSTS = Path(__file__).parent / "bad_hosts"
KEY = (BAD_HOSTS / "fixtures" / "id_test").read_text()  # a private key's shape (not a real key)
CA = (BAD_HOSTS / "fixtures" / "ca.pem").read_text()  # one real self-signed certificate
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


def test_bad_corpus_covers_at_least_110_mistakes() -> None:
    assert len(BAD_FILES) >= 110


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


# ------------------------------------------------------------------------------------------ hostile input: the file


class _Reads:
    """What a file read of the loader did: the bytes ``os.read`` returned from the files it opened."""

    def __init__(self) -> None:
        self.bytes = 0
        self.fds: set[int] = set()


@contextmanager
def _reading(budget: int = MAX_CA_BUNDLE_BYTES + 1) -> Iterator[_Reads]:
    """Count what the loader reads through ``os.open``/``os.read`` (read_regular_file's only way in).

    A blocking open of a FIFO or a device, or a read past ``budget`` bytes, fails at once: a loader that would wait
    for a writer or read /dev/zero forever fails the test instead of hanging it.
    """
    reads, real_open, real_read = _Reads(), os.open, os.read

    def guarded_open(path: str | os.PathLike[str], flags: int, *args: int) -> int:
        try:
            mode = os.stat(path).st_mode
        except OSError:
            mode = 0
        if mode and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)) and not flags & os.O_NONBLOCK:
            raise AssertionError(f"{path} was opened blocking: that waits for a writer")
        fd = real_open(path, flags, *args)
        reads.fds.add(fd)
        return fd

    def counted_read(fd: int, size: int) -> bytes:
        data = real_read(fd, size)
        if fd in reads.fds:
            reads.bytes += len(data)
            assert reads.bytes <= budget, f"read more than {budget} bytes"
        return data

    os.open, os.read = guarded_open, counted_read
    try:
        yield reads
    finally:
        os.open, os.read = real_open, real_read


def _load_error(path: str | Path, read: int = 0) -> SpecError:
    """The loader's refusal of ``path``, having read exactly ``read`` bytes of it."""
    with _reading() as reads, pytest.raises(SpecError) as caught:
        load(path)
    assert reads.bytes == read
    return caught.value


def test_a_fifo_is_refused_at_once_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "hosts.yaml"
    os.mkfifo(fifo)
    err = _load_error(fifo)
    assert (err.field, err.line) == ("<file>", 1)
    assert "named pipe (FIFO), not a regular file" in err.message


def test_dev_zero_is_refused_at_once_instead_of_read_forever() -> None:
    err = _load_error("/dev/zero")
    assert "a character device, not a regular file" in err.message


def test_a_directory_is_refused(tmp_path: Path) -> None:
    assert "a directory, not a regular file" in _load_error(tmp_path).message


def test_a_file_over_1_mib_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    big = tmp_path / "hosts.yaml"
    big.write_text("cluster: lab\nhosts: [10.0.0.1]\n" + "#" * (1 << 20) + "\n")
    assert "larger than 1 MiB" in _load_error(big, read=MAX_FILE_BYTES + 1).message


def _no_validators(*args: object) -> None:
    raise AssertionError("the validators walked a document the loader's bounds should have refused")


def test_a_merge_key_bomb_fails_fast_in_a_field_the_validators_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "cluster: lab\nhosts: [10.0.0.1]\ndefs:\n  m0: &m0 {user: root}\n"
    text += "".join(f"  m{i}: &m{i} {{<<: [{', '.join([f'*m{i - 1}'] * 9)}]}}\n" for i in range(1, 10))
    text += "ssh: {<<: *m9}\n"
    assert len(text.encode()) < 700
    visits = []
    children = loader._children
    monkeypatch.setattr(loader, "_children", lambda node: visits.append(node) or children(node))
    monkeypatch.setattr(document, "_cluster_spec", _no_validators)
    with pytest.raises(SpecError) as caught:
        loads(text)
    assert caught.value.field == "<yaml>" and "alias bomb" in caught.value.message
    # refused by a walk over the composed nodes (each visited twice at most), not over the 9**9 expanded values
    assert len(visits) <= 2 * len({id(node) for node in visits}) < len(text)


@pytest.mark.parametrize(
    "text",
    [
        "cluster: lab\nhosts: [10.0.0.1]\nstack: " + "[" * 3000 + "]" * 3000 + "\n",
        "cluster: lab\nhosts: [10.0.0.1]\nstack:\n" + "".join(f"{'  ' * (i + 1)}k{i}:\n" for i in range(200)),
        "cluster: lab\nhosts: [10.0.0.1]\nx0: &x0 [1]\n" + "".join(f"x{i}: &x{i} [*x{i - 1}]\n" for i in range(1, 300)),
        "cluster: lab\nssh: &s {<<: *s}\nhosts: [10.0.0.1]\n",
        "cluster: lab\nhosts: [10.0.0.1]\nstack: &a {python: *a}\n",
    ],
    ids=["flow-nesting", "block-nesting", "alias-chain", "self-merge", "recursive-mapping"],
)
def test_deep_or_recursive_documents_are_spec_errors_never_recursion_errors(
        text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(document, "_cluster_spec", _no_validators)  # refused before anything walks it expanded
    with pytest.raises(SpecError) as caught:
        loads(text)
    assert caught.value.field == "<yaml>"


def test_a_large_legitimate_file_is_within_the_bounds() -> None:
    hosts = "".join(f"  - {{<<: *d, name: n{i}, address: 10.{i // 250}.{i % 250}.1}}\n" for i in range(1, 2000))
    spec = loads("cluster: lab\nhosts:\n  - &d {name: n0, address: 10.9.9.9, port: 2222, slots: 8}\n" + hosts)
    assert len(spec.hosts) == 2000 and {(h.port, h.slots) for h in spec.hosts} == {(2222, 8)}


# ------------------------------------------------------------------------------------------ hostile input: values


@pytest.mark.parametrize("written", ["02222", "0x8ae", "2_222", "+2222", "0b100010101110", "37:02"])
def test_ports_are_decimal_only(written: str) -> None:
    err = _error(f"cluster: lab\nssh: {{port: {written}}}\nhosts: [10.0.0.1]\n")
    assert err.field == "ssh.port"
    assert err.message.startswith("write the port as a decimal number")


def test_a_decimal_port_is_read_as_written() -> None:
    assert loads("cluster: lab\nssh: {port: 2222}\nhosts: [10.0.0.1]\n").ssh.port == 2222


@pytest.mark.parametrize(
    "value",
    ["{{ 7 * 7 }}", "x{%if 1%}", "{#c#}", "a\nb", "a\x00b", "a\x1b[2Jb", "a\tb", "a\u2028b", "a\x85b"],
)
@pytest.mark.parametrize(
    "field",
    ["stack.python.environment_file", "stack.python.channels[0]", "network.apt_proxy", "ssh.user", "hosts[0].name"],
)
def test_no_string_field_takes_template_syntax_or_control_characters(field: str, value: str) -> None:
    section, _, key = field.rpartition(".")
    quoted = json.dumps(value)  # JSON is YAML: escapes survive as the characters they stand for
    if key.endswith("[0]"):  # a list's first item
        key, quoted = key[:-3], f"[{quoted}]"
    documents = {
        "stack.python": f"cluster: lab\nhosts: [10.0.0.1]\nstack: {{python: {{{key}: {quoted}}}}}\n",
        "network": f"cluster: lab\nhosts: [10.0.0.1]\nnetwork: {{{key}: {quoted}}}\n",
        "ssh": f"cluster: lab\nssh: {{{key}: {quoted}}}\nhosts: [10.0.0.1]\n",
        "hosts[0]": f"cluster: lab\nhosts:\n  - {{address: 10.0.0.1, {key}: {quoted}}}\n",
    }
    err = _error(documents[section])
    assert err.field == field
    assert "template" in err.message or "U+" in err.message, err.message


@pytest.mark.parametrize(
    "url", ["http://proxy.lab:3142", "https://user:p%40ss@mirror.lab/simple?x=1&y=2#top", "http://[fd00::1]:3142/"]
)
def test_ordinary_urls_are_accepted(url: str) -> None:
    assert loads(f"cluster: lab\nhosts: [10.0.0.1]\nnetwork: {{pip_index: '{url}'}}\n").network.pip_index == url


@pytest.mark.parametrize(
    ("prefix", "normalised"),
    [("/opt/hvd/env", "/opt/hvd/env"), ("/opt/hvd/./env/", "/opt/hvd/env"), ("/srv/hvd", "/srv/hvd"),
     ("/home/ubuntu/env", "/home/ubuntu/env"), ("/usr/local/hvd-env", "/usr/local/hvd-env"),
     ("/opt/my_env.3", "/opt/my_env.3")],
)
def test_a_prefix_of_its_own_is_accepted_and_normalised(prefix: str, normalised: str) -> None:
    spec = loads(f"cluster: lab\nhosts: [10.0.0.1]\nstack: {{python: {{prefix: '{prefix}'}}}}\n")
    assert spec.stack["python"]["prefix"] == normalised


@pytest.mark.parametrize("folder", sorted(SYSTEM_FOLDERS))
def test_no_system_folder_is_a_prefix(folder: str) -> None:
    for written in (folder, folder + "/", "/" + folder, folder + "/."):
        err = _error(f"cluster: lab\nhosts: [10.0.0.1]\nstack: {{python: {{prefix: '{written}'}}}}\n")
        assert err.field == "stack.python.prefix" and "system folder" in err.message, (written, err.message)


@pytest.mark.parametrize("tree", SYSTEM_TREES)
def test_nothing_under_a_volatile_or_virtual_tree_is_a_prefix(tree: str) -> None:
    err = _error(f"cluster: lab\nhosts: [10.0.0.1]\nstack: {{python: {{prefix: '{tree}/a/b'}}}}\n")
    assert f"is under {tree}" in err.message


@pytest.mark.parametrize(
    "requirement", ["torch==2.3.1", "numpy>=1.26,<2", "horovod[pytorch]==0.28.1", 'tomli; python_version < "3.11"']
)
def test_pep_508_requirements_are_accepted(requirement: str) -> None:
    spec = loads(f"cluster: lab\nhosts: [10.0.0.1]\nstack: {{python: {{packages: [{json.dumps(requirement)}]}}}}\n")
    assert spec.stack["python"]["packages"] == [requirement]


@pytest.mark.parametrize("address", ["fe80::1%eth0", "fe80::1%enp3s0f1", "fe80::1%br-lab.10", "fe80::1%ib0"])
def test_ipv6_addresses_with_an_interface_zone_are_accepted(address: str) -> None:
    assert loads(f"cluster: lab\nhosts: ['{address}']\n").hosts[0].address == address


def test_the_line_of_each_stack_value_is_kept_for_the_resolver() -> None:
    spec = loads(
        "cluster: lab\nhosts: [10.0.0.1]\nstack:\n  cuda: '12.4'\n  python:\n    version: '3.11'\n"
        "    packages:\n      - numpy\n      - torch==2.3.1\n"
    )
    assert spec.stack_lines["stack.cuda"] == 4
    assert spec.stack_lines["stack.python.version"] == 6
    assert spec.stack_lines["stack.python.packages[1]"] == 9


# ------------------------------------------------------------------------------------------ hostile input: files named


PUBLIC = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBzZ1pGMWZ5cGxhY2Vob2xkZXJrZXlkYXRhMTIzNDU2 me@laptop\n"
DER = base64.b64decode("".join(CA.split("-----")[2].split()))


def _with_file(tmp_path: Path, field: str, content: bytes | str | None, name: str = "file") -> str:
    """hosts.yaml text whose ``field`` (ssh.identity or network.ca_bundle) names ``tmp_path/name``."""
    target = tmp_path / name
    if isinstance(content, str):
        target.write_text(content)
    elif isinstance(content, bytes):
        target.write_bytes(content)
    section, key = field.split(".")
    return f"cluster: lab\nhosts: [10.0.0.1]\n{section}: {{{key}: {name}}}\n"


@pytest.mark.parametrize(
    ("field", "content", "name", "message"),
    [
        ("ssh.identity", PUBLIC, "id_ed25519", "this is a public key; name the private key"),
        ("ssh.identity", "AAAAC3NzaC1lZDI1NTE5 me@laptop\n", "id_ed25519.pub", "this is a public key; name the"),
        ("ssh.identity", "", "id_ed25519", "is empty"),
        ("ssh.identity", "\n\n  \n", "id_ed25519", "is empty"),
        ("ssh.identity", CA, "id_ed25519", "is not an SSH private key"),
        ("ssh.identity", b"\x00\x01binary", "id_ed25519", "is not an SSH private key"),
        ("network.ca_bundle", "just some text\n", "ca.pem", "holds no PEM certificate"),
        ("network.ca_bundle", DER, "ca.der", "holds no PEM certificate ('-----BEGIN CERTIFICATE-----'); convert"),
        ("network.ca_bundle", CA + "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "ca.pem",
         "certificate 2 (line 14) is not a valid certificate"),
        ("network.ca_bundle", CA + KEY, "ca.pem", "holds a OPENSSH PRIVATE KEY"),
        ("network.ca_bundle", CA.replace("-----END CERTIFICATE-----", ""), "ca.pem", "no matching '-----END' line"),
        ("network.ca_bundle", "", "ca.pem", "holds no PEM certificate"),
    ],
)
def test_files_named_in_hosts_yaml_are_read_and_judged(
    tmp_path: Path, field: str, content: str | bytes, name: str, message: str
) -> None:
    err = _error(_with_file(tmp_path, field, content, name), str(tmp_path / "hosts.yaml"))
    assert (err.field, err.line) == (field, 3)
    assert message in err.message, err.message


@pytest.mark.parametrize("field", ["ssh.identity", "network.ca_bundle"])
def test_a_fifo_named_as_a_file_is_refused_at_once(tmp_path: Path, field: str) -> None:
    os.mkfifo(tmp_path / "pipe")
    with _reading() as reads, pytest.raises(SpecError) as caught:
        loads(_with_file(tmp_path, field, None, "pipe"), str(tmp_path / "hosts.yaml"))
    assert caught.value.field == field and "not a regular file" in caught.value.message
    assert reads.bytes == 0


@pytest.mark.parametrize("field", ["ssh.identity", "network.ca_bundle"])
def test_an_unreadable_file_is_refused_naming_it(tmp_path: Path, field: str, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _with_file(tmp_path, field, KEY if field == "ssh.identity" else CA, "secret")
    target = tmp_path / "secret"
    target.chmod(0)
    if os.geteuid() == 0:  # root reads anything: make the open fail the way it fails for a user
        real_open = os.open

        def deny(path: str | os.PathLike[str], flags: int, *args: int) -> int:
            if os.fspath(path) == str(target):
                raise PermissionError(13, "Permission denied", os.fspath(path))
            return real_open(path, flags, *args)

        monkeypatch.setattr(os, "open", deny)
    err = _error(text, str(tmp_path / "hosts.yaml"))
    assert err.field == field
    assert f"{target}: cannot read the file: Permission denied" in err.message


@pytest.mark.parametrize(
    "first_line",
    ["-----BEGIN OPENSSH PRIVATE KEY-----", "-----BEGIN RSA PRIVATE KEY-----", "-----BEGIN EC PRIVATE KEY-----",
     "-----BEGIN PRIVATE KEY-----", "-----BEGIN ENCRYPTED PRIVATE KEY-----"],
)
def test_private_keys_in_every_openssh_format_are_accepted(tmp_path: Path, first_line: str) -> None:
    key = f"{first_line}\nAAAA\n{first_line.replace('BEGIN', 'END')}\n"
    spec = loads(_with_file(tmp_path, "ssh.identity", key, "id"), str(tmp_path / "hosts.yaml"))
    assert spec.ssh.identity == str(tmp_path / "id")


def test_a_bundle_of_several_certificates_with_comments_is_accepted(tmp_path: Path) -> None:
    bundle = "# corporate roots\n" + CA + "\nsubject=second copy\n" + CA
    spec = loads(_with_file(tmp_path, "network.ca_bundle", bundle, "corp.pem"), str(tmp_path / "hosts.yaml"))
    assert spec.network.ca_bundle == str(tmp_path / "corp.pem")


@pytest.mark.skipif(not Path("/etc/ssl/certs/ca-certificates.crt").is_file(), reason="no system trust store here")
def test_the_system_trust_store_is_a_valid_bundle() -> None:
    with _reading() as reads:
        spec = loads("cluster: lab\nhosts: [10.0.0.1]\nnetwork: {ca_bundle: /etc/ssl/certs/ca-certificates.crt}\n")
    assert spec.network.ca_bundle == "/etc/ssl/certs/ca-certificates.crt"
    assert reads.bytes == Path("/etc/ssl/certs/ca-certificates.crt").stat().st_size  # read once


# ------------------------------------------------------------------------------------------ pinned node host keys

NODE1_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHRlc3QgZml4dHVyZSwgbm90IGEgcmVhbCBrZXkgISEh"
NODE2_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMlbLDY1/Dnf9o39YHgsFdpQ4pBwhUYQhx8Ek1m5F8YS"
NODE3_KEY = ("ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBD0T8Q4/KkYSFhAv47rV65"
             "McgRETUWAsrK8o8f63PT/K3S7MpX4/icnI8CnSKk3MSxrGppEGh077mSfTR4vdGrs=")


def test_a_host_key_pins_that_node_and_only_that_node() -> None:
    spec = loads(f"cluster: lab\nhosts:\n  - {{address: 10.0.0.1, host_key: '{NODE1_KEY} root@node1'}}\n"
                 "  - 10.0.0.2\n")
    assert spec.hosts[0].host_keys == (NODE1_KEY,)  # the comment is dropped
    assert spec.hosts[1].host_keys == ()
    assert spec.ssh.known_hosts is None


def _hashed(name: str, salt: bytes = b"0123456789abcdefghij") -> str:
    import hashlib
    import hmac

    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def test_a_known_hosts_file_pins_the_nodes_it_names_by_address_and_port(tmp_path: Path) -> None:
    """Plain, hashed (ssh-keyscan -H), wildcard and negated patterns and several keys for one node, as OpenSSH reads
    them; a node the file does not name stays unpinned; the path is relative to hosts.yaml."""
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "known_hosts").write_text("\n".join([
        "# the lab, from ssh-keyscan",
        f"10.0.0.1,gpu01.lab {NODE1_KEY} node1",
        f"10.0.0.1 {NODE3_KEY}",
        f"{_hashed('[10.0.0.2]:2222')} {NODE2_KEY}",
        f"10.0.1.*,!10.0.1.9 {NODE3_KEY}",
        f"@cert-authority *.lab {NODE2_KEY}",
        f"@revoked 10.0.9.9 {NODE2_KEY}",
        f"[GPU04.lab]:2200 {NODE1_KEY}",
        ""]))
    spec = loads(
        "cluster: lab\nssh: {known_hosts: lab/known_hosts}\nhosts:\n  - 10.0.0.1\n"
        "  - {address: 10.0.0.2, port: 2222}\n  - 10.0.1.5\n  - 10.0.1.9\n  - {address: gpu04.lab, port: 2200}\n"
        f"  - {{address: 10.0.0.7, host_key: '{NODE2_KEY}'}}\n", str(tmp_path / "hosts.yaml"))
    assert [h.host_keys for h in spec.hosts] == [(NODE1_KEY, NODE3_KEY), (NODE2_KEY,), (NODE3_KEY,), (), (NODE1_KEY,),
                                                 (NODE2_KEY,)]
    assert spec.ssh.known_hosts == str(tmp_path / "lab" / "known_hosts")


def test_a_host_key_the_known_hosts_file_also_pins_is_one_pin(tmp_path: Path) -> None:
    (tmp_path / "known_hosts").write_text(f"10.0.0.1 {NODE1_KEY}\n10.0.0.1 {NODE3_KEY}\n")
    spec = loads("cluster: lab\nssh: {known_hosts: known_hosts}\n"
                 f"hosts: [{{address: 10.0.0.1, host_key: '{NODE3_KEY}'}}]\n", str(tmp_path / "hosts.yaml"))
    assert spec.hosts[0].host_keys == (NODE3_KEY,)  # the host's own host_key is the pin


def test_a_known_hosts_error_names_hosts_yaml_its_line_the_field_and_the_file_line(tmp_path: Path) -> None:
    (tmp_path / "known_hosts").write_text(f"10.0.0.1 {NODE1_KEY}\n10.0.0.2 {NODE2_KEY[:40]}\n")
    err = _error("cluster: lab\nssh:\n  user: ops\n  known_hosts: ./known_hosts\nhosts: [10.0.0.1]\n",
                 str(tmp_path / "hosts.yaml"))
    assert (err.line, err.field) == (4, "ssh.known_hosts")
    assert str(err).startswith(f"{tmp_path / 'hosts.yaml'}:4:16: ssh.known_hosts: {tmp_path / 'known_hosts'}: line 2: ")


def test_host_matching_follows_openssh() -> None:
    from hvdcluster.spec import host_matches, known_hosts_name

    assert known_hosts_name("GPU01.Lab", 22) == "gpu01.lab" and known_hosts_name("fe80::1", 2222) == "[fe80::1]:2222"
    assert host_matches("a,[10.0.0.2]:2222", "[10.0.0.2]:2222") and not host_matches("[10.0.0.2]:2222", "10.0.0.2")
    assert host_matches("10.0.0.?", "10.0.0.7") and not host_matches("10.0.0.?", "10.0.0.17")
    assert host_matches("*.LAB", "gpu01.lab") and not host_matches("*.lab,!gpu01.lab", "gpu01.lab")
    assert host_matches(_hashed("10.0.0.1"), "10.0.0.1") and not host_matches(_hashed("10.0.0.1"), "10.0.0.2")
    assert not host_matches("[ab]c", "ac")  # brackets are literal, not a character class


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
