"""Artifacts travel node to node (hvd_fanout): the controller sends each at most once, a bad copy is fetched
again from a healthy peer, and a node added later gets everything from its peers.

Four nodes, the login user is not root. hosts.yaml first lists three of them; node3's `scp` flips a byte of the
first file it receives (a wrapper early on its PATH, as a flaky link or disk would), so its first copy fails its
sha256. First an env is built with an empty controller cache (the layers up to the env only: no Horovod build) on
node2, not the first node (the operator names it, hvd_pyenv_builder): it keeps the archive and passes it on, so the
controller sends none of it, and every node ends with a byte-identical env. Then the whole stack, whose env and wheel the
controller cache holds: the controller sends each once. Then node4 joins the cluster.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from hvdcluster.drift import PER_NODE_ITEMS
from tests.cluster.conftest import SUDO_USER, Cli, share_the_cores
from tests.lab.cluster import Lab

pytestmark = pytest.mark.containers

# In the login user's home, not a fixed /var/tmp path another local user could make first.
FLIP_MARK = "$HOME/.hvd-test-flipped"
# Runs the real scp, then once flips a byte in the middle of what it wrote (its last argument).
FLIPPING_SCP = f"""#!/bin/sh
/usr/bin/scp "$@"; rc=$?
for last; do :; done
if [ "$rc" -eq 0 ] && [ ! -e "{FLIP_MARK}" ] && [ -f "$last" ]; then
    : > "{FLIP_MARK}"
    python3 - "$last" <<'PY'
import os, sys
with open(sys.argv[1], "r+b") as handle:
    middle = os.fstat(handle.fileno()).st_size // 2
    handle.seek(middle)
    byte = handle.read(1)[0]
    handle.seek(middle)
    handle.write(bytes([byte ^ 0xFF]))
PY
fi
exit $rc
"""


@pytest.fixture(scope="module")
def lab4(packaged_image: str, tmp_path_factory: pytest.TempPathFactory) -> Lab:
    lab = Lab("fo4", 4, tmp_path_factory.mktemp("fo4"), user=SUDO_USER, image=packaged_image)
    lab.up()
    share_the_cores(lab)
    lab.nodes = 3  # hosts.yaml names node1-3 first; node4 joins later
    lab.write_hosts_yaml()
    yield lab
    lab.nodes = 4
    lab.down()


def env_items(workdir: Path, node: str) -> dict:
    state = json.loads((workdir / "inventories" / "fo4" / "state" / f"{node}.json").read_text())["state"]
    # horovod.checked holds the node's own RECORD stamp (its install time): per node by design.
    return {k: v for k, v in state.items() if k.startswith(("env.", "horovod.")) and k not in PER_NODE_ITEMS}


def copies(doc: dict, artifact: str) -> list[dict]:
    return [c for c in doc["transfers"]["copies"] if c["artifact"] == artifact]


def test_a_freshly_built_env_goes_from_its_builder_to_its_peers_and_a_bad_copy_comes_again(installed: Path,
                                                                                           lab4: Lab) -> None:
    script = f"cat > /usr/local/bin/scp <<'EOF'\n{FLIPPING_SCP}EOF\nchmod 0755 /usr/local/bin/scp"
    assert lab4.exec(3, "sh", "-c", script).returncode == 0
    default_stack = lab4.stack
    # Another package list (the next test's env differs), and an empty controller cache: one node builds it.
    lab4.stack = {"python": {"packages": [*default_stack["python"]["packages"], "six==1.16.0"]}}
    lab4.write_hosts_yaml()
    cache = lab4.workdir / "empty-cache"
    # The builder is not the first node: the operator names node2 (an inventory file of their own).
    local = lab4.workdir / "inventories" / "fo4" / "group_vars" / "all" / "local.yml"
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_text("hvd_pyenv_builder: node2\n")
    try:
        rc, doc, err = Cli(installed, lab4.workdir).up_json("--tags", "hvd_base,hvd_ssh_mesh,hvd_pyenv",
                                                            env={"HVDCLUSTER_CACHE": str(cache)})
    finally:
        lab4.stack = default_stack
        lab4.write_hosts_yaml()
        local.unlink()
    assert rc == 0, err[-4000:]
    report = doc["transfers"]
    env = copies(doc, "env")
    assert report["controller_bytes"] == 0 and env and all(c["from"] != "controller" for c in env), report
    builders = {c["from"] for c in env} - {c["to"] for c in env}
    assert builders == {"node2"}, report  # node2 built and kept the archive; the others got it from nodes
    assert {c["to"] for c in env if c["ok"]} == {"node1", "node3"}, report
    # Every node holds the byte-identical env: the same digest of every file's path and content.
    digest = "cd /opt/hvd/env && find . -type f ! -name '.hvd-*' -print0 | sort -z | xargs -0 sha256sum | sha256sum"
    digests = {i: lab4.exec(i, "sh", "-c", digest).stdout.split()[0] for i in (1, 2, 3)}
    assert len(set(digests.values())) == 1, digests
    # node3's first copy was bad: named as such, then fetched again from a holder, and used.
    assert lab4.exec(3, "sh", "-c", f'test -e "{FLIP_MARK}"', user=lab4.user).returncode == 0
    bad = [c for c in report["copies"] if not c["ok"]]
    assert [c["to"] for c in bad] == ["node3"] and bad[0]["why"], bad
    again = [c for c in env if c["to"] == "node3" and c["ok"]]
    assert len(again) == 1 and again[0]["from"] != "controller", report
    assert "Artifacts: the controller sent 0 B" in err


def test_the_controller_sends_each_artifact_once(installed: Path, lab4: Lab) -> None:
    cli = Cli(installed, lab4.workdir)
    rc, doc, err = cli.up_json()
    assert rc == 0, err[-4000:]
    report = doc["transfers"]
    for artifact in ("env", "horovod"):
        sent = Counter(c["file"] for c in copies(doc, artifact) if c["from"] == "controller")
        assert all(n <= 1 for n in sent.values()), report
        reached = {c["to"] for c in copies(doc, artifact) if c["ok"]}
        assert {c["to"] for c in copies(doc, artifact)} <= {"node1", "node2", "node3"}
        assert reached, report
    assert report["peer_bytes"] > 0 and report["controller_bytes"] < report["peer_bytes"], report
    assert "Artifacts: the controller sent" in err
    # The archive of the first test's env is gone from every node (only the current one is kept).
    for i in (1, 2, 3):
        kept = lab4.exec(i, "sh", "-c", "ls ~/.cache/hvdcluster/artifacts", user=lab4.user).stdout.split()
        assert len([name for name in kept if name.startswith("env-")]) == 1, (i, kept)
    # Every node holds the byte-identical env and Horovod, and check finds them in sync.
    first = env_items(lab4.workdir, "node1")
    assert first["env.files"] == "ok" and first["horovod.version"] != "absent"
    for node in ("node2", "node3"):
        assert env_items(lab4.workdir, node) == first, node
    checked = cli("check", "hosts.yaml")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_node_added_later_gets_every_artifact_from_a_peer(installed: Path, lab4: Lab) -> None:
    lab4.nodes = 4
    lab4.write_hosts_yaml()
    cli = Cli(installed, lab4.workdir)
    rc, doc, err = cli.up_json()
    assert rc == 0, err[-4000:]
    report = doc["transfers"]
    assert {c["artifact"] for c in report["copies"]} == {"env", "horovod"}, report
    assert all(c["to"] == "node4" and c["from"] in ("node1", "node2", "node3") and c["ok"]
               for c in report["copies"]), report
    assert report["controller_bytes"] == 0 and report["peer_bytes"] > 0
    assert env_items(lab4.workdir, "node4") == env_items(lab4.workdir, "node1")


def test_a_node_whose_kept_copy_rotted_gets_a_good_one_from_a_peer(installed: Path, lab4: Lab) -> None:
    """node2's env is damaged (a file deleted) and its kept archive rotted on disk (a byte flipped): `up` finds the
    archive bad before using it, removes it, pulls one from a peer and installs the env again."""
    home = lab4.exec(2, "sh", "-c", "echo ~", user=lab4.user).stdout.strip()
    archive = lab4.exec(2, "sh", "-c", f"ls {home}/.cache/hvdcluster/artifacts/env-*.tar.zst").stdout.split()
    assert len(archive) == 1
    flip = ("import os, sys\nwith open(sys.argv[1], 'r+b') as f:\n    f.seek(os.fstat(f.fileno()).st_size // 3)\n"
            "    b = f.read(1)[0]\n    f.seek(-1, 1)\n    f.write(bytes([b ^ 0xFF]))\n")
    assert lab4.exec(2, "python3", "-c", flip, archive[0], user=lab4.user).returncode == 0
    victim = lab4.exec(2, "sh", "-c", "ls /opt/hvd/env/lib/python3*/site-packages/cloudpickle/__init__.py")
    assert lab4.exec(2, "rm", victim.stdout.strip()).returncode == 0
    rc, doc, err = Cli(installed, lab4.workdir).up_json()
    assert rc == 0, err[-4000:]
    env = copies(doc, "env")
    assert [(c["to"], c["ok"]) for c in env] == [("node2", True)] and env[0]["from"] != "controller", doc["transfers"]
    assert env_items(lab4.workdir, "node2") == env_items(lab4.workdir, "node1")
