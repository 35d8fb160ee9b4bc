"""Pre-flight over real SSH: each check that a container can provoke is provoked on one node of a fresh
2-node cluster; the report must name that node, that check and the fix, and no node may have been touched
(the run stops before hvd_base). Checks that need a real kernel or GPU (headers are the exception: a node
without them is as real in a container) are covered by the rule tests in tests/unit/plugins/filter/test_hvd_preflight.py."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cluster.conftest import Cli
from tests.lab.cluster import Lab

pytestmark = pytest.mark.containers


@pytest.fixture()
def make_lab(node_image: str, tmp_path: Path) -> Iterator[Callable[..., Lab]]:
    labs: list[Lab] = []

    def make(**options) -> Lab:
        lab = Lab("pf", 2, tmp_path / "lab", stack={}, **options)
        labs.append(lab)
        lab.up()
        return lab

    yield make
    for lab in labs:
        lab.down()


def untouched(lab: Lab) -> None:
    """Nothing was installed or written by a role on any node."""
    for i in (1, 2):
        probe = lab.exec(i, "sh", "-c", "ls -d /etc/ansible/facts.d /opt/hvd /etc/hvdcluster* 2>/dev/null; "
                         "grep -l hvdcluster /etc/hosts 2>/dev/null; true")
        assert probe.stdout.strip() == "", f"node{i} was touched: {probe.stdout}"


def up_findings(cli: Cli) -> tuple[int, dict, str]:
    rc, doc, err = cli.up_json()
    return rc, doc.get("preflight") or {}, err


def assert_finding(findings: dict, host: str, check: str, fix_words: str) -> dict:
    got = [f for f in findings.get(host, []) if f["check"] == check]
    assert got, f"no {check} finding for {host}: {json.dumps(findings, indent=1)}"
    assert got[0]["severity"] == "fail"
    assert fix_words in got[0]["fix"], got[0]
    assert got[0]["found"] and got[0]["expected"]
    return got[0]


def others_clean(findings: dict, host: str, check: str) -> None:
    for name, items in findings.items():
        if name != host:
            assert check not in {f["check"] for f in items}, (name, items)


def test_python3_missing_is_named_with_its_fix_and_nothing_is_touched(make_lab, installed: Path) -> None:
    """The pre-flight's first command on a node: python3 on the PATH (every module needs it). Taken away on node2,
    `up` fails there with the command's own words (the node and the fix), node1 is not failed for it, and no node
    is touched."""
    lab = make_lab()
    assert lab.exec(2, "mv", "/usr/bin/python3", "/usr/bin/python3.away").returncode == 0
    rc, doc, err = Cli(installed, lab.workdir).up_json()
    assert rc == 1, err[-3000:]
    failed = {f["host"]: f for f in doc["failures"]}
    assert set(failed) == {"node2"}, doc["failures"]
    assert "python3 not found on the PATH of node2: install python3 (apt-get install python3)" in \
        failed["node2"]["message"], failed
    untouched(lab)


def test_duplicate_hostname(make_lab, installed: Path) -> None:
    lab = make_lab(hostnames={2: "node1"})
    rc, findings, err = up_findings(Cli(installed, lab.workdir))
    assert rc == 1
    finding = assert_finding(findings, "node2", "hostname-unique", "own hostname")
    assert "node1" in finding["found"]
    untouched(lab)


def test_invalid_hostname(make_lab, installed: Path) -> None:
    lab = make_lab(hostnames={2: "node_2"})
    rc, findings, err = up_findings(Cli(installed, lab.workdir))
    assert rc == 1
    finding = assert_finding(findings, "node2", "hostname-valid", "hostnamectl set-hostname")
    assert "node_2" in finding["found"]
    others_clean(findings, "node2", "hostname-valid")
    untouched(lab)


def test_read_only_tmp(make_lab, installed: Path) -> None:
    lab = make_lab(docker_args={2: ["--tmpfs", "/tmp:ro"]})
    rc, findings, err = up_findings(Cli(installed, lab.workdir))
    assert rc == 1
    finding = assert_finding(findings, "node2", "tmp-writable", "remount")
    assert "Read-only" in finding["found"]
    others_clean(findings, "node2", "tmp-writable")
    untouched(lab)


def test_tiny_dev_shm_through_the_preflight_command(make_lab, installed: Path) -> None:
    lab = make_lab(shm_sizes={2: "32m"})
    cli = Cli(installed, lab.workdir)
    proc = cli("preflight", "hosts.yaml")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = proc.stdout.split("Pre-flight findings:", 1)[-1]
    lines = [line for line in report.splitlines() if "shm-size" in line]
    assert len(lines) == 1, proc.stdout
    assert lines[0].split()[:3] == ["FAIL", "node2", "shm-size:"], lines
    assert "32 MiB" in lines[0] and "--shm-size" in lines[0], lines
    untouched(lab)


def test_unreachable_peer_port(make_lab, installed: Path) -> None:
    lab = make_lab(fabric_ports={2: 2222})  # nothing listens there: the other node cannot reach node2's SSH
    rc, findings, err = up_findings(Cli(installed, lab.workdir))
    assert rc == 1
    finding = assert_finding(findings, "node2", "peer-reachable", "firewall")
    assert "node1" in finding["found"] and ":2222" in finding["found"]
    others_clean(findings, "node2", "peer-reachable")
    untouched(lab)


def test_missing_kernel_headers_when_a_module_is_built(make_lab, installed: Path) -> None:
    """The driver's kernel module is planned (as on a GPU host); node1 has the running kernel's headers
    (their build folder, which is what DKMS looks for), node2 has none and its apt offers none."""
    lab = make_lab()
    cli = Cli(installed, lab.workdir)
    assert cli("inventory", "hosts.yaml").returncode == 0
    extra = lab.workdir / "inventories" / "pf" / "group_vars" / "all" / "zz-module.yml"
    extra.write_text("---\nhvd_preflight_kernel_module: true\n")
    assert lab.exec(1, "sh", "-c", "mkdir -p /lib/modules/$(uname -r)/build").returncode == 0
    try:
        rc, findings, err = up_findings(cli)
    finally:
        lab.exec(1, "sh", "-c", "rm -rf /lib/modules")
    assert rc == 1
    finding = assert_finding(findings, "node2", "kernel-headers", "linux-headers-")
    assert "none installable" in finding["found"]
    others_clean(findings, "node2", "kernel-headers")
    untouched(lab)


def test_mpi_missing_on_the_non_interactive_path(make_lab, installed: Path) -> None:
    """An MPI that only login shells find (profile.d): mpirun works by hand, orted is not found over SSH.
    The stand-in mpirun is a script: the check is about PATH, not about MPI itself."""
    lab = make_lab()
    setup = ("mkdir -p /opt/ompi/bin && printf '#!/bin/sh\\necho \"mpirun (Open MPI) 4.1.6\"\\n' "
             "> /opt/ompi/bin/mpirun && chmod +x /opt/ompi/bin/mpirun && "
             "echo 'export PATH=/opt/ompi/bin:$PATH' > /etc/profile.d/ompi.sh")
    assert lab.exec(2, "sh", "-c", setup).returncode == 0
    rc, findings, err = up_findings(Cli(installed, lab.workdir))
    assert rc == 1
    finding = assert_finding(findings, "node2", "mpi-path", "non-interactive")
    assert "/opt/ompi/bin/mpirun" in finding["found"]
    others_clean(findings, "node2", "mpi-path")
    untouched(lab)


def test_plan_probe_resolves_for_the_nodes_as_they_are(make_lab, installed: Path) -> None:
    """`plan --probe` reads the nodes with the node-state module (keys pinned like the playbooks pin them) and
    resolves the stack for their python; a second probe goes through the pinned keys; nothing is written."""
    lab = make_lab()
    cli = Cli(installed, lab.workdir)
    proc = cli("plan", "hosts.yaml", "--probe", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [n["host"] for n in doc["nodes"]] == ["node1", "node2"]
    python = lab.exec(1, "python3", "-c", "import platform; print(platform.python_version())").stdout.strip()
    for node in doc["nodes"]:
        assert (node["os_id"], node["os_version"], node["python"]) == ("debian", "12", python)
        assert node["kernel"] and node["gpus"] == []
    assert doc["stack"]["python"]["version"] == python.rsplit(".", 1)[0]
    assert any(f"the node's python {python}" in note for note in doc["notes"])
    known = (lab.workdir / "inventories" / "pf" / "ssh" / "known_hosts").read_text()
    assert known.count("ssh-ed25519") >= 2
    again = cli("plan", "hosts.yaml", "--probe")
    assert again.returncode == 0 and again.stdout.count("probed node") == 2, again.stdout + again.stderr
    untouched(lab)
