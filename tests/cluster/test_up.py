"""`hvdcluster up` over real SSH against three sshd containers.

The tests share one cluster, converged once by a module fixture before any of them (so any subset runs on its own,
e.g. with -k), then in file order: converge again, check mode, drift and its repair, a changed host key, and a stopped
or lost node (each restores what it changes).
"""

from __future__ import annotations

import getpass
import itertools
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.cluster.conftest import (SUDO_USER, assert_facts_once_and_builders_read_their_cpus, assert_no_trap_fired,
                                    horovod_library_sections, run_events, task_outcomes)
from tests.conftest import BIN, ROOT
from tests.lab.cluster import Lab

pytestmark = pytest.mark.containers


REACH = "Reach every other node by name and fabric address (BatchMode, strict host key checking)"


def reach_targets(log: str) -> dict[str, list[str]]:
    """Each node's reach test targets, as its hvd_run ran them (sh -c SCRIPT reach TARGET...)."""
    return {e["event_data"]["host"]: e["event_data"]["res"]["cmd"][4:] for e in run_events(log)
            if e.get("event") == "runner_on_ok" and e["event_data"].get("task") == REACH}


def ssh_from(lab: Lab, src: int, target: str) -> subprocess.CompletedProcess[str]:
    """As the cluster's login user on node `src` (not root: the lab's user has sudo)."""
    return lab.exec(src, "ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", target, "hostname",
                    user=lab.user)


@pytest.fixture(scope="module", autouse=True)
def first_up(hvd) -> tuple[int, dict, str]:
    """The cluster's first converge (rc, summary, stderr): every test here starts from a converged cluster;
    test_up_converges_every_node_and_every_node_reaches_every_other judges this run."""
    return hvd.up_json()


def test_wheel_install_runs_from_outside_the_checkout_with_its_own_ansible_content(hvd) -> None:
    proc = subprocess.run([str(hvd.bin / "python"), "-c", "from hvdcluster import paths; print(paths.ansible_home())"],
                          cwd=hvd.cwd, capture_output=True, text=True, check=True)
    home = proc.stdout.strip()
    assert home.startswith(str(hvd.bin.parent)) and home.endswith("site-packages/ansible_collections/hvd/cluster")
    versions = subprocess.run([str(hvd.bin / "python"), "-c", "import importlib.metadata as m; from hvdcluster import "
                               "paths; print(m.version('hvdcluster'), paths.collection_version(paths.ansible_home()))"],
                              cwd=hvd.cwd, capture_output=True, text=True, check=True).stdout.split()
    assert versions[0] == versions[1] == yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]


def test_up_converges_every_node_and_every_node_reaches_every_other(first_up, lab3: Lab) -> None:
    rc, doc, err = first_up
    assert rc == 0, err[-4000:]
    assert doc["ok"] and set(doc["hosts"]) == {"node1", "node2", "node3"}
    assert all(h["failed"] == 0 and h["unreachable"] == 0 for h in doc["hosts"].values())
    assert "[3/3] converge" in err and "HOST" in err
    # No node's key is pinned: the first up names each, with the line that pins the key it really has.
    assert "hvdcluster: trusted on first use (no pinned host key): node1, node2, node3: " in err, err[-3000:]
    for i in (1, 2, 3):
        key = " ".join(lab3.exec(i, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[:2])
        assert f"\n  node{i}: host_key: {key}\n" in err, err[-3000:]
    # facts gathered once per node, without the hardware; a builder reads its CPUs (none where the shared controller
    # cache held every build: test_no_wheelhouse's empty cache always builds)
    assert_facts_once_and_builders_read_their_cpus(doc["log"], lab3)
    # a first converge: the post-flight's reach test has every node reach every other, by name and fabric address
    assert {h: sorted(t) for h, t in reach_targets(doc["log"]).items()} == {
        f"node{i}": sorted(x for j in range(1, 4) if j != i for x in (f"node{j}", lab3.container(j))) for i in (1, 2, 3)}
    for src, dst in itertools.permutations(range(1, 4), 2):
        by_name = ssh_from(lab3, src, f"node{dst}")
        assert by_name.returncode == 0 and by_name.stdout.strip() == f"node{dst}", by_name.stderr
        by_fabric = ssh_from(lab3, src, lab3.container(dst))
        assert by_fabric.returncode == 0 and by_fabric.stdout.strip() == f"node{dst}", by_fabric.stderr


def test_no_trap_of_another_local_user_fired_and_our_work_folder_is_private(hvd, lab3: Lab) -> None:
    assert lab3.user != "root" and f"user: {lab3.user}" in lab3.hosts_yaml.read_text()
    assert_no_trap_fired(lab3)


def test_horovod_is_built_without_debug_info_and_every_node_has_the_same_library(first_up, lab3: Lab) -> None:
    """The default build (hvd_horovod_debug_info off): Horovod's RelWithDebInfo flags without -g, so the library
    every node loads has code and no DWARF sections (a few MB, not 65)."""
    assert first_up[0] == 0, first_up[2][-4000:]
    digests = set()
    for i in (1, 2, 3):
        path, sections = horovod_library_sections(lab3, i, "/opt/hvd/env")
        assert {".text", ".dynsym"} <= sections, sections
        assert not {s for s in sections if s.startswith(".debug_")}, (f"node{i}", sorted(sections))
        digests.add(lab3.exec(i, "sha256sum", path).stdout.split()[0])
    assert len(digests) == 1, digests


def test_second_up_changes_nothing(hvd) -> None:
    rc, doc, err = hvd.up_json()
    assert rc == 0, err[-4000:]
    assert {name: h["changed"] for name, h in doc["hosts"].items()} == {"node1": 0, "node2": 0, "node3": 0}
    assert all(h["status"] == "up-to-date" for h in doc["hosts"].values())
    assert doc["fast_path"]["in_sync"] == ["node1", "node2", "node3"]


def test_a_full_up_of_the_cluster_as_last_proven_reaches_around_a_ring(hvd, lab3: Lab) -> None:
    """Nothing changed since the last passing allreduce: `up --full` runs every role and changes nothing, mpirun
    reaches every node, and each node reaches only the next one (a ring: every sshd and every client proven with N
    connections, not N(N-1)), said in the log."""
    rc, doc, err = hvd.up_json("--full")
    assert rc == 0 and all(h["changed"] == 0 for h in doc["hosts"].values()), err[-4000:]
    assert reach_targets(doc["log"]) == {f"node{i}": [f"node{i % 3 + 1}", lab3.container(i % 3 + 1)] for i in (1, 2, 3)}
    tasks = task_outcomes(doc["log"])
    assert tasks["Start one process per node with mpirun and collect the hostnames"] == {"ok"}, tasks
    assert tasks["Say why the allreduces are skipped"] == {"ok"}, tasks
    said = [e["event_data"]["res"]["msg"] for e in run_events(doc["log"]) if e.get("event") == "runner_on_ok"
            and e["event_data"].get("task") == "Say why the allreduces are skipped"]
    assert said and "each node reached the next one only" in said[0], said


def test_the_built_collection_installed_elsewhere_runs_a_playbook_by_its_fqcn_and_changes_nothing(
        hvd, lab3: Lab, tmp_path: Path) -> None:
    """`ansible-galaxy collection build` of the checkout, installed into a folder of its own, is the only hvd.cluster
    Ansible can find (no scan of the import path, where the wheel's and the checkout's copies are): the operator's
    `ansible-playbook hvd.cluster.ssh_mesh -i inventories/<cluster>` runs it against the converged cluster."""
    galaxy = BIN / "ansible-galaxy"
    subprocess.run([str(galaxy), "collection", "build", "--output-path", str(tmp_path / "dist"), str(ROOT)],
                   check=True, capture_output=True, text=True)
    [artifact] = (tmp_path / "dist").glob("hvd-cluster-*.tar.gz")
    assert artifact.name == f"hvd-cluster-{yaml.safe_load((ROOT / 'galaxy.yml').read_text())['version']}.tar.gz"
    subprocess.run([str(galaxy), "collection", "install", "--force", "-p", str(tmp_path / "colls"), str(artifact)],
                   check=True, capture_output=True, text=True)
    installed = tmp_path / "colls" / "ansible_collections" / "hvd" / "cluster"
    env = {**os.environ, "ANSIBLE_CONFIG": str(installed / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_COLLECTIONS_PATH": str(tmp_path / "colls"), "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "False"}
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "inventories/ct3", "hvd.cluster.ssh_mesh"],
                          cwd=lab3.workdir, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    # the folder also holds what `up` wrote there (ssh/, runs/, state/): none of it read as inventory
    assert "WARNING" not in proc.stderr, proc.stderr[-3000:]
    recap = re.findall(r"^(node\d)\s*: ok=\d+\s+changed=(\d+)\s+unreachable=0\s+failed=0", proc.stdout, re.M)
    assert sorted(recap) == [("node1", "0"), ("node2", "0"), ("node3", "0")], proc.stdout[-3000:]


def test_check_mode_on_a_converged_cluster_changes_nothing(hvd) -> None:
    rc, doc, err = hvd.up_json("--check")
    assert rc == 0, err[-4000:]
    assert all(h["changed"] == 0 for h in doc["hosts"].values())


# ------------------------------------------------------------------------------------------ drift: check, then up

def node_files(lab: Lab, index: int) -> str:
    """What must stay as it is on a node: every file we manage with its modification time, and the package states.
    Not hvd_verify's record of the last passing allreduce (a cache every node rewrites when the cluster is proven
    again, reported as no change), nor the folder that holds it."""
    listing = ("find /etc/hosts /etc/ssh/ssh_known_hosts /etc/profile.d /etc/ld.so.conf.d /opt/hvd /etc/ansible "
               "/var/lib/hvdcluster -printf '%p %T@\\n' 2>/dev/null | grep -v -e '^/etc/ansible/facts.d ' "
               "-e '^/etc/ansible/facts.d/hvd_verify.fact ' | sort; dpkg -l | md5sum; apt-mark showhold")
    return lab.exec(index, "sh", "-c", listing).stdout


def test_check_on_a_converged_cluster_exits_0_and_changes_nothing(hvd, lab3: Lab) -> None:
    before = [node_files(lab3, i) for i in (1, 2, 3)]
    rc, doc = hvd.check_json()
    assert rc == 0 and doc["in_sync"] == ["node1", "node2", "node3"] and doc["drifted"] == {}, doc
    assert [node_files(lab3, i) for i in (1, 2, 3)] == before
    text = hvd("check", "hosts.yaml")
    assert text.returncode == 0 and "node[1-3]: in sync" in text.stdout, text.stdout + text.stderr


SITE = "/opt/hvd/env/lib/python3.11/site-packages"
MPI_PACKAGES = "Install the distro's Open MPI, hold it and keep unattended-upgrades off it (apt only for what dpkg lacks)"

# One drift at a time on node2: (what is done, the item `check` must name, the role that repairs it).
DRIFTS = {
    "env-file-deleted": (f"rm {SITE}/psutil/_common.py", "env.files", "hvd_pyenv"),
    "env-file-edited": (f"echo '# edited' >> {SITE}/cloudpickle/__init__.py", "env.files", "hvd_pyenv"),
    "env-package-version": ("/opt/hvd/env/bin/pip install -q --no-deps --force-reinstall 'cloudpickle==3.0.0' "
                            "|| /opt/hvd/env/bin/pip install -q --no-deps --force-reinstall 'cloudpickle==2.2.1'",
                            "env.dist.cloudpickle", "hvd_pyenv"),
    "horovod-uninstalled": ("/opt/hvd/env/bin/pip uninstall -y -q horovod", "horovod.version", "hvd_horovod"),
    "horovod-replaced": ("/opt/hvd/env/bin/python /tmp/other_horovod.py /tmp && "
                         "/opt/hvd/env/bin/pip install -q --no-deps --no-index --force-reinstall "
                         "/tmp/horovod-0.28.1-py3-none-any.whl", "horovod.record", "hvd_horovod"),
    "mpi-package-removed": ("apt-mark unhold openmpi-bin libopenmpi-dev >/dev/null && "
                            "DEBIAN_FRONTEND=noninteractive apt-get remove -y -q openmpi-bin >/dev/null",
                            "pkg.openmpi-bin", "hvd_openmpi"),
    "held-package-unheld": ("apt-mark unhold openmpi-bin", "pkg.openmpi-bin.hold", "hvd_openmpi"),
    "unattended-guard-removed": ("rm /etc/apt/apt.conf.d/51hvdcluster-hvd_openmpi", "pkg.openmpi-bin.guard",
                                 "hvd_openmpi"),
    "cluster-key-unauthorized": (f"sed -i '/hvdcluster@ct3/d' /home/{SUDO_USER}/.ssh/authorized_keys",
                                 "mesh.authorized", "hvd_ssh_mesh"),
    "known-hosts-wiped": ("sed -i '/hvdcluster ct3/,/hvdcluster ct3/d' /etc/ssh/ssh_known_hosts; "
                          "sed -i '/hvdcluster ct3/d' /etc/ssh/ssh_known_hosts", "mesh.known_hosts", "hvd_ssh_mesh"),
    # node3's line taken out of the block. /etc/hosts is bind-mounted into a container: rewritten in place, never
    # replaced (sed -i would rename it).
    "hosts-block-edited": ("grep -v ' node3 ' /etc/hosts > /root/hosts.new && ! cmp -s /etc/hosts /root/hosts.new "
                           "&& cat /root/hosts.new > /etc/hosts", "base.hosts", "hvd_base"),
    "ca-bundle-removed": ("rm -f /usr/local/share/ca-certificates/hvdcluster*.crt", "base.ca", "hvd_base"),
    "run-dir-removed": ("rm -rf /run/hvdcluster", "base.run_dir", "hvd_base"),  # job leases and roll marks
    # Additions: what runs in every rank without being part of what was installed.
    "env-distribution-added": (f"mkdir -p {SITE}/extra_pkg-1.0.dist-info && printf 'Metadata-Version: 2.1\\nName: "
                               f"extra-pkg\\nVersion: 1.0\\n' > {SITE}/extra_pkg-1.0.dist-info/METADATA",
                               "env.dist.extra-pkg", "hvd_pyenv"),
    # Five additions and edits at once (one repair: the env installed again from the cache): check must name each.
    "env-module-pth-sitecustomize-byte-cache-pyvenv": (
        f"echo 'import os' > {SITE}/evil.py && echo 'import os' > {SITE}/zz-hook.pth && "
        f"echo 'print(1)' > {SITE}/sitecustomize.py && cd {SITE}/psutil/__pycache__ && a=$(ls | head -1) && "
        "b=$(ls | sed -n 2p) && cp \"$b\" \"$a\" && echo 'include-system-site-packages = true' >> "
        "/opt/hvd/env/pyvenv.cfg && echo \"$a\" > /root/planted", "env.files", "hvd_pyenv"),
    # usercustomize.py (imported at start-up like sitecustomize.py) added and the env's manifest rewritten to vouch for
    # it: the file agrees with the manifest, the manifest is not the one recorded; up installs the env again
    # (hvd_pyenv_reinstall).
    "env-manifest-vouches-for-an-addition": (
        "python3 -c \"import hashlib, json, os; p = '/opt/hvd/env/.hvd-manifest'; m = json.load(open(p)); "
        f"f = '{SITE}/usercustomize.py'; open(f, 'w').write('print(1)'); s = os.stat(f); "
        "m[os.path.relpath(f, '/opt/hvd/env')] = [s.st_size, s.st_mtime_ns, hashlib.sha256(open(f, 'rb').read())"
        ".hexdigest()]; json.dump(m, open(p, 'w'), sort_keys=True, separators=(',', ':'))\"",
        "env.manifest", "hvd_pyenv"),
    # A wrong address for node3 in our block (its fabric address is a DNS name): resolved again without the block.
    "hosts-block-wrong-ip": ("sed 's/^[0-9.]* node3 /10.99.99.99 node3 /' /etc/hosts > /root/hosts.new "
                             "&& ! cmp -s /etc/hosts /root/hosts.new && cat /root/hosts.new > /etc/hosts",
                             "base.hosts", "hvd_base"),
    "ssh-config-block-edited": (f"f=/home/{SUDO_USER}/.ssh/config && awk '{{print}} /# BEGIN hvdcluster ct3/ "
                                "{print \"    ProxyCommand nc elsewhere 22\"}' $f > /root/c.new && ! cmp -s $f "
                                "/root/c.new && cat /root/c.new > $f", "mesh.ssh_config", "hvd_ssh_mesh"),
    # The node was reinstalled (another machine-id): the pre-flight and every role, not a partial repair.
    "node-reinstalled": ("cp /etc/machine-id /root/machine-id.old 2>/dev/null; "
                         "echo 0123456789abcdef0123456789abcdef > /etc/machine-id", "os.machine-id", "hvd_preflight"),
}

# A wheel named like the installed Horovod but built otherwise (here: another file set): what a node gets when
# someone `pip install`s their own build over ours.
OTHER_HOROVOD = """\
import base64, hashlib, sys, zipfile
files = {"horovod/__init__.py": b"__version__ = '0.28.1'\\n",
         "horovod-0.28.1.dist-info/METADATA": b"Metadata-Version: 2.1\\nName: horovod\\nVersion: 0.28.1\\n",
         "horovod-0.28.1.dist-info/WHEEL": b"Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"}
def h(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
record = "".join(f"{name},{h(data)},{len(data)}\\n" for name, data in files.items())
record += "horovod-0.28.1.dist-info/RECORD,,\\n"
with zipfile.ZipFile(sys.argv[1] + "/horovod-0.28.1-py3-none-any.whl", "w") as wheel:
    for name, data in files.items():
        wheel.writestr(name, data)
    wheel.writestr("horovod-0.28.1.dist-info/RECORD", record)
"""


# The corpus in rounds: each round injects drifts on node2 that touch different files at once (each named by check
# with its own item and role), and one up repairs them all. A drift that rewrites what another round's drift reads
# (the same package, the same block, the env's manifest) is in another round; a reinstalled node is alone.
# The five additions of env-module-pth... are named one by one, so that round holds no other drift of the env's files
# (check's description of env.files is cut after ten problems); the manifest vouching for an addition goes with it
# (the manifest is its own item, and the file it vouches for agrees with it, so env.files does not name it).
ROUNDS = [
    ("env-file-deleted", "env-distribution-added", "env-package-version", "horovod-uninstalled",
     "mpi-package-removed", "cluster-key-unauthorized", "known-hosts-wiped", "hosts-block-edited"),
    ("env-file-edited", "horovod-replaced", "held-package-unheld", "unattended-guard-removed",
     "ssh-config-block-edited", "ca-bundle-removed", "hosts-block-wrong-ip", "run-dir-removed"),
    ("env-module-pth-sitecustomize-byte-cache-pyvenv", "env-manifest-vouches-for-an-addition"),
    ("node-reinstalled",),
]


@pytest.mark.parametrize("kinds", ROUNDS, ids=["+".join(k.split("-")[0] for k in r) for r in ROUNDS])
def test_drift_on_one_node_is_named_by_check_and_repaired_by_up_leaving_the_others_alone(
        hvd, lab3: Lab, kinds: tuple[str, ...]) -> None:
    if "horovod-replaced" in kinds:
        assert lab3.exec(2, "sh", "-c", f"cat > /tmp/other_horovod.py <<'EOF'\n{OTHER_HOROVOD}EOF").returncode == 0
    for kind in kinds:
        done = lab3.exec(2, "sh", "-c", DRIFTS[kind][0])
        assert done.returncode == 0, (kind, done.stdout + done.stderr)
    rc, doc = hvd.check_json()
    assert rc == 1 and list(doc["drifted"]) == ["node2"], doc
    named = {d["item"]: d for d in doc["drifted"]["node2"]}
    for kind in kinds:
        _, item, role = DRIFTS[kind]
        assert item in named and named[item]["role"] == role, (kind, doc["drifted"]["node2"])
    if "env-module-pth-sitecustomize-byte-cache-pyvenv" in kinds:  # every one of the five is named
        planted = lab3.exec(2, "cat", "/root/planted").stdout.strip()
        for name in ("added: evil.py", "added: zz-hook.pth", "added: sitecustomize.py",
                     f"changed: psutil/__pycache__/{planted}", "changed: pyvenv.cfg"):
            assert name in named["env.files"]["found"], (name, named["env.files"]["found"])
    if "env-manifest-vouches-for-an-addition" in kinds:  # vouched for by the manifest: not an env.files problem
        assert "added: usercustomize.py" not in named["env.files"]["found"], named["env.files"]["found"]
    if "hosts-block-wrong-ip" in kinds:  # the block is read as text: check names the line, not two digests
        found, expected = named["base.hosts"]["found"], named["base.hosts"]["expected"]
        assert "10.99.99.99 node3" in found and "10.99.99.99" not in expected
    assert doc["in_sync"] == ["node1", "node3"]
    if "env-package-version" in kinds:  # `run` refuses the drifted cluster before any launch, naming node and item
        proc = hvd("run", "--", "python", "-c", "print('ran')")
        assert proc.returncode == 1 and "ran" not in proc.stdout, proc.stdout + proc.stderr
        assert "node2: env.dist.cloudpickle is " in proc.stderr, proc.stderr
    others = [node_files(lab3, i) for i in (1, 3)]
    rc, up, err = hvd.up_json()
    assert rc == 0, err[-4000:]
    assert up["not_repaired"] == [] and up["hosts"]["node2"]["status"] != "not-repaired"
    assert up["fast_path"]["in_sync"] == ["node1", "node3"] and up["converged"] == ["node2"], up.get("fast_path")
    assert up["hosts"]["node1"]["changed"] == 0 and up["hosts"]["node3"]["changed"] == 0
    assert [node_files(lab3, i) for i in (1, 3)] == others
    # The post-flight sized to what was repaired: the reach test and mpirun across the nodes where a repaired item is
    # one they rely on (every round here but the env's alone has one: names and addresses, keys, Open MPI, a new node)
    proven = task_outcomes(up["log"])
    mesh = any(DRIFTS[kind][2] not in ("hvd_pyenv", "hvd_horovod") for kind in kinds)
    for task in ("Reach every other node by name and fabric address (BatchMode, strict host key checking)",
                 "Start one process per node with mpirun and collect the hostnames"):
        assert proven.get(task) == ({"ok"} if mesh else {"skipped"}), (task, proven.get(task))
    assert proven["Say why the mesh and mpirun are not tested again"] == ({"skipped"} if mesh else {"ok"}), proven
    if mesh:  # every node reaches every other, though the repair put back the bytes the last proof saw
        assert all(len(targets) == 4 for targets in reach_targets(up["log"]).values()), reach_targets(up["log"])
    mpi = [(e["event_data"]["host"], e["event_data"]["res"]) for e in run_events(up["log"])
           if e.get("event") == "runner_on_ok" and e["event_data"].get("task") == MPI_PACKAGES]
    if "run-dir-removed" in kinds:
        # item-level: hvd_base's drifted items are all its managed files, hvd_openmpi's its holds and their guard, so
        # only those are written again (no apt run of either role: hvd_packages finds Open MPI installed and only
        # holds it and writes its guard file again); the rest of the round's roles run whole
        ran = {task for task, outcomes in task_outcomes(up["log"]).items() if outcomes - {"skipped"}}
        assert "Install base packages" not in ran, ran
        assert [(host, res["installed"], res["held"], res["cache_updated"], res["guard_written"])
                for host, res in mpi] == [("node2", [], ["openmpi-bin"], False, True)], mpi
    if "mpi-package-removed" in kinds:
        # apt ran for what dpkg lacked alone (the drift's `apt-get remove openmpi-bin` took libopenmpi-dev, which
        # depends on it, too), both were held again, the guard file was left as it was
        assert [(host, res["installed"], res["held"], res["guard_written"]) for host, res in mpi] == [
            ("node2", ["openmpi-bin", "libopenmpi-dev"], ["openmpi-bin", "libopenmpi-dev"], False)], mpi
    rc, doc = hvd.check_json()
    assert rc == 0 and doc["drifted"] == {}, doc


def test_a_full_up_repairs_a_wrong_ip_in_the_hosts_block_past_the_preflight(hvd, lab3: Lab) -> None:
    """node2's line for node3 in our /etc/hosts block points at 10.99.99.99. A full converge runs the pre-flight before
    hvd_base repairs the block: its look at the peers resolves node3 as hvd_resolve does (Docker's DNS here; our block
    only where nothing else knows the name), so it reaches node3 and `up --full` repairs the line, rather than stopping
    every node with "node2 cannot connect to node3: open the firewall"."""
    done = lab3.exec(2, "sh", "-c", DRIFTS["hosts-block-wrong-ip"][0])
    assert done.returncode == 0, done.stdout + done.stderr
    rc, up, err = hvd.up_json("--full")
    assert rc == 0, err[-4000:]
    findings = [f for host in (up.get("preflight") or {}).values() for f in host]
    assert not any(f["check"].startswith("peer") for f in findings), findings
    assert up["hosts"]["node2"]["changed"] > 0 and "10.99.99.99" not in lab3.exec(2, "cat", "/etc/hosts").stdout
    rc, doc = hvd.check_json()
    assert rc == 0 and doc["drifted"] == {}, doc


def test_a_byte_flipped_in_an_env_library_is_named_by_check_deep_and_repaired_by_up_deep(hvd, lab3: Lab) -> None:
    """Bit rot: one byte of a shared library in node2's env flipped, its size and modification time kept. A shallow
    read cannot see it; `check --deep` names it, `up --deep` installs the env again and reads it back deep, and
    `check --deep` then finds every node as installed."""
    lib = lab3.exec(2, "sh", "-c", f"ls {SITE}/psutil/_psutil_linux*.so | head -1").stdout.strip()
    assert lib, "no psutil extension in the env"
    flip = (f"t=$(stat -c %y '{lib}') && python3 -c \"import sys; p = sys.argv[1]; f = open(p, 'r+b'); f.seek(4096); "
            f"b = f.read(1); f.seek(4096); f.write(bytes([b[0] ^ 0xff]))\" '{lib}' && touch -d \"$t\" '{lib}'")
    before = lab3.exec(2, "stat", "-c", "%s %Y", lib).stdout
    assert lab3.exec(2, "sh", "-c", flip).returncode == 0
    assert lab3.exec(2, "stat", "-c", "%s %Y", lib).stdout == before
    rc, doc = hvd.check_json()
    assert rc == 0, doc  # what a shallow read cannot see
    rc, doc = hvd.check_json("--deep")
    assert rc == 1 and list(doc["drifted"]) == ["node2"], doc
    [files] = [d for d in doc["drifted"]["node2"] if d["item"] == "env.files"]
    assert f"changed: {lib.removeprefix(SITE + '/')}" in files["found"] and files["role"] == "hvd_pyenv", files
    rc, up, err = hvd.up_json("--deep")
    assert rc == 0, err[-4000:]
    assert up["fast_path"]["deep"] and up["converged"] == ["node2"], up.get("fast_path")
    rc, doc = hvd.check_json("--deep")
    assert rc == 0 and doc["drifted"] == {}, doc


def test_the_drift_corpus_covers_every_kind_the_issue_names() -> None:
    kinds = sum(5 if kind == "env-module-pth-sitecustomize-byte-cache-pyvenv" else 1 for kind in DRIFTS)
    assert kinds >= 20 and "env-module-pth-sitecustomize-byte-cache-pyvenv" in DRIFTS
    assert {"env.dist.extra-pkg", "env.files", "base.hosts", "mesh.ssh_config", "os.machine-id"} <= {
        item for _, item, _ in DRIFTS.values()}
    assert sorted(kind for round_ in ROUNDS for kind in round_) == sorted(DRIFTS)  # each kind in one round


def test_what_no_role_repairs_is_named_by_check_and_by_up_and_never_recorded(hvd, lab3: Lab) -> None:
    """Another OS release on node2 (its os-release rewritten): check names it 'by hand', up exits 1 naming it as
    something no role repairs (it used to converge every node and record the new release as desired)."""
    inventory = lab3.workdir / "inventories" / "ct3" / "state"
    before = (inventory / "node2.json").read_text()
    done = lab3.exec(2, "sh", "-c", "cp -P /etc/os-release /root/os-release.saved && "
                                    "sed 's/^VERSION_ID=.*/VERSION_ID=\"13\"/' /usr/lib/os-release > /root/osr "
                                    "&& rm /etc/os-release && cp /root/osr /etc/os-release")
    assert done.returncode == 0, done.stderr
    try:
        rc, doc = hvd.check_json()
        assert rc == 1 and [d["item"] for d in doc["drifted"]["node2"]] == ["os.release"], doc
        assert doc["drifted"]["node2"][0]["role"] == ""
        for args in ((), ("--full",)):
            rc, up, err = hvd.up_json(*args)
            assert rc == 1, err[-3000:]
            assert any(line.startswith("node2: os.release:") and "no role repairs it" in line
                       for line in up["not_repaired"]), up.get("not_repaired")
        assert (inventory / "node2.json").read_text() == before
    finally:
        lab3.exec(2, "sh", "-c", "rm -f /etc/os-release && cp -P /root/os-release.saved /etc/os-release")
    rc, doc = hvd.check_json()
    assert rc == 0, doc
    # the failed converges recorded no inputs: the next up converges every node, and records them again
    rc, up, err = hvd.up_json()
    assert rc == 0 and "fast_path" not in up and up["not_repaired"] == [], err[-3000:]


HOME = f"/home/{SUDO_USER}"
# What else a rank inherits or reads, beside the env (ARCHITECTURE.md, "Every node launches the same way"): one of each
# kind on node2, (what is done, the item `check` names, the start of the line it names there). No role writes these
# files: each is the operator's to put right (by hand).
LAUNCH_DRIFTS = {
    "pythonpath-for-ssh-sessions": ("echo PYTHONPATH=/srv/planted >> /etc/environment", "launch.env",
                                    "/etc/environment: PYTHONPATH=/srv/planted"),
    "linker-preload": ("ls /lib/*-linux-gnu/libm.so.6 | head -1 > /etc/ld.so.preload", "launch.ld",
                       "/etc/ld.so.preload: /lib/"),  # a library every process has anyway: nothing breaks
    "linker-search-path": ("echo /opt/planted/lib > /etc/ld.so.conf.d/zz-planted.conf", "launch.ld",
                           "/etc/ld.so.conf.d/zz-planted.conf: /opt/planted/lib"),
    # (Debian's file ends without a newline)
    "openmpi-parameter": ("mkdir -p /etc/openmpi && printf '\\nmpi_yield_when_idle = 1\\n' >> "
                          "/etc/openmpi/openmpi-mca-params.conf", "launch.mpi",
                          "/etc/openmpi/openmpi-mca-params.conf: mpi_yield_when_idle = 1"),
    "nccl-conf": ("echo NCCL_DEBUG=WARN > /etc/nccl.conf", "launch.nccl", "/etc/nccl.conf: NCCL_DEBUG=WARN"),
    # node2's ssh sends node3 elsewhere, from a Host block before ours (our block itself is unchanged)
    "ssh-host-block-before-ours": (f"f={HOME}/.ssh/config && {{ printf 'Host node3\\n    Port 2222\\n'; cat $f; }} "
                                   "> /root/c.new && cat /root/c.new > $f", "launch.ssh.node3", "port 2222"),
}
# A key beyond the cluster's in the login user's authorized_keys: a notice, never a drift.
EXTRA_KEY = ("rm -f /root/mallory-key* && ssh-keygen -q -t ed25519 -N '' -C mallory@elsewhere -f /root/mallory-key "
             f"&& cat /root/mallory-key.pub >> {HOME}/.ssh/authorized_keys")
LAUNCH_FILES = ["/etc/environment", "/etc/ld.so.preload", "/etc/ld.so.conf.d/zz-planted.conf",
                "/etc/openmpi/openmpi-mca-params.conf", "/etc/nccl.conf", f"{HOME}/.ssh/config",
                f"{HOME}/.ssh/authorized_keys"]
SYS_PATH = "import json, socket, sys; print('rank-path', socket.gethostname(), json.dumps(sys.path))"


def test_what_a_rank_inherits_is_named_by_check_left_to_hand_by_up_and_run_imports_alike(hvd, lab3: Lab) -> None:
    """node2's SSH sessions get a PYTHONPATH, its linker a preload and another folder, its Open MPI and NCCL a setting,
    its ssh another port for node3, its login user another authorized key. A job started by `run` meanwhile imports
    alike on every rank. check names each by item, file and line (the key as a notice, not a drift); up converges
    nothing, names each as something no role repairs, records nothing; once they are taken away check exits 0."""
    record = lab3.workdir / "inventories" / "ct3" / "state" / "node2.json"
    before = record.read_text()
    saved = " ".join(LAUNCH_FILES)
    assert lab3.exec(2, "sh", "-c", f"mkdir -p /root/launch-saved && for f in {saved}; do if [ -e $f ]; then "
                                    "cp -p $f /root/launch-saved/$(echo $f | tr / _); fi; done").returncode == 0
    try:
        for kind, (command, _, _) in LAUNCH_DRIFTS.items():
            done = lab3.exec(2, "sh", "-c", command)
            assert done.returncode == 0, (kind, done.stdout + done.stderr)
        assert lab3.exec(2, "sh", "-c", EXTRA_KEY).returncode == 0
        # what every SSH session on node2 now gets (pam_env), horovodrun's and mpirun's too ...
        session = lab3.exec(1, "ssh", "-o", "BatchMode=yes", "node2", "printenv PYTHONPATH", user=lab3.user)
        assert session.stdout.strip() == "/srv/planted", session.stdout + session.stderr
        # ... and no rank of a job imports from it: the same sys.path on every node
        proc = hvd("run", "--", "python", "-c", SYS_PATH)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
        paths = dict(re.findall(r"rank-path (\S+) (\[.*\])$", proc.stdout, re.M))
        assert sorted(paths) == ["node1", "node2", "node3"], proc.stdout[-3000:]
        assert len(set(paths.values())) == 1 and "/srv/planted" not in json.loads(paths["node2"]), paths

        rc, doc = hvd.check_json()
        assert rc == 1 and list(doc["drifted"]) == ["node2"] and doc["in_sync"] == ["node1", "node3"], doc
        injected = {item for _, item, _ in LAUNCH_DRIFTS.values()}
        for d in doc["drifted"]["node2"]:  # every item check names is one injected, no role's to repair
            assert d["item"] in injected and d["role"] == "", d
        named = {d["item"]: d for d in doc["drifted"]["node2"]}
        for kind, (_, item, line) in LAUNCH_DRIFTS.items():
            assert item in named, (kind, doc["drifted"]["node2"])
            found, expected = named[item]["found"].split("\n"), named[item]["expected"].split("\n")
            assert any(x.startswith(line) for x in found) and not any(x.startswith(line) for x in expected), \
                (kind, named[item])
        notices = doc["notices"]
        assert "mallory@elsewhere" in notices["node2"]["mesh.other_keys"], notices
        assert notices["node1"] == notices["node3"] and "mallory" not in json.dumps(notices["node1"]), notices

        rc, up, err = hvd.up_json()
        assert rc == 1, err[-3000:]
        assert up["converged"] == [] and set(up["fast_path"]["by_hand"]["node2"]) == injected, up.get("fast_path")
        for kind, (_, item, line) in LAUNCH_DRIFTS.items():
            assert any(n.startswith(f"node2: {item}: ") and f"line found {line}" in n and n.endswith(
                "(no role repairs it)") for n in up["not_repaired"]), (kind, up["not_repaired"])
        assert record.read_text() == before
    finally:
        lab3.exec(2, "sh", "-c", f"for f in {saved}; do s=/root/launch-saved/$(echo $f | tr / _); if [ -e $s ]; "
                                 "then cat $s > $f; else rm -f $f; fi; done; rm -rf /root/launch-saved /root/c.new")
    rc, doc = hvd.check_json()
    assert rc == 0 and doc["drifted"] == {}, doc
    assert "mallory" not in json.dumps(doc["notices"]), doc["notices"]


def test_the_same_up_from_another_folder_and_through_a_symlink_takes_the_fast_path(hvd, lab3: Lab, tmp_path) -> None:
    """The inputs digest is the hosts.yaml's meaning, not the path it was typed as."""
    (tmp_path / "link").symlink_to(lab3.workdir)
    for hosts, output in ((lab3.workdir / "hosts.yaml", lab3.workdir / "inventories"),
                          (tmp_path / "link" / "hosts.yaml", tmp_path / "link" / "inventories"),
                          ("../link/hosts.yaml", "../link/inventories")):
        cwd = tmp_path / "elsewhere"
        cwd.mkdir(exist_ok=True)
        proc = subprocess.run([str(hvd.bin / "hvdcluster"), "up", str(hosts), "-o", str(output), "--json"], cwd=cwd,
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-3000:]
        doc = json.loads(proc.stdout)
        assert doc.get("fast_path", {}).get("in_sync") == ["node1", "node2", "node3"], (hosts, doc.get("fast_path"))


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
    # The refused run forgot the record of the last full converge (a run that did not end well never counts): the
    # next `up` converges every node and records it again, as the tests after this one find the cluster
    rc, doc, err = hvd.up_json()
    assert rc == 0 and doc["ok"], err[-4000:]


def test_a_second_up_on_the_same_inventory_stops_at_once_naming_the_first(hvd, lab3: Lab) -> None:
    """The first `up` runs only the pre-flight (--tags): it holds the inventory as any converge does, for less time."""
    lock = lab3.workdir / "inventories" / "ct3" / ".lock"
    runs = sorted((lab3.workdir / "inventories" / "ct3" / "runs" / "artifacts").iterdir())
    first = subprocess.Popen([str(hvd.bin / "hvdcluster"), "up", "hosts.yaml", "--tags", "hvd_preflight"], cwd=hvd.cwd,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while f'"pid": {first.pid}' not in (lock.read_text() if lock.exists() else ""):
            assert first.poll() is None and time.monotonic() < deadline, "the first up did not take the lock"
            time.sleep(0.1)
        second = hvd("up", "hosts.yaml")
        assert second.returncode == 1
        assert f"is in use by pid {first.pid}" in second.stderr and "command up" in second.stderr, second.stderr
    finally:
        _, err = first.communicate(timeout=900)
    assert first.returncode == 0, err[-4000:]
    # the second run started nothing: the one new run folder is the first's (its command names its --tags)
    new = sorted(set((lab3.workdir / "inventories" / "ct3" / "runs" / "artifacts").iterdir()) - set(runs))
    assert len(new) == 1 and "hvd_preflight" in (new[0] / "command").read_text(), new


# What mallory (an unprivileged local user of node2) plants in an old, world-writable /run/hvdcluster: a live roll
# mark of hers, naming a process of the controller (argv[2]), one from the future, records whose text forges lines
# of the old node script's output (every Unicode line break, a holder named to reach the sentinel argv[1]), names with
# line breaks and ESC/OSC sequences, links to the sentinel, a FIFO, a 1 MiB record and 2,000 more files.
PLANT = r"""
import json, os, sys
d, target, live = "/run/hvdcluster", sys.argv[1], json.loads(sys.argv[2])
def put(name, text):
    with open(os.path.join(d, name), "w", encoding="utf-8", errors="surrogatepass") as out:
        out.write(text)
forged = ('{"run_id": "x"}\r\nhvd-holder ../../..%s {}\u2028hvd-slurm-job 1 root x\x85hvd-gpu-app 1, x\x1chvd-holder '
          'roll-20261126T001901-9.json {"kind": "roll", "host": "elsewhere", "started_epoch": 4102444800}' % target)
put("roll-20261126T001901-1.json", json.dumps(live))
put("roll-20261126T001901-2.json", json.dumps({**live, "host": "elsewhere", "started_epoch": 4102444800}))
put("job-20261126T001901-3.json", forged)
put("job-\r\n..\u2028\x1b]0;pwned\x07\x1b[2J.json", forged)
put("roll-20261126T001901-4.json", "{" + " " * (1 << 20) + "}")
os.symlink(target, os.path.join(d, "job-20261126T001901-5.json"))
os.symlink(target, os.path.join(d, "..%2f..%2fsentinel"))
os.mkfifo(os.path.join(d, "roll-20261126T001901-6.json"))
for i in range(2000):
    put("job-20261126T001902-%d.json" % i, json.dumps({**live, "user": "\x1b]0;pwned\x07%d" % i}))
"""


def test_a_hostile_local_user_can_neither_plant_nor_forge_a_lease_nor_make_a_look_delete_anything(
        hvd, lab3: Lab) -> None:
    """mallory, another local user of node2: the folder of leases (the login user's, 0700) refuses her. On an old
    world-writable folder (made so by hand here) she plants forged records: `run` launches all the same (no forged
    holder holds node2), naming them as ignored; `check` names the folder's mode for hvd_base to repair; with her
    files left in the folder made private again, `up --rolling` has nothing to roll. None of them removes or changes
    her target outside the folder or any of her files, and none prints a raw ESC."""
    from hvdcluster import jobs

    sentinel = f"/home/{lab3.user}/hvd-sentinel"  # the login user may remove it: what a forged name would aim at
    made = lab3.exec(2, "sh", "-c", f"echo keep > {sentinel} && chown {lab3.user} {sentinel}")
    assert made.returncode == 0, made.stderr

    def looks() -> tuple[str, str]:
        target = lab3.exec(2, "sh", "-c", f"stat -c '%i %s %Y %U' {sentinel} && sha256sum {sentinel}").stdout
        theirs = lab3.exec(2, "sh", "-c", "find /run/hvdcluster -mindepth 1 -user mallory -printf x | wc -c").stdout
        return target, theirs.strip()

    assert lab3.exec(2, "stat", "-c", "%U %a", "/run/hvdcluster").stdout.split() == [lab3.user, "700"]
    refused = lab3.exec(2, "sh", "-c", "echo {} > /run/hvdcluster/roll-20261126T001901-1.json", user="mallory")
    assert refused.returncode != 0 and "Permission denied" in refused.stderr, refused
    mallory = lab3.exec(2, "id", "-u", "mallory").stdout.strip()
    live = jobs.mine(jobs.ROLL, "20261126T001901-1", command=["hvdcluster", "up", "--rolling"])  # this process: live
    try:
        assert lab3.exec(2, "sh", "-c", "chown root:root /run/hvdcluster && chmod 1777 /run/hvdcluster").returncode == 0
        plant = lab3.exec(2, "python3", "-c", PLANT, sentinel, json.dumps(live), user="mallory")
        assert plant.returncode == 0, plant.stderr
        before = looks()
        assert before[1] == "2008", before

        ran = hvd("run", "hosts.yaml", "--limit", "node2", "-np", "1", "--", "python", "-c", "print('ran')")
        assert ran.returncode == 0 and "ran" in ran.stdout, ran.stdout[-2000:] + ran.stderr[-3000:]
        assert "node2: ignored in /run/hvdcluster (not believed): " in ran.stderr, ran.stderr[-3000:]
        assert f"owned by uid {mallory}, not the login user or root: not believed" in ran.stderr
        assert "/run/hvdcluster is writable by other users: `hvdcluster up` makes it the login user's" in ran.stderr
        assert "being changed by" not in ran.stderr and "\x1b" not in ran.stdout + ran.stderr
        assert looks() == before

        rc, doc = hvd.check_json()
        assert rc == 1 and list(doc["drifted"]) == ["node2"], doc
        [item] = doc["drifted"]["node2"]
        assert item["item"] == "base.run_dir" and item["role"] == "hvd_base" and "mode 1777" in item["found"], item

        private = lab3.exec(2, "sh", "-c", f"chown {lab3.user}:root /run/hvdcluster && chmod 0700 /run/hvdcluster")
        assert private.returncode == 0  # her files stay: what an old node carries over
        roll = hvd("up", "hosts.yaml", "--rolling", "--json")
        assert roll.returncode == 0 and "nothing to roll" in roll.stderr, roll.stderr[-3000:]
        assert json.loads(roll.stdout)["rolling"]["batches"] == []
        assert "\x1b" not in roll.stdout + roll.stderr
        assert looks() == before
    finally:
        lab3.exec(2, "sh", "-c", f"find /run/hvdcluster -mindepth 1 -delete; rm -f {sentinel}; "
                                 f"chown {lab3.user}:root /run/hvdcluster && chmod 0700 /run/hvdcluster")


def test_stopped_node_is_named_unreachable_while_the_others_converge(hvd, lab3: Lab) -> None:
    """node3 stopped: `up` names it alone; once it is back, the next `up` converges it and `check` exits 0. (A node
    container started again gets a new published port and Docker writes its /etc/hosts afresh: without that `up`, the
    tests after this one met a node3 that `health` could not reach.)"""
    lab3.stop(3)
    try:
        rc, doc, err = hvd.up_json()
        assert rc != 0
        assert doc["hosts"]["node3"]["status"] == "unreachable"
        assert [doc["hosts"][n]["status"] for n in ("node1", "node2")] == ["up-to-date", "up-to-date"]
        assert "node3: unreachable" in err
    finally:
        lab3.start(3)
    rc, doc, err = hvd.up_json()
    assert rc == 0, err[-4000:]
    rc, doc = hvd.check_json()
    assert rc == 0, doc


# Where node3 dies: while it installs Open MPI (its package removed first, so the step has work to do), or while the
# env travels to it (a file of its env deleted first, so it needs the archive).
LOST_DURING = {
    "package-step": ("apt-mark unhold openmpi-bin libopenmpi-dev >/dev/null && "
                     "DEBIAN_FRONTEND=noninteractive apt-get remove -y -q openmpi-bin >/dev/null", "TASK [hvd.cluster.hvd_openmpi"),
    "fan-out": (f"rm {SITE}/psutil/_common.py", "TASK [hvd.cluster.hvd_fanout"),
}


@pytest.mark.heavy
@pytest.mark.parametrize("when", list(LOST_DURING))
def test_a_node_lost_mid_converge_is_named_alone_and_the_others_finish_proven(hvd, lab3: Lab, when: str) -> None:
    """node3 is killed (docker kill: no shutdown) mid-run: only node3 is named; node1 and node2 converge to the end
    and the post-flight proves them; the next `up` after node3 returns converges it and `check` exits 0."""
    setup, mark = LOST_DURING[when]
    done = lab3.exec(3, "sh", "-c", setup)
    assert done.returncode == 0, done.stderr
    runs = lab3.workdir / "inventories" / "ct3" / "runs" / "artifacts"
    before = set(runs.iterdir())
    proc = subprocess.Popen([str(hvd.bin / "hvdcluster"), "up", "hosts.yaml", "--full", "--verify", "--json"],
                            cwd=hvd.cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = False
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None:
            logs = [run / "stdout" for run in set(runs.iterdir()) - before if (run / "stdout").is_file()]
            if any(mark in log.read_text(errors="replace") for log in logs):
                subprocess.run(["docker", "kill", lab3.container(3)], check=True, capture_output=True)
                killed = True
                break
            time.sleep(0.2)
        out, err = proc.communicate(timeout=900)
        assert killed, f"the run never reached {mark}: {err[-3000:]}"
        doc = json.loads(out)
        assert proc.returncode == 1, err[-3000:]
        assert doc["hosts"]["node3"]["status"] == "unreachable", doc["hosts"]
        assert [doc["hosts"][n]["status"] for n in ("node1", "node2")] in (
            [a, b] for a in ("changed", "up-to-date") for b in ("changed", "up-to-date")), doc["hosts"]
        assert [f["host"] for f in doc["failures"]] == ["node3"], doc["failures"]
        # The post-flight proved the nodes that are left: mpirun reached node1 and node2, and the allreduce ran over
        # every slot of those two (and of no other node), every rank's sum checked.
        proven = task_outcomes(doc["log"])
        for task in ("Start one process per node with mpirun and collect the hostnames",
                     "Check that mpirun reached every node", "Allreduce over every slot of every node",
                     "Check every rank's sum"):
            assert proven.get(task) == {"ok"}, (task, proven.get(task))
        ran = [e["event_data"]["res"]["cmd"] for e in run_events(doc["log"]) if e.get("event") == "runner_item_on_ok"
               and e["event_data"].get("task") == "Allreduce over every slot of every node"]
        assert ran and all({h.split(":")[0] for h in cmd[cmd.index("-H") + 1].split(",")} == {"node1", "node2"}
                           for cmd in ran), ran
        assert doc["converged"] == ["node1", "node2"], doc["converged"]
    finally:
        if proc.poll() is None:
            proc.kill()
        lab3.start(3)
    rc, up, err = hvd.up_json()
    assert rc == 0, err[-4000:]
    rc, doc = hvd.check_json()
    assert rc == 0, doc



# ------------------------------------------------------------------------------------------ health --full and the gate

# The nodes have no GPU: a stand-in for nccl-tests' all_reduce_perf (tests/cluster/nccl_tests_standin.sh) prints the
# outputs we wrote in nccl-tests' documented format (tests/unit/plugins/fixtures/gpu, its README says what each stands
# for);
# it runs under the cluster's real mpirun, over the real SSH mesh. The stand-in's nodes are judged as the operator of a
# cluster whose links the read cannot see would judge them: one rank a node, a floor of 10 GB/s, NCCL on IB.
STANDIN_PREFIX = "/opt/hvd/nccl-tests"
STANDIN_OUTPUTS = {f"{kind}-{n}.txt": f"all_reduce_perf_{n}node-1gpu_{name}_to-64M.txt" for n in (2, 3)
                   for kind, name in (("healthy", "net-ib-gdrdma"), ("slow", "net-ib_one-slow-node"),
                                      ("socket", "nccl-socket-fallback"))}
FULL = ["--gpus-per-node", "1", "--floor", "10", "--transport", "IB", "--size", "64M"]


def standin(lab: Lab, scenario: str | None) -> None:
    """Put the stand-in and its outputs at the nccl-tests prefix of every node, saying ``scenario`` (healthy, socket,
    "slow node3"); None removes it all."""
    for i in range(1, lab.nodes + 1):
        if scenario is None:
            done = lab.exec(i, "rm", "-rf", STANDIN_PREFIX)
            assert done.returncode == 0, done.stderr
            continue
        lab.exec(i, "mkdir", "-p", f"{STANDIN_PREFIX}/bin", f"{STANDIN_PREFIX}/standin")
        copies = [(ROOT / "tests" / "cluster" / "nccl_tests_standin.sh", f"{STANDIN_PREFIX}/bin/all_reduce_perf")]
        copies += [(ROOT / "tests" / "unit" / "plugins" / "fixtures" / "gpu" / src, f"{STANDIN_PREFIX}/standin/{dst}")
                   for dst, src in STANDIN_OUTPUTS.items()]
        for src, dst in copies:
            subprocess.run(["docker", "cp", str(src), f"{lab.container(i)}:{dst}"], check=True, capture_output=True)
        done = lab.exec(i, "sh", "-c", f"echo {scenario!r} > {STANDIN_PREFIX}/standin/scenario && "
                                       f"chmod -R a+rX {STANDIN_PREFIX} && chmod 0755 {STANDIN_PREFIX}/bin/all_reduce_perf")
        assert done.returncode == 0, done.stderr


def health_full(hvd, *args: str) -> tuple[int, dict]:
    proc = hvd("health", "hosts.yaml", "--full", "--json", *FULL, *args)
    try:
        return proc.returncode, json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"no JSON from health --full (rc {proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-3000:]}")


@pytest.fixture
def gate(lab3: Lab):
    """The stand-in on every node, and no health record left behind: later tests launch jobs on these nodes."""
    try:
        yield lab3
    finally:
        standin(lab3, None)
        subprocess.run(["rm", "-rf", str(lab3.workdir / "inventories" / "ct3" / "state" / "health")], check=True)


def test_health_full_through_mpirun_fails_a_socket_fallback_naming_the_transport(hvd, gate: Lab) -> None:
    standin(gate, "socket")
    rc, doc = health_full(hvd)
    assert rc == 1, doc
    first = doc["full"]["runs"][0]
    assert first["nodes"] == ["node1", "node2", "node3"] and first["rc"] == 0 and first["ranks"] == 3
    assert " mpirun -np 3 -H node1:1,node2:1,node3:1 " in first["command"] and first["network"] == "Socket"
    transport = next(f for f in first["findings"] if f["item"] == "nccl.transport")
    assert transport["found"] == "NCCL used NET/Socket (NET/IB : No device found)"
    assert transport["expected"] == "NET/IB, which every node offers"
    assert doc["full"]["culprit"]["kind"] == "fabric"  # every pair falls back too: no single node to blame


def test_health_full_through_mpirun_passes_a_healthy_multi_node_run(hvd, gate: Lab) -> None:
    standin(gate, "healthy")
    rc, doc = health_full(hvd)
    assert rc == 0, doc
    run, = doc["full"]["runs"]
    assert run["passed"] and run["network"] == "IB" and run["gdrdma"] and run["busbw_gbs"] > 10
    assert run["sizes"][-1]["size"] == 64 << 20 and run["floor_gbs"] == 10 and run["seconds"] > 0
    assert all(node["healthy"] for node in doc["nodes"].values())  # the quick read: every CPU item not applicable


def test_a_run_slow_on_node3_is_bisected_to_node3_up_accept_names_it_and_run_refuses_it(hvd, gate: Lab) -> None:
    """The whole run is slow; node1+node2 pass, node3 with node1 and with node2 do not: node3 is named in 4 runs (the
    whole, the pair, node3 with each healthy peer, under the real mpirun each, from their first node). `up --accept` on
    the cluster in sync converges nothing and does the same acceptance (exit 1 naming node3); `run` then refuses
    node3, naming it and the item, and launches on node1 alone."""
    standin(gate, "slow node3")
    rc, doc = health_full(hvd)
    assert rc == 1, doc
    culprit = doc["full"]["culprit"]
    assert (culprit["kind"], culprit["nodes"], culprit["runs_needed"]) == ("node", ["node3"], 4), culprit
    assert [run["nodes"] for run in doc["full"]["runs"]] == [["node1", "node2", "node3"], ["node1", "node2"],
                                                             ["node1", "node3"], ["node2", "node3"]]
    rc, up, err = hvd.up_json("--accept", *FULL)
    assert rc == 1, err[-3000:]
    assert up["health"]["not_ready"] == [] and up["acceptance"]["culprit"]["nodes"] == ["node3"]
    assert "not accepted: node3 (node)" in err
    refused = hvd("run", "hosts.yaml", "--", "python", "-c", "print('launched')")
    assert refused.returncode == 1 and "launched" not in refused.stdout
    assert "node3: last health (up --accept, " in refused.stderr and "nccl.culprit" in refused.stderr
    assert "node1: last health" not in refused.stderr
    alone = hvd("run", "hosts.yaml", "--limit", "node1", "-np", "1", "--", "python", "-c", "print('launched')")
    assert alone.returncode == 0 and "launched" in alone.stdout, alone.stderr[-3000:]


# ------------------------------------------------------------------------------------------ rolling changes

END_FLAG = "/tmp/hvd-test-job-end"  # the test job runs until this file appears on its node
JOB = ["python", "-c", f"import os, time; [time.sleep(0.5) for _ in iter(lambda: os.path.exists({END_FLAG!r}), True)]"]


def run_dir(lab: Lab, index: int) -> list[str]:
    """The job leases and roll marks on a node."""
    return sorted(lab.exec(index, "sh", "-c", "ls -A /run/hvdcluster").stdout.split())


def start_job(hvd, lab: Lab, node: int) -> subprocess.Popen:
    """`hvdcluster run` of a job that runs on node<node> until told to end; returns once its lease is there."""
    lab.exec(node, "rm", "-f", END_FLAG)
    job = subprocess.Popen([str(hvd.bin / "hvdcluster"), "run", "hosts.yaml", "--limit", f"node{node}", "-np", "1",
                            "--", *JOB], cwd=hvd.cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not any(name.startswith("job-") for name in run_dir(lab, node)):
        assert job.poll() is None and time.monotonic() < deadline, job.communicate()
        time.sleep(0.5)
    time.sleep(3)
    assert job.poll() is None, job.communicate()  # launched and running
    return job


@pytest.mark.heavy
def test_a_rolling_up_changes_one_node_at_a_time_and_waits_for_the_job_on_node3(hvd, lab3: Lab, tmp_path) -> None:
    """An env change (hosts.yaml adds a package, `six`) while a job runs on node3 (hvdcluster run, its lease on
    node3): `up --rolling --batch 1` changes node1, proves it, then node2, proves both, waits for node3's job with
    node3 drained (the roll's mark stays there), and changes node3 once the job has ended by itself. While the roll
    waits, a job on node1 (already changed) starts: the roll holds the inventory but `run` may launch beside it. At no
    moment are two nodes mid-change, every node ends with the new env, and every lease and mark is gone. On the
    cluster in sync, `up --rolling` then has nothing to roll. (The env and its Horovod build come from the controller
    cache after the first run on a machine.)"""
    python = lab3.stack.get("python", {})
    lab3.stack = {**lab3.stack, "python": {**python, "packages": [*python.get("packages", []), "six==1.16.0"]}}
    lab3.write_hosts_yaml()
    job = start_job(hvd, lab3, 3)
    out = tmp_path / "roll.json"
    with out.open("w") as stdout:
        roll = subprocess.Popen([str(hvd.bin / "hvdcluster"), "up", "hosts.yaml", "--rolling", "--batch", "1",
                                 "--poll", "1", "--max-wait", "600", "--json"], cwd=hvd.cwd, stdout=stdout,
                                stderr=subprocess.PIPE, text=True)
        err, told = [], None
        try:
            for line in roll.stderr:
                err.append(line)
                if line.startswith("  node3: waiting (up to") and told is None:
                    # node3 keeps the roll's mark while it waits (drained): the mark is there, beside the job's lease
                    held = run_dir(lab3, 3)
                    assert [n.split("-")[0] for n in held] == ["job", "roll"], held
                    beside = hvd("run", "hosts.yaml", "--limit", "node1", "-np", "1", "--", "python", "-c", "pass")
                    assert beside.returncode == 0, beside.stderr[-3000:]
                    told = time.time()
                    assert lab3.exec(3, "touch", END_FLAG).returncode == 0  # the job ends by itself
                    job.wait(timeout=60)
            roll.wait(timeout=60)
        finally:
            for proc in (roll, job):
                if proc.poll() is None:
                    proc.kill()
    text = "".join(err)
    assert roll.returncode == 0, text[-4000:]
    assert job.returncode == 0 and told is not None, (text[-3000:], job.communicate())
    doc = json.loads(out.read_text())["rolling"]
    assert doc["done"] == ["node1", "node2", "node3"] and not doc["skipped"] and not doc["failed"], doc
    batches = doc["batches"]
    assert [b["nodes"] for b in batches] == [["node1"], ["node2"], ["node3"]]
    assert [b["proven_with"] for b in batches] == [["node1"], ["node1", "node2"], ["node1", "node2", "node3"]]
    assert all(b["ok"] for b in batches)
    assert all(one["ended"] <= two["started"] for one, two in zip(batches, batches[1:]))  # one node at a time
    # only what the change reaches: the env and what is built on it, never the pre-flight, the base or Open MPI
    # (the plays' argument checks run on the controller as a task of no role; a role's own check, where Ansible
    # still runs one, is tagged `always`)
    assert "inputs changed since the last converge: hvd_pyenv_packages, hvd_stack (read from hvd_pyenv on)" in text
    for batch in batches:
        ran = {str(e["event_data"].get("role", "")).rsplit(".", 1)[-1] for e in run_events(batch["log"])
               if e.get("event") == "runner_on_ok"
               and not e["event_data"].get("task", "").startswith("Validating arguments against arg spec")}
        assert {"hvd_pyenv", "hvd_horovod", "hvd_verify"} <= ran, (batch["nodes"], sorted(ran))
        assert not ran & {"hvd_preflight", "hvd_base", "hvd_ssh_mesh", "hvd_openmpi"}, (batch["nodes"], sorted(ran))
        # and so nothing the mesh and mpirun rely on: the post-flight says why it does not test them again
        proven = task_outcomes(batch["log"])
        assert proven["Say why the mesh and mpirun are not tested again"] == {"ok"}, (batch["nodes"], proven)
        assert proven["Start one process per node with mpirun and collect the hostnames"] == {"skipped"}, proven
    assert batches[2]["started"] >= told  # node3 only once its job was over
    # the lease names who launched it on the controller, and the launcher's pid there
    assert re.search(rf"node3: waiting \(up to 600 s\): running job \S+ of {getpass.getuser()} \(pid \d+ on ", text), \
        text[-3000:]
    assert "changed and proven: node1, node2, node3" in text
    assert [run_dir(lab3, i) for i in (1, 2, 3)] == [[], [], []]
    rc, check = hvd.check_json()
    assert rc == 0, check
    assert all(lab3.exec(i, "/opt/hvd/env/bin/python", "-c", "import six").returncode == 0 for i in (1, 2, 3))
    rc, doc, err = hvd.up_json("--rolling", "--batch", "1")
    assert rc == 0 and doc["rolling"]["batches"] == [] and doc["rolling"]["in_sync"] == lab3.node_names, err[-3000:]
    assert "nothing to roll: every node is in its desired state" in err


@pytest.mark.heavy
def test_a_busy_canary_stops_the_roll_and_a_failed_canary_leaves_the_others_untouched(hvd, lab3: Lab) -> None:
    """A job on node3 past --max-wait: the canary node3 is skipped and named, the job not interrupted, nothing changed.
    The job's launcher then dies by SIGKILL: its lease stays on node3 but no longer counts. `run` refuses a node that
    carries a live roll mark. A canary whose converge cannot be proven (its OS release changed by hand: no role
    repairs it) stops a roll of every node (`--full`): node1 and node2 are never touched. Without `--full` the roll
    converges no node for it: the drift is named as the operator's."""
    from hvdcluster import jobs

    job = start_job(hvd, lab3, 3)
    try:
        rc, doc, err = hvd.up_json("--rolling", "--full", "--canary", "node3", "--max-wait", "3", "--poll", "1")
        assert rc == 1, err[-3000:]
        roll = doc["rolling"]
        assert roll["done"] == [] and roll["batches"] == [] and roll["untouched"] == ["node1", "node2"], roll
        assert list(roll["skipped"]) == ["node3"] and roll["skipped"]["node3"][0].startswith("running job "), roll
        assert "node3: skipped, still busy after 3 s" in err and "the canary node3 was not changed" in err
        assert job.poll() is None  # not interrupted
        job.send_signal(signal.SIGKILL)
        job.wait(timeout=30)
    finally:
        if job.poll() is None:
            job.kill()
        lab3.exec(3, "touch", END_FLAG)  # its ranks outlive a killed launcher (no terminal): end them too
    [lease] = run_dir(lab3, 3)
    assert lease.startswith("job-")

    mark = jobs.mine(jobs.ROLL, "20261126T001901-1", command=["hvdcluster", "up", "--rolling"])  # this process's
    put = lab3.exec(2, "sh", "-c", f"umask 077 && printf '%s\\n' '{json.dumps(mark)}' > "
                    f"/run/hvdcluster/{jobs.file_name(mark)}", user=lab3.user)
    assert put.returncode == 0, put.stderr
    try:
        proc = hvd("run", "hosts.yaml", "--limit", "node2", "-np", "1", "--", "python", "-c", "pass")
        assert proc.returncode == 1 and "node2: being changed by hvdcluster up --rolling 20261126T001901-1" in \
            proc.stderr, proc.stderr[-3000:]
        assert run_dir(lab3, 2) == [jobs.file_name(mark)]  # its own lease taken back
    finally:
        lab3.exec(2, "rm", "-f", f"/run/hvdcluster/{jobs.file_name(mark)}")

    broken = lab3.exec(3, "sh", "-c", "cp -P /etc/os-release /root/os-release.saved && "
                                      "sed 's/^VERSION_ID=.*/VERSION_ID=\"13\"/' /usr/lib/os-release > /root/osr "
                                      "&& rm /etc/os-release && cp /root/osr /etc/os-release")
    assert broken.returncode == 0, broken.stderr
    before = {i: lab3.exec(i, "sh", "-c", "stat -c %Y /etc/ansible/facts.d/*.fact | md5sum").stdout for i in (1, 2)}
    try:
        rc, doc, err = hvd.up_json("--rolling", "--canary", "node3")
        assert rc == 1 and doc["rolling"]["batches"] == [] and list(doc["rolling"]["by_hand"]) == ["node3"], err[-3000:]
        assert "not repaired: node3: os.release" in err and "nothing to roll" in err
        rc, doc, err = hvd.up_json("--rolling", "--full", "--canary", "node3", "--batch", "2", "--max-wait", "30",
                                   "--poll", "1")
        assert rc == 1, err[-3000:]
        roll = doc["rolling"]
        assert re.search(rf"node3: job \S+ of {getpass.getuser()} .* no longer counts: its pid \d+ is gone", err), \
            err[-3000:]
        assert [b["nodes"] for b in roll["batches"]] == [["node3"]] and not roll["batches"][0]["ok"], roll
        assert list(roll["failed"]) == ["node3"] and "os.release" in roll["failed"]["node3"], roll["failed"]
        assert roll["done"] == [] and roll["untouched"] == ["node1", "node2"], roll
        assert "untouched (their old state): node1, node2" in err
        assert {i: lab3.exec(i, "sh", "-c", "stat -c %Y /etc/ansible/facts.d/*.fact | md5sum").stdout
                for i in (1, 2)} == before
        assert [run_dir(lab3, i) for i in (1, 2, 3)] == [[], [], []]  # the stale lease went with the roll's look
    finally:
        lab3.exec(3, "sh", "-c", "rm -f /etc/os-release && cp -P /root/os-release.saved /etc/os-release")


# ------------------------------------------------------------------------------------------ rolling under Slurm

SLURM_CONF = """\
ClusterName=hvdlab
SlurmctldHost=node1
SlurmUser=slurm
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdSpoolDir=/var/spool/slurmd
StateSaveLocation=/var/spool/slurmctld
SlurmctldLogFile=/var/log/slurmctld.log
SlurmdLogFile=/var/log/slurmd.log
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
NodeName=node[1-3] CPUs=1 State=UNKNOWN
PartitionName=lab Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def slurm_node(lab: Lab, node: str) -> dict[str, str]:
    """Slurm's record of a node, as `scontrol -o show node` prints it (asked on node1, the controller)."""
    from hvdcluster.jobs import slurm_fields

    proc = lab.exec(1, "scontrol", "-o", "show", "node", node)
    assert proc.returncode == 0, proc.stderr
    return slurm_fields(proc.stdout.strip())


@pytest.fixture
def slurm(lab3: Lab):
    """Real Slurm on the 3 nodes (Debian's slurmctld on node1, slurmd and munge on each, one munge key), stopped and
    removed afterwards; returns once the three nodes are idle."""
    setup = ("set -e; export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; "
             "apt-get install -y -qq --no-install-recommends slurmd slurmctld slurm-client munge >/dev/null 2>&1")
    for i in (1, 2, 3):
        proc = lab3.exec(i, "sh", "-c", setup)
        assert proc.returncode == 0, proc.stderr[-2000:]
    key = subprocess.run(["docker", "exec", lab3.container(1), "cat", "/etc/munge/munge.key"], capture_output=True,
                         check=True).stdout
    for i in (1, 2, 3):
        for path, data, mode in (("/etc/munge/munge.key", key, "0400"), ("/etc/slurm/slurm.conf", SLURM_CONF.encode(),
                                                                          "0644")):
            subprocess.run(["docker", "exec", "-i", lab3.container(i), "sh", "-c", f"cat > {path} && chmod {mode} "
                            f"{path}"], input=data, check=True)
        lab3.exec(i, "chown", "munge:munge", "/etc/munge/munge.key")
        start = ("install -d -o munge -g munge /run/munge && runuser -u munge -- munged && install -d /var/spool/slurmd"
                 + (" && install -d -o slurm -g slurm /var/spool/slurmctld && slurmctld" if i == 1 else ""))
        proc = lab3.exec(i, "sh", "-c", start)
        assert proc.returncode == 0, proc.stderr
    for i in (1, 2, 3):
        assert lab3.exec(i, "slurmd").returncode == 0
    deadline = time.monotonic() + 60
    while lab3.exec(1, "sinfo", "-h", "-t", "idle", "-o", "%D").stdout.strip() != "3":
        assert time.monotonic() < deadline, lab3.exec(1, "sinfo").stdout
        time.sleep(1)
    yield lab3
    for i in (1, 2, 3):
        lab3.exec(i, "sh", "-c", "pkill -x slurmd; pkill -x slurmctld; pkill -x munged; "
                                 "DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq slurmd slurmctld slurm-client "
                                 "munge >/dev/null 2>&1; rm -f /tmp/hvd-slurm-end")


@pytest.mark.heavy
def test_under_slurm_a_roll_drains_waits_for_the_slurm_job_and_resumes_only_what_it_drained(hvd, slurm: Lab) -> None:
    """Real Slurm on the 3 nodes, every node drifted (its MPI package unheld): an operator drained node1 ("bad fan"),
    a Slurm batch job runs on node3. `up --rolling --batch 2` drains node2 (node1 already is) and repairs node1 and
    node2; drains node3 so no new job starts there, waits while the Slurm job runs, repairs node3 only once the job
    ended by itself, and resumes node2 and node3, the nodes it drained. node1 stays drained with the operator's
    reason. Then a drain a killed roll left on node2 is taken back by the next roll, and node1's is not."""
    lab3 = slurm
    flag = "/tmp/hvd-slurm-end"
    for i in (1, 2, 3):
        assert lab3.exec(i, "apt-mark", "unhold", "openmpi-bin").returncode == 0
    assert lab3.exec(1, "scontrol", "update", "nodename=node1", "state=DRAIN", "reason=bad fan").returncode == 0
    job = lab3.exec(1, "sh", "-c", f"cd /tmp && sbatch -w node3 --wrap 'while [ ! -e {flag} ]; do sleep 0.5; done' "
                                   "--parsable")
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip()
    deadline = time.monotonic() + 60
    while "ALLOCATED" not in slurm_node(lab3, "node3").get("State", ""):
        assert time.monotonic() < deadline, slurm_node(lab3, "node3")
        time.sleep(0.5)
    roll = subprocess.Popen([str(hvd.bin / "hvdcluster"), "up", "hosts.yaml", "--rolling", "--batch", "2",
                             "--poll", "1", "--max-wait", "600", "--json"], cwd=hvd.cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    err, told, node3_while_waiting = [], None, {}
    try:
        for line in roll.stderr:
            err.append(line)
            if line.startswith("  node3: waiting (up to") and told is None:
                assert f"Slurm job {job_id} " in line, line
                node3_while_waiting = slurm_node(lab3, "node3")
                told = time.time()
                lab3.exec(3, "touch", flag)  # the Slurm job ends by itself
        out = roll.stdout.read()
        roll.wait(timeout=60)
    finally:
        if roll.poll() is None:
            roll.kill()
    text = "".join(err)
    assert roll.returncode == 0 and told is not None, text[-4000:]
    assert "DRAIN" in node3_while_waiting["State"] and node3_while_waiting["Reason"].startswith("hvdcluster roll "), \
        node3_while_waiting
    doc = json.loads(out)["rolling"]
    assert [b["nodes"] for b in doc["batches"]] == [["node1", "node2"], ["node3"]], doc
    assert doc["batches"][1]["started"] >= told and doc["done"] == ["node1", "node2", "node3"]
    assert doc["slurm_drained"] == ["node2", "node3"], doc
    assert "node1: already drained or down in Slurm (bad fan): left so after" in text
    assert "node3: resumed in Slurm" in text and "node2: resumed in Slurm" in text
    for node in ("node2", "node3"):
        state = slurm_node(lab3, node)
        assert "DRAIN" not in state["State"] and "Reason" not in state, state
    assert "DRAIN" in slurm_node(lab3, "node1")["State"] and slurm_node(lab3, "node1")["Reason"] == "bad fan"
    assert all(lab3.exec(i, "sh", "-c", "apt-mark showhold | grep -qx openmpi-bin").returncode == 0 for i in (1, 2, 3))
    assert lab3.exec(1, "squeue", "-h").stdout.strip() == ""
    # A roll killed outright leaves its drain behind: the next roll (here with nothing to change) takes it back.
    gone = "hvdcluster roll 20260101T000000-4242"
    assert lab3.exec(1, "scontrol", "update", "nodename=node2", "state=DRAIN", f"reason={gone}").returncode == 0
    again = hvd("up", "hosts.yaml", "--rolling", "--json")
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout)["rolling"]["slurm_orphans_resumed"] == {"node2": gone.split()[-1]}
    assert f"node2: resumed in Slurm: {gone} drained it and is gone" in again.stderr, again.stderr[-3000:]
    assert "DRAIN" not in slurm_node(lab3, "node2")["State"]
    assert slurm_node(lab3, "node1")["Reason"] == "bad fan"  # the operator's drain stays
    # The controller gone (slurmctld stopped) while node2 needs a change: node2's Slurm jobs cannot be read, so the
    # roll does not change it, names why, and exits 1.
    assert lab3.exec(2, "apt-mark", "unhold", "openmpi-bin").returncode == 0
    assert lab3.exec(1, "pkill", "-x", "slurmctld").returncode == 0
    try:
        blind = hvd("up", "hosts.yaml", "--rolling", "--json")
        assert blind.returncode == 1, blind.stderr[-3000:]
        rolled = json.loads(blind.stdout)["rolling"]
        assert rolled["done"] == [] and list(rolled["skipped"]) == ["node2"], rolled
        assert rolled["skipped"]["node2"][0].startswith("Slurm: "), rolled["skipped"]
        assert "Unable to contact slurm controller" in blind.stderr, blind.stderr[-3000:]
        assert lab3.exec(2, "sh", "-c", "apt-mark showhold | grep -qx openmpi-bin").returncode != 0  # not changed
    finally:
        lab3.exec(2, "apt-mark", "hold", "openmpi-bin")
