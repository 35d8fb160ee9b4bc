"""Nodes reachable only through a bastion (hosts.yaml `ssh.proxy_jump`).

Two nodes on a Docker network created `--internal` (no route out, no published port: the controller cannot reach
them directly) and a bastion container on that network and on a published one. `plan --probe`, the pre-flight and
`check` reach the nodes through the bastion, whose host key is pinned from hosts.yaml; a bastion presenting another
key is refused, naming it.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.conftest import Cli
from tests.lab.images import IMAGE, LABEL, docker

pytestmark = pytest.mark.containers

NAME = "bj"
INTERNAL = f"hvdc-{NAME}-internal"
OUTSIDE = f"hvdc-{NAME}"
BASTION = f"hvdc-{NAME}-bastion"
NODES = [f"hvdc-{NAME}-node{i}" for i in (1, 2)]


def down() -> None:
    ids = docker("ps", "-aq", "--filter", f"label={LABEL}={NAME}").split()
    if ids:
        docker("rm", "-f", *ids)
    for network in (INTERNAL, OUTSIDE):
        docker("network", "rm", network, check=False)


def wait_for_sshd(container: str) -> None:
    for _ in range(200):
        probe = subprocess.run(["docker", "exec", container, "sh", "-c",
                                "test -s /etc/ssh/ssh_host_ed25519_key.pub && pgrep -x sshd"], capture_output=True)
        if probe.returncode == 0:
            return
        subprocess.run(["sleep", "0.3"], check=True)
    raise RuntimeError(f"{container}: sshd did not start")


@pytest.fixture(scope="module")
def site(node_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    down()
    work = tmp_path_factory.mktemp(NAME)
    key = work / "controller_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    pub = key.with_suffix(".pub").read_text().strip()
    docker("network", "create", "--label", f"{LABEL}={NAME}", "--internal", INTERNAL)
    docker("network", "create", "--label", f"{LABEL}={NAME}", OUTSIDE)
    for node in NODES:
        docker("run", "-d", "--name", node, "--hostname", node.rsplit("-", 1)[1], "--label", f"{LABEL}={NAME}",
               "--network", INTERNAL, "--shm-size", "512m", "-e", f"SSH_AUTHORIZED_KEY={pub}", IMAGE)
    docker("run", "-d", "--name", BASTION, "--hostname", "bastion", "--label", f"{LABEL}={NAME}",
           "--network", OUTSIDE, "-p", "127.0.0.1::22", "-e", f"SSH_AUTHORIZED_KEY={pub}", IMAGE)
    docker("network", "connect", INTERNAL, BASTION)
    for container in [BASTION, *NODES]:
        wait_for_sshd(container)
    port = int(docker("port", BASTION, "22/tcp").splitlines()[0].rsplit(":", 1)[1])
    host_key = " ".join(docker("exec", BASTION, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").split()[:2])
    hosts = [f"  - {{name: node{i}, address: {node}}}" for i, node in enumerate(NODES, 1)]
    (work / "hosts.yaml").write_text("\n".join([
        f"cluster: {NAME}",
        "ssh:",
        f"  identity: {key.name}",
        f"  proxy_jump: {{host: 127.0.0.1, port: {port}, host_key: '{host_key}'}}",
        "hosts:", *hosts, ""]))
    yield work
    down()


def test_the_nodes_cannot_be_reached_without_the_bastion(site: Path) -> None:
    inspect = json.loads(docker("network", "inspect", INTERNAL))[0]
    assert inspect["Internal"] is True
    for node in NODES:
        assert docker("port", node, check=False).strip() == ""  # nothing published


def test_plan_probe_reads_the_nodes_through_the_bastion(installed: Path, site: Path) -> None:
    proc = Cli(installed, site)("plan", "hosts.yaml", "--probe", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert [(n["host"], n["os_id"], n["os_version"]) for n in doc["nodes"]] == [("node1", "debian", "12"),
                                                                                  ("node2", "debian", "12")]
    known = (site / "inventories" / NAME / "ssh" / "known_hosts").read_text()
    keys = {line.split()[2] for line in known.splitlines() if line.strip()}
    nodes = {docker("exec", node, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").split()[1] for node in NODES}
    bastion = docker("exec", BASTION, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").split()[1]
    assert nodes <= keys  # the nodes' own keys, learnt through the bastion
    assert bastion not in keys  # the bastion's key is the one hosts.yaml pins, never learnt


def test_preflight_and_check_go_through_the_bastion(installed: Path, site: Path) -> None:
    cli = Cli(installed, site)
    preflight = cli("preflight", "hosts.yaml", "--json")
    doc = json.loads(preflight.stdout)
    assert all(h["unreachable"] == 0 for h in doc["hosts"].values()), preflight.stderr[-3000:]
    assert set(doc["hosts"]) == {"node1", "node2"}
    check = cli("check", "hosts.yaml", "--json")
    assert check.returncode in (0, 1), check.stderr[-3000:]
    report = json.loads(check.stdout)
    assert report["unreachable"] == [] and report["exit"] == check.returncode, report


def test_a_bastion_with_another_host_key_is_refused_by_name(installed: Path, site: Path) -> None:
    hosts = (site / "hosts.yaml").read_text()
    other = " ".join((site / "controller_key.pub").read_text().split()[:2])  # a valid key, not the bastion's
    start = hosts.index("host_key: '") + len("host_key: '")
    end = hosts.index("'", start)
    (site / "other.yaml").write_text(hosts[:start] + other + hosts[end:])
    try:
        # A fresh ControlPath folder: the SSH master connections of the runs above (ControlPersist) were opened
        # through the real bastion and would be reused without meeting it again.
        proc = Cli(installed, site)("plan", "other.yaml", "--probe",
                                    env={"ANSIBLE_SSH_CONTROL_PATH_DIR": str(site / "cp-fresh")})
    finally:
        (site / "other.yaml").unlink()
    assert proc.returncode != 0
    assert "bastion" in proc.stderr and "host_key" in proc.stderr, proc.stderr[-2000:]


# Pinned node keys. Each case has a cluster name (and so an inventory) of its own: a wrong pin written into
# ssh/known_hosts must never reach the inventory the tests above share.


def _node_key(node: str) -> str:
    return " ".join(docker("exec", node, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").split()[:2])


def _hosts_file(site: Path, cluster: str, name: str, node1_key: str | None = None, known_hosts: str | None = None) -> str:
    """hosts.yaml of the site as another cluster: node1 pinned by host_key, node2 through ssh.known_hosts, if given."""
    text = (site / "hosts.yaml").read_text().replace(f"cluster: {NAME}\n", f"cluster: {cluster}\n")
    if node1_key:
        text = text.replace(f"address: {NODES[0]}}}", f"address: {NODES[0]}, host_key: '{node1_key}'}}")
    if known_hosts:
        text = text.replace("ssh:\n", f"ssh:\n  known_hosts: {known_hosts}\n")
    (site / name).write_text(text)
    return name


def test_pinned_node_keys_are_checked_from_the_first_contact_through_the_bastion(installed: Path, site: Path) -> None:
    """node1 pinned by hosts[].host_key, node2 by a hashed known_hosts file (ssh-keygen -H): `plan --probe` reads both
    through the bastion with nothing learnt, and the inventory's known_hosts holds exactly the pins."""
    from hvdcluster import inventory, spec

    (site / "pins").write_text(f"{NODES[1]} {_node_key(NODES[1])} node2\n")
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(site / "pins")], check=True, capture_output=True)
    name = _hosts_file(site, f"{NAME}pin", "pinned.yaml", _node_key(NODES[0]), "pins")
    cluster = spec.load(site / name)
    assert [h.host_keys for h in cluster.hosts] == [(_node_key(NODES[0]),), (_node_key(NODES[1]),)]
    root = site / "inventories" / f"{NAME}pin"
    assert inventory.first_use_hosts(root) == []
    proc = Cli(installed, site)("plan", name, "--probe", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [n["host"] for n in json.loads(proc.stdout)["nodes"]] == ["node1", "node2"]
    assert (root / "ssh" / "known_hosts").read_text() == (f"{NODES[0]} {_node_key(NODES[0])}\n"
                                                          f"{NODES[1]} {_node_key(NODES[1])}\n")


def test_a_pinned_node_showing_another_key_is_refused_by_name(installed: Path, site: Path) -> None:
    other = " ".join((site / "controller_key.pub").read_text().split()[:2])  # a valid key, not node2's
    (site / "wrong-pins").write_text(f"{NODES[1]} {other}\n")
    name = _hosts_file(site, f"{NAME}wrong", "wrong.yaml", _node_key(NODES[0]), "wrong-pins")
    # No fresh ControlPath folder: the SSH masters the runs above opened to node2 (ControlPersist) belong to another
    # inventory and are never used by this one (inventory.CONTROL_PATH_DIR), so node2 meets this pin.
    proc = Cli(installed, site)("plan", name, "--probe")
    assert proc.returncode != 0
    assert "node2" in proc.stderr and "host key is not the one hosts.yaml pins" in proc.stderr, proc.stderr[-2000:]
    known = (site / "inventories" / f"{NAME}wrong" / "ssh" / "known_hosts").read_text()
    assert _node_key(NODES[1]) not in known  # node2's real key was never learnt


def test_nodes_reached_through_the_bastion_without_pins_are_named_as_trusted_on_first_use(installed: Path,
                                                                                         site: Path) -> None:
    """What every command that learns a node's key prints (here `plan --probe`, through the bastion): the nodes whose
    key that run accepted on first use, each with the `host_key:` line that pins it in hosts.yaml, the key each node
    really has."""
    from hvdcluster import inventory

    name = _hosts_file(site, f"{NAME}tofu", "tofu.yaml")
    proc = Cli(installed, site)("plan", name, "--probe")  # the masters of the runs above are another inventory's
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "hvdcluster: trusted on first use (no pinned host key): node1, node2: " in proc.stderr, proc.stderr[-3000:]
    for node, address in (("node1", NODES[0]), ("node2", NODES[1])):
        assert f"  {node}: host_key: {_node_key(address)}\n" in proc.stderr, proc.stderr[-3000:]
    assert inventory.first_use_hosts(site / "inventories" / f"{NAME}tofu") == []  # the next run trusts nothing new
