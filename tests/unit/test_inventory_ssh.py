"""The inventory's SSH: a bastion pinned by its own key that every connection goes through (Ansible's and `run`'s
own ssh, from a folder with a hostile name), one set of ssh connection masters per inventory, node host keys
pinned before any contact and another key refused, the nodes a run trusted on first use named, and `plan
--probe` reaching the nodes with the pins."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hvdcluster import inventory, spec
from hvdcluster.errors import HvdError
from tests.conftest import ROOT

FIXTURES = Path(__file__).parent / "bad_hosts" / "fixtures"  # id_test: a private key's shape; ca.pem: a real cert


def test_a_bastion_is_pinned_by_its_own_key_and_every_connection_goes_through_it(tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """ssh.proxy_jump: the bastion's key from hosts.yaml is written to ssh/bastion_known_hosts (never learnt), and
    Ansible (as the inventory shows it, templated) and `run`'s own ssh both go through it."""
    from hvdcluster import launch

    monkeypatch.chdir(tmp_path)
    (tmp_path / "keys").mkdir()
    shutil.copy(FIXTURES / "id_test", tmp_path / "keys" / "id_test")
    public = (FIXTURES / "id_test.pub").read_text().split()
    (tmp_path / "hosts.yaml").write_text(
        "cluster: lab\nssh:\n  user: ops\n  identity: keys/id_test\n"
        f"  proxy_jump: {{host: bastion.example.org, port: 2222, host_key: '{public[0]} {public[1]} root@jump'}}\n"
        "hosts: [10.0.0.1]\n")
    root = inventory.render(spec.load("hosts.yaml"), tmp_path / "inventories")
    assert (root / "ssh" / "bastion_known_hosts").read_text() == f"[bastion.example.org]:2222 {public[0]} {public[1]}\n"
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(root), "--host", "ip-10-0-0-1"],
                          capture_output=True, text=True, check=True)
    args = json.loads(proc.stdout)["ansible_ssh_common_args"]  # as written (templated when a connection is made)
    assert "StrictHostKeyChecking=" in args and "'accept-new'" in args and "ProxyCommand=" in args
    inv = inventory.read(root)
    argv = launch.ssh_argv(inv, "ip-10-0-0-1")
    proxy = next(a for a in argv if a.startswith("ProxyCommand="))
    key = str(tmp_path / "keys" / "id_test")
    assert proxy == ("ProxyCommand=ssh -W %h:%p -p 2222 -o BatchMode=yes -o StrictHostKeyChecking=yes "
                     f"-o 'UserKnownHostsFile=\"{root}/ssh/bastion_known_hosts\"' -o 'IdentityFile=\"{key}\"' "
                     "ops@bastion.example.org")
    assert argv[-1] == "ops@10.0.0.1"


# A folder name every reader on the way to ssh could misread: a quote (shell), spaces and a double quote (ssh's option
# words), $(...) (a shell would run it), % (ssh's tokens), a backslash.
HOSTILE_FOLDER = "it's a \"lab\" $(touch pwned) 100% \\mine"


def _bastion_site(folder: Path) -> Path:
    folder.mkdir(parents=True)
    shutil.copy(FIXTURES / "id_test", folder / "id test")
    public = (FIXTURES / "id_test.pub").read_text().split()
    (folder / "hosts.yaml").write_text(
        "cluster: lab\nssh:\n  user: ops\n  identity: id test\n"
        f"  proxy_jump: {{host: bastion.example.org, port: 2222, host_key: '{public[0]} {public[1]}'}}\n"
        "hosts: [{address: 10.0.0.1, port: 2200}]\n")
    return folder / "hosts.yaml"


def _control_path_dir(root: Path, env: dict[str, str]) -> str:
    """ansible_control_path_dir as Ansible templates it for the node of the inventory at ``root``."""
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), "all", "-i", str(root), "-m", "ansible.builtin.debug",
         "-a", "var=ansible_control_path_dir"], capture_output=True, text=True, check=True,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
             "ANSIBLE_CALLBACK_RESULT_FORMAT": "json", **env})
    return json.loads(proc.stdout[proc.stdout.index("{"):proc.stdout.rindex("}") + 1])["ansible_control_path_dir"]


def test_each_inventory_keeps_its_ssh_masters_apart_and_a_linked_copy_shares_them(tmp_path: Path) -> None:
    """Ansible names an ssh connection master (ControlPersist) by host, port and user only: the same node behind two
    inventories (two known_hosts, two bastions) would share one, and the second inventory's runs would never check
    the node's key (a bug found by the bundle suite: node1's key never recorded). Each inventory gets a folder named
    by its ssh/ folder's real path: two inventories differ, a copy whose ssh/ is a link to the first's (`plan
    --probe`) is the first's, and an operator's ANSIBLE_SSH_CONTROL_PATH_DIR stays the parent."""
    one = inventory.render(spec.load(_bastion_site(tmp_path / "one")), tmp_path / "one" / "inventories")
    two = inventory.render(spec.load(_bastion_site(tmp_path / "two")), tmp_path / "two" / "inventories")
    linked = tmp_path / "probe" / "lab"
    linked.mkdir(parents=True)
    (linked / "ssh").symlink_to(one / "ssh", target_is_directory=True)
    inventory.render(spec.load(tmp_path / "one" / "hosts.yaml"), tmp_path / "probe")
    found = {name: _control_path_dir(root, {"ANSIBLE_SSH_CONTROL_PATH_DIR": str(tmp_path / "cp")})
             for name, root in (("one", one), ("two", two), ("linked", linked))}
    assert all(re.fullmatch(re.escape(str(tmp_path / "cp")) + r"/hvd-[0-9a-f]{12}", d) for d in found.values()), found
    assert found["one"] != found["two"] and found["linked"] == found["one"], found
    assert re.fullmatch(r"~/\.ansible/cp/hvd-[0-9a-f]{12}", _control_path_dir(one, {"ANSIBLE_SSH_CONTROL_PATH_DIR": ""}))


def _through_ssh(args: list[str], tmp_path: Path) -> tuple[list[str], str, str]:
    """What OpenSSH makes of ``args`` (as Ansible passes them) for ops@10.0.0.1 port 2200, without a network: its
    config dump (-G), then a real run whose ProxyCommand finds a fake `ssh` first on PATH that records its argv."""
    ssh = shutil.which("ssh")
    if ssh is None:
        pytest.skip("no OpenSSH client here")
    fake = tmp_path / "fake-bin"
    fake.mkdir(exist_ok=True)
    record = tmp_path / "proxy-argv"
    (fake / "ssh").write_text(f"#!/bin/sh\nfor a in \"$@\"; do printf '%s\\0' \"$a\"; done > '{record}'\n")
    (fake / "ssh").chmod(0o755)
    base = [ssh, "-F", "/dev/null", *args, "-p", "2200", "-o", "BatchMode=yes", "ops@10.0.0.1"]
    dump = subprocess.run([*base[:1], "-G", *base[1:]], capture_output=True, text=True, check=True).stdout
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "SHELL": "/bin/sh"}
    run = subprocess.run([*base, "true"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=30)
    assert record.is_file(), run.stderr
    return record.read_text().split("\0")[:-1], dump, run.stderr


def _bastion_login(argv: list[str], tmp_path: Path) -> tuple[str, str]:
    """The known_hosts file and identity the bastion's ssh (``argv``, as the ProxyCommand started it) really uses."""
    ssh = shutil.which("ssh")
    options = [a for a in argv if a not in ("-W", "10.0.0.1:2200")]
    dump = subprocess.run([ssh, "-G", "-F", "/dev/null", *options], capture_output=True, text=True, check=True).stdout
    known = next(line.split(" ", 1)[1] for line in dump.splitlines() if line.startswith("userknownhostsfile "))
    verbose = subprocess.run([ssh, "-v", "-F", "/dev/null", "-o", "ProxyCommand=cat /dev/null", *options, "true"],
                             capture_output=True, text=True, cwd=tmp_path, timeout=30).stderr
    identity = next(line.removeprefix("debug1: identity file ").rsplit(" type ", 1)[0].replace("\\\\", "\\")
                    for line in verbose.splitlines()
                    if line.startswith("debug1: identity file "))  # ssh's log writes \\ for \
    return known, identity


def test_the_bastion_proxycommand_works_from_a_folder_with_quotes_spaces_dollars_and_percents(tmp_path: Path) -> None:
    """The inventory's ansible_ssh_common_args, templated by Ansible in a folder named with a quote, spaces, a double
    quote, $(...), % and a backslash, then split as Ansible splits it: OpenSSH reads the known_hosts path whole, runs
    the ProxyCommand (the shell runs nothing the folder's name spells), and the bastion's ssh gets its own
    known_hosts and identity by their real paths. The same for the ProxyCommand of `run`'s own ssh (launch.ssh_argv)."""
    from hvdcluster import launch

    folder = tmp_path / HOSTILE_FOLDER
    hosts = _bastion_site(folder)
    root = inventory.render(spec.load(hosts), folder / "inventories")
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), "all", "-i", "inventories/lab", "-m", "ansible.builtin.debug",
         "-a", "var=ansible_ssh_common_args"], capture_output=True, text=True, check=True, cwd=folder,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
             "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"})
    templated = json.loads(proc.stdout[proc.stdout.index("{"):proc.stdout.rindex("}") + 1])["ansible_ssh_common_args"]
    args = [a.strip() for a in shlex.split(templated) if a.strip()]  # as Ansible's ssh plugin splits it
    proxy = next(a for a in args if a.startswith("ProxyCommand="))
    expanded = proxy.removeprefix("ProxyCommand=").replace("%h", "10.0.0.1").replace("%p", "2200").replace("%%", "%")
    assert subprocess.run(["sh", "-n", "-c", expanded]).returncode == 0
    real = Path(os.path.realpath(root))
    launched = launch.ssh_argv(inventory.read(root), "ip-10-0-0-1")
    launch_proxy = launched[launched.index(next(a for a in launched if a.startswith("ProxyCommand="))) - 1:][:2]
    for how, given in (("ansible", args), ("launch", launch_proxy)):
        argv, dump, stderr = _through_ssh(given, tmp_path)
        if how == "ansible":
            assert f"userknownhostsfile {real / 'ssh' / 'known_hosts'}\n" in dump
            assert "stricthostkeychecking accept-new\n" in dump
        assert argv[:2] == ["-W", "10.0.0.1:2200"] and argv[-1] == "ops@bastion.example.org", (how, argv, stderr)
        known, identity = _bastion_login(argv, tmp_path)
        assert known == str(real / "ssh" / "bastion_known_hosts"), how
        assert identity == str(Path(os.path.realpath(folder)) / "id test"), how
        assert "stricthostkeychecking true" in subprocess.run(
            ["ssh", "-G", "-F", "/dev/null", *argv[2:]], capture_output=True, text=True, check=True).stdout
    assert not list(tmp_path.rglob("pwned"))  # the $(...) in the folder's name was never run


NODE_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMlbLDY1/Dnf9o39YHgsFdpQ4pBwhUYQhx8Ek1m5F8YS"
OTHER_KEY = ("ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBD0T8Q4/KkYSFhAv47rV65"
             "McgRETUWAsrK8o8f63PT/K3S7MpX4/icnI8CnSKk3MSxrGppEGh077mSfTR4vdGrs=")
LEARNT_KEY = (FIXTURES / "id_test.pub").read_text().split()[0] + " " + (FIXTURES / "id_test.pub").read_text().split()[1]


def _pinned_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> spec.ClusterSpec:
    """node1 pinned by hosts[].host_key, node2 (port 2222) by ssh.known_hosts (hashed, as ssh-keyscan -H writes it),
    node3 not pinned."""
    import base64
    import hashlib
    import hmac

    monkeypatch.chdir(tmp_path)
    salt = b"salt-for-the-test-20"
    mac = hmac.new(salt, b"[10.0.0.2]:2222", hashlib.sha1).digest()
    (tmp_path / "lab_known_hosts").write_text(
        f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(mac).decode()} {OTHER_KEY}\n")
    (tmp_path / "hosts.yaml").write_text(
        "cluster: lab\nssh: {user: ops, known_hosts: lab_known_hosts}\nhosts:\n"
        f"  - {{name: node1, address: 10.0.0.1, host_key: '{NODE_KEY} root@node1'}}\n"
        "  - {name: node2, address: 10.0.0.2, port: 2222}\n"
        "  - {name: node3, address: 10.0.0.3}\n")
    return spec.load("hosts.yaml")


def test_pinned_nodes_get_exactly_their_keys_before_any_contact_and_strict_checking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = _pinned_site(tmp_path, monkeypatch)
    ssh_dir = tmp_path / "inventories" / "lab" / "ssh"
    ssh_dir.mkdir(parents=True)
    # What earlier runs left: keys learnt on first contact for all three (node1's and node2's differ from the pins, one
    # written hashed), and a hand-added wildcard line that would also cover node1.
    (ssh_dir / "known_hosts").write_text(
        f"10.0.0.1 {LEARNT_KEY}\n{inventory.known_hosts_name('10.0.0.3', 22)} {LEARNT_KEY}\n"
        f"[10.0.0.2]:2222,10.0.0.2 {LEARNT_KEY}\n10.0.0.* {LEARNT_KEY}\n")
    root = inventory.render(cluster, tmp_path / "inventories")
    known = (root / "ssh" / "known_hosts").read_text()
    assert known == (f"10.0.0.3 {LEARNT_KEY}\n10.0.0.2 {LEARNT_KEY}\n10.0.0.*,!10.0.0.1 {LEARNT_KEY}\n"
                     f"10.0.0.1 {NODE_KEY}\n[10.0.0.2]:2222 {OTHER_KEY}\n")
    assert stat.S_IMODE((root / "ssh" / "known_hosts").stat().st_mode) == 0o600
    inventory.render(cluster, tmp_path / "inventories")
    assert (root / "ssh" / "known_hosts").read_text() == known  # rendering again changes nothing
    # OpenSSH's own lookup: each pinned name finds its pinned key and nothing else; node3 keeps its recorded key.
    for name, key in (("10.0.0.1", NODE_KEY), ("[10.0.0.2]:2222", OTHER_KEY), ("10.0.0.3", LEARNT_KEY)):
        found = subprocess.run(["ssh-keygen", "-F", name, "-f", str(root / "ssh" / "known_hosts")],
                               capture_output=True, text=True).stdout
        assert {line.split(None, 1)[1] for line in found.splitlines() if not line.startswith("#")} == {key}, name
    hosts = inventory.read(root).hosts
    assert hosts["node1"]["hvd_host_keys"] == [NODE_KEY] and hosts["node2"]["hvd_host_keys"] == [OTHER_KEY]
    assert "hvd_host_keys" not in hosts["node3"]
    assert inventory.pinned_hosts(cluster) == ["node1", "node2"]
    # What Ansible makes of the connection arguments, per node.
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), "all", "-i", str(root), "-m", "ansible.builtin.debug",
         "-a", "msg={{ ansible_ssh_common_args }}"], capture_output=True, text=True, check=True,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
             "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"})
    blocks = re.split(r"^(?=\S+ \| )", proc.stdout, flags=re.M)
    shown = {b.split(" | ")[0]: re.search(r"StrictHostKeyChecking=([\w-]+)", b).group(1) for b in blocks if " | " in b}
    assert shown == {"node1": "yes", "node2": "yes", "node3": "accept-new"}


def test_trusted_on_first_use_names_each_node_a_run_trusted_with_the_host_key_line_that_pins_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bastion or not: the nodes whose key a run recorded on first contact are named, each with the ``host_key:`` line
    to write under it in hosts.yaml; a node known before the run, pinned, or never reached is not."""
    cluster = _pinned_site(tmp_path, monkeypatch)
    root = inventory.render(cluster, tmp_path / "inventories")
    before = inventory.first_use_hosts(root)
    assert before == ["node3"]
    with (root / "ssh" / "known_hosts").open("a") as known:  # what ssh's accept-new does during the run
        known.write(f"10.0.0.3 {LEARNT_KEY}\n")
    lines = inventory.trusted_on_first_use(root, before)
    assert lines[0].startswith("trusted on first use (no pinned host key): node3: ") and "hosts.yaml" in lines[0]
    assert lines[1:] == [f"  node3: host_key: {LEARNT_KEY}"]
    assert inventory.trusted_on_first_use(root, []) == []  # known before the run: not trusted by this one
    assert inventory.first_use_hosts(root) == []
    jump = spec.JumpSpec("bastion.example.org", 22, "ops", None, NODE_KEY)
    behind = dataclasses.replace(cluster, ssh=dataclasses.replace(cluster.ssh, proxy_jump=jump))
    unreached = dataclasses.replace(behind, hosts=(*behind.hosts, dataclasses.replace(
        behind.hosts[2], name="node4", address="10.0.0.4")))
    root = inventory.render(unreached, tmp_path / "inventories")
    assert inventory.first_use_hosts(root) == ["node4"]
    assert inventory.trusted_on_first_use(root, ["node4"]) == []  # never reached: not trusted either


def _fake_sshd(host_key_file: Path) -> int:
    """A local SSH server (paramiko) that shows ``host_key_file``'s key and refuses every login: enough for a client to
    check the host key and then fail to authenticate. Returns its port."""
    import socket
    import threading

    paramiko = pytest.importorskip("paramiko")
    key = paramiko.Ed25519Key(filename=str(host_key_file))

    class Refuse(paramiko.ServerInterface):
        def get_allowed_auths(self, username: str) -> str:
            return "publickey"

        def check_auth_publickey(self, username: str, key: object) -> int:
            return paramiko.AUTH_FAILED

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    def serve() -> None:
        while True:
            conn, _ = listener.accept()
            transport = paramiko.Transport(conn)
            transport.add_server_key(key)
            try:
                transport.start_server(server=Refuse())
            except (paramiko.SSHException, EOFError, OSError):
                transport.close()

    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1]


def test_ansible_refuses_a_pinned_node_showing_another_key_and_trusts_an_unpinned_one_on_first_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real ssh, as Ansible runs it from the rendered inventory, against local SSH servers: the node whose pin is its
    key gets past the host key (then fails to log in: these servers let nobody in); the node showing a key other than
    its pin is refused before anything else, named; the unpinned node's key is recorded on first contact."""
    from hvdcluster.progress import Tracker

    if shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        pytest.skip("no OpenSSH client here")
    monkeypatch.chdir(tmp_path)
    keys = {}
    for name in ("pinned", "other", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", name], check=True)
        keys[name] = " ".join((tmp_path / f"{name}.pub").read_text().split()[:2])
    good, impostor, fresh = (_fake_sshd(tmp_path / "pinned"), _fake_sshd(tmp_path / "other"),
                             _fake_sshd(tmp_path / "other"))
    (tmp_path / "hosts.yaml").write_text(
        "cluster: lab\nssh: {user: ops, identity: client}\nhosts:\n"
        f"  - {{name: good, address: 127.0.0.1, port: {good}, fabric_address: 10.9.0.1, "
        f"host_key: '{keys['pinned']}'}}\n"
        f"  - {{name: impostor, address: 127.0.0.1, port: {impostor}, fabric_address: 10.9.0.2, "
        f"host_key: '{keys['pinned']}'}}\n"
        f"  - {{name: fresh, address: 127.0.0.1, port: {fresh}, fabric_address: 10.9.0.3}}\n")
    cluster = spec.load("hosts.yaml")
    root = inventory.render(cluster, tmp_path / "inventories")
    assert inventory.first_use_hosts(root) == ["fresh"]
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), "all", "-i", str(root), "-m", "ansible.builtin.ping"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
             "ANSIBLE_CALLBACK_RESULT_FORMAT": "json", "ANSIBLE_HOST_KEY_CHECKING": "True",
             "ANSIBLE_SSH_CONTROL_PATH_DIR": str(tmp_path / "cp"), "ANSIBLE_TIMEOUT": "20"})
    blocks = {b.split(" | ")[0]: b for b in re.split(r"^(?=\S+ \| )", proc.stdout, flags=re.M) if " | " in b}
    assert "UNREACHABLE" in blocks["good"] and "Permission denied" in blocks["good"], blocks["good"]
    assert "Host key verification failed" in blocks["impostor"], blocks["impostor"]
    assert "Permission denied" in blocks["fresh"], blocks["fresh"]
    def recorded(port: int) -> set[str]:  # what ssh's own lookup finds (it may have hashed what it recorded)
        found = subprocess.run(["ssh-keygen", "-F", f"[127.0.0.1]:{port}", "-f", str(root / "ssh" / "known_hosts")],
                               capture_output=True, text=True).stdout
        return {line.split(None, 1)[1] for line in found.splitlines() if not line.startswith("#")}

    assert recorded(fresh) == {keys["other"]}  # recorded on first contact (accept-new)
    assert recorded(good) == recorded(impostor) == {keys["pinned"]}  # the impostor's key was never learnt
    assert inventory.trusted_on_first_use(root, ["fresh"])[0].startswith(
        "trusted on first use (no pinned host key): fresh: ")
    # The summary names the node and says its pin refused the key.
    message = json.JSONDecoder().raw_decode(blocks["impostor"].split("=>", 1)[1].strip())[0]["msg"]
    tracker = Tracker.for_hosts(["good", "impostor", "fresh"], pinned=inventory.pinned_hosts(cluster))
    tracker.handle({"event": "runner_on_unreachable", "event_data": {
        "host": "impostor", "role": "hvd_preflight", "task": "Look", "res": {"msg": message, "unreachable": True}}})
    line = tracker.failures[0].line()
    assert line.startswith("impostor: unreachable: hvd_preflight: Look: host key is not the one hosts.yaml pins"), line


def test_plan_probe_renders_the_pins_into_the_inventorys_known_hosts_and_keeps_what_was_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`plan --probe` reaches the nodes through a connection-only inventory in a temporary folder whose ssh/ is the
    inventory's own: the pins are there before the read, the keys recorded by earlier runs are kept."""
    from hvdcluster import nodestate, probe

    cluster = _pinned_site(tmp_path, monkeypatch)
    inventory_dir = tmp_path / "inventories" / "lab"
    (inventory_dir / "ssh").mkdir(parents=True)
    (inventory_dir / "ssh" / "known_hosts").write_text(f"10.0.0.3 {LEARNT_KEY}\n")
    seen: dict[str, str] = {}

    def read(root: Path, **_kwargs: object) -> nodestate.Reading:
        seen["known_hosts"] = (root / "ssh" / "known_hosts").read_text()
        return nodestate.Reading()

    monkeypatch.setattr(nodestate, "read", read)
    probe.read_looks(cluster, inventory_dir)
    expected = f"10.0.0.3 {LEARNT_KEY}\n10.0.0.1 {NODE_KEY}\n[10.0.0.2]:2222 {OTHER_KEY}\n"
    assert seen["known_hosts"] == expected
    assert (inventory_dir / "ssh" / "known_hosts").read_text() == expected


def test_plan_probe_refuses_a_pinned_node_showing_another_key_by_name(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from hvdcluster import nodestate, probe

    cluster = _pinned_site(tmp_path, monkeypatch)
    why = "unreachable: @@@ WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED! @@@ ... Host key verification failed."
    reading = nodestate.Reading(looks={"node1": {}, "node3": {}}, unreachable={"node2": why})
    with pytest.raises(HvdError, match=r"^node2 \(10\.0\.0\.2:2222\): host key is not the one hosts\.yaml pins"):
        probe.probe(cluster, tmp_path / "inv", read=lambda c, d: reading)
    reading = nodestate.Reading(looks={"node1": {}, "node2": {}}, unreachable={"node3": why})
    with pytest.raises(HvdError, match=r"^node3 \(10\.0\.0\.3:22\): host key changed since it was pinned in .* -R "
                                       r"10\.0\.0\.3\)$"):
        probe.probe(cluster, tmp_path / "inv", read=lambda c, d: reading)
