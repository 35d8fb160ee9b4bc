"""Pinned node host keys in hosts.yaml: hosts[].host_key and ssh.known_hosts (plain, hashed, wildcard and negated
patterns, as OpenSSH reads them), and their errors located in both files."""

from __future__ import annotations

import base64
from pathlib import Path

from hvdcluster.spec import loads
from tests.unit.spec_helpers import _error

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
