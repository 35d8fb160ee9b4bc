"""hosts.yaml against hostile input: the file itself (a FIFO, a device, a directory, an oversized file, alias bombs,
deep nesting: refused at once, never read past its bounds), its values (decimal ports only, no template syntax
or control character, no system folder as a prefix) and the files it names (keys and certificates read and
judged, a FIFO or an unreadable file refused)."""

from __future__ import annotations

import base64
import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from hvdcluster.errors import SpecError
from hvdcluster.spec import (
    MAX_CA_BUNDLE_BYTES,
    MAX_FILE_BYTES,
    SYSTEM_FOLDERS,
    SYSTEM_TREES,
    document,
    load,
    loader,
    loads,
)
from tests.unit.spec_helpers import CA, KEY, _error


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
