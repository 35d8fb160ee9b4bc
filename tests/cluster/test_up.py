"""`hvdcluster up` over real SSH against three sshd containers.

The tests share one cluster and run in file order: converge, converge again, check mode, a changed host
key, and a stopped node (the last two restore what they change).
"""

from __future__ import annotations

import itertools
import subprocess
import time

import pytest

from tests.cluster.conftest import assert_no_trap_fired
from tests.lab import Lab

pytestmark = pytest.mark.containers


def ssh_from(lab: Lab, src: int, target: str) -> subprocess.CompletedProcess[str]:
    """As the cluster's login user on node `src` (not root: the lab's user has sudo)."""
    return lab.exec(src, "ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", target, "hostname",
                    user=lab.user)


def test_wheel_install_runs_from_outside_the_checkout_with_its_own_ansible_content(hvd) -> None:
    proc = subprocess.run([str(hvd.bin / "python"), "-c", "from hvdcluster import paths; print(paths.ansible_home())"],
                          cwd=hvd.cwd, capture_output=True, text=True, check=True)
    home = proc.stdout.strip()
    assert home.startswith(str(hvd.bin.parent)) and home.endswith("hvdcluster/_ansible")


def test_up_converges_every_node_and_every_node_reaches_every_other(hvd, lab3: Lab) -> None:
    rc, doc, err = hvd.up_json()
    assert rc == 0, err[-4000:]
    assert doc["ok"] and set(doc["hosts"]) == {"node1", "node2", "node3"}
    assert all(h["failed"] == 0 and h["unreachable"] == 0 for h in doc["hosts"].values())
    assert "[3/3] converge" in err and "HOST" in err
    for src, dst in itertools.permutations(range(1, 4), 2):
        by_name = ssh_from(lab3, src, f"node{dst}")
        assert by_name.returncode == 0 and by_name.stdout.strip() == f"node{dst}", by_name.stderr
        by_fabric = ssh_from(lab3, src, lab3.container(dst))
        assert by_fabric.returncode == 0 and by_fabric.stdout.strip() == f"node{dst}", by_fabric.stderr


def test_no_trap_of_another_local_user_fired_and_our_work_folder_is_private(hvd, lab3: Lab) -> None:
    assert lab3.user != "root" and f"user: {lab3.user}" in lab3.hosts_yaml.read_text()
    assert_no_trap_fired(lab3)


def test_second_up_changes_nothing(hvd) -> None:
    rc, doc, err = hvd.up_json()
    assert rc == 0, err[-4000:]
    assert {name: h["changed"] for name, h in doc["hosts"].items()} == {"node1": 0, "node2": 0, "node3": 0}
    assert all(h["status"] == "up-to-date" for h in doc["hosts"].values())


def test_check_mode_on_a_converged_cluster_changes_nothing(hvd) -> None:
    rc, doc, err = hvd.up_json("--check")
    assert rc == 0, err[-4000:]
    assert all(h["changed"] == 0 for h in doc["hosts"].values())


def test_the_cluster_private_key_stays_out_of_the_logs(hvd, lab3: Lab) -> None:
    inventory = lab3.workdir / "inventories" / "ct3"
    key = (inventory / "ssh" / "id_ed25519").read_text()
    assert oct((inventory / "ssh" / "id_ed25519").stat().st_mode & 0o777) == "0o600"
    body = key.strip().splitlines()[1]
    for path in (inventory / "runs").rglob("*"):
        if path.is_file():
            assert body not in path.read_text(errors="replace"), path
    # ssh/ (the keypair) and runs/ sit in the inventory folder but are never read as inventory sources
    for log in (inventory / "runs" / "artifacts").glob("*/stdout"):
        text = log.read_text(errors="replace")
        assert "as an inventory source" not in text and "OPENSSH" not in text, log


def test_a_changed_host_key_is_refused(hvd, lab3: Lab, tmp_path) -> None:
    swap = ("mkdir -p /root/hostkeys && cp -p /etc/ssh/ssh_host_* /root/hostkeys/ && rm /etc/ssh/ssh_host_* "
            "&& ssh-keygen -A >/dev/null && kill -HUP 1")
    assert lab3.exec(2, "sh", "-c", swap).returncode == 0
    try:
        lab3.wait_for_ssh()
        # A fresh control-socket folder: an SSH connection kept open by the previous run would not
        # perform a new key exchange, so it would never see the new key.
        rc, doc, err = hvd.up_json("--limit", "node2", env={"ANSIBLE_SSH_CONTROL_PATH_DIR": str(tmp_path)})
        assert rc != 0
        assert doc["hosts"]["node2"]["status"] == "unreachable"
        assert doc["failures"][0]["message"].startswith("host key changed since it was pinned")
    finally:
        lab3.exec(2, "sh", "-c", "cp -p /root/hostkeys/* /etc/ssh/ && kill -HUP 1")
        lab3.wait_for_ssh()


def test_a_second_up_on_the_same_inventory_stops_at_once_naming_the_first(hvd, lab3: Lab) -> None:
    lock = lab3.workdir / "inventories" / "ct3" / ".lock"
    first = subprocess.Popen([str(hvd.bin / "hvdcluster"), "up", "hosts.yaml"], cwd=hvd.cwd,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while f'"pid": {first.pid}' not in (lock.read_text() if lock.exists() else ""):
            assert first.poll() is None and time.monotonic() < deadline, "the first up did not take the lock"
            time.sleep(0.1)
        runs = sorted((lab3.workdir / "inventories" / "ct3" / "runs" / "artifacts").iterdir())
        started = time.monotonic()
        second = hvd("up", "hosts.yaml")
        assert second.returncode == 1 and time.monotonic() - started < 30
        assert f"is in use by pid {first.pid}" in second.stderr and "command up" in second.stderr, second.stderr
        # the second run started nothing: no new run folder besides the first's
        after = sorted((lab3.workdir / "inventories" / "ct3" / "runs" / "artifacts").iterdir())
        assert len(after) <= len(runs) + 1
    finally:
        _, err = first.communicate(timeout=900)
    assert first.returncode == 0, err[-4000:]


def test_stopped_node_is_named_unreachable_while_the_others_converge(hvd, lab3: Lab) -> None:
    lab3.stop(3)
    try:
        rc, doc, err = hvd.up_json()
        assert rc != 0
        assert doc["hosts"]["node3"]["status"] == "unreachable"
        assert [doc["hosts"][n]["status"] for n in ("node1", "node2")] == ["up-to-date", "up-to-date"]
        assert "node3: unreachable" in err
    finally:
        lab3.start(3)
