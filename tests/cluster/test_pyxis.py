"""Container jobs under Slurm (issue 53, item 6): hosts.yaml's `scheduler.containers: pyxis` builds NVIDIA's enroot
and pyxis once (hvd_pyxis: from release tarballs, against the nodes' Slurm), installs them at one prefix on both nodes
and names pyxis in Slurm's plugstack; a job then runs with `srun --container-image=<a local squashfs file>` on both
nodes as the login user (no registry is reachable here: the image is made on the nodes from their own files).
`check` names a removed plugin, an edited plugstack and a turned enroot link, and `up` puts them back.

enroot needs unprivileged user namespaces: Docker's default seccomp profile refuses them, so these nodes run with
`--security-opt seccomp=unconfined` (a real node has no such filter). The releases are published only on GitHub: the
tarballs are read from ../shared/sources (HVD_PYXIS_SOURCES names another folder); without them the suite is skipped,
saying so. Heavy: two C builds and a third Slurm lab.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest

from tests.cluster.conftest import SUDO_USER, Cli, changed_tasks, share_the_cores
from tests.lab.cluster import Lab
from tests.lab.stacks import cpu_stack

pytestmark = [pytest.mark.containers, pytest.mark.heavy]

ROOT = Path(__file__).resolve().parents[2]
SOURCES = Path(os.environ.get("HVD_PYXIS_SOURCES") or ROOT.parent / "shared" / "sources")
ENROOT = SOURCES / "enroot-4.1.2.tar.gz"
PYXIS = SOURCES / "pyxis-0.24.0.tar.gz"
PREFIX = "/opt/hvd/pyxis"
IMAGE = "/srv/images/tiny.sqsh"
# What the image holds: a shell and a few tools with the libraries they load, the node's /etc (users, groups: enroot's
# hooks read them), and a file that says which image a job ran in.
MAKE_IMAGE = r"""
set -e
root=$(mktemp -d)
mkdir -p "$root/usr/bin" "$root/usr/lib" "$root/usr/lib64" "$root/proc" "$root/sys" "$root/dev" "$root/tmp" \
         "$root/run" "$root/home" "$root/root" "$root/var"
ln -s usr/bin "$root/bin"; ln -s usr/lib "$root/lib"; ln -s usr/lib64 "$root/lib64"; ln -s usr/bin "$root/usr/sbin"
ln -s usr/bin "$root/sbin"
for tool in bash sh dash cat env hostname id ls mkdir rm sed grep awk mawk ln chmod readlink; do
    path=$(command -v "$tool") || continue
    cp -L "$path" "$root/usr/bin/"
    ldd "$path" 2>/dev/null | grep -o '/[^ ]*' | while read -r lib; do cp -L --parents "$lib" "$root/" 2>/dev/null || true; done
done
cp -a /etc "$root/"
echo "hvd tiny image" > "$root/etc/hvd-image"
mkdir -p "$(dirname "$IMAGE")"
mksquashfs "$root" "$IMAGE" -noappend -quiet -comp gzip
chmod 0644 "$IMAGE"
rm -rf "$root"
"""


@pytest.fixture(scope="module")
def labp(packaged_image: str, tmp_path_factory: pytest.TempPathFactory) -> Lab:
    if not (ENROOT.is_file() and PYXIS.is_file()):
        pytest.skip(f"enroot 4.1.2 and pyxis 0.24.0 are published only on GitHub: no tarballs in {SOURCES} "
                    "(HVD_PYXIS_SOURCES names a folder holding enroot-4.1.2.tar.gz and pyxis-0.24.0.tar.gz)")
    scheduler = {"kind": "slurm", "controller": "node1", "partition": "boxes", "containers": "pyxis",
                 "enroot": {"url": str(ENROOT)}, "pyxis": {"url": str(PYXIS)}}
    unconfined = ["--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined"]
    lab = Lab("cpx", 2, tmp_path_factory.mktemp("cpx"), slots=1, stack=cpu_stack(), user=SUDO_USER,
              image=packaged_image, scheduler=scheduler, docker_args={1: unconfined, 2: unconfined})
    lab.up()
    share_the_cores(lab)
    yield lab
    lab.down()


@pytest.fixture(scope="module")
def converged(installed: Path, labp: Lab) -> Cli:
    cli = Cli(installed, labp.workdir)
    rc, doc, err = cli.up_json()
    assert rc == 0, err[-6000:]
    for i in (1, 2):
        proc = labp.exec(i, "env", f"IMAGE={IMAGE}", "bash", "-c", MAKE_IMAGE)
        assert proc.returncode == 0, proc.stderr[-3000:]
    return cli


def srun(lab: Lab, *argv: str) -> tuple[int, str]:
    """srun on the controller node as the login user (a login shell: the PATH an operator has)."""
    command = shlex.join(["srun", "--partition=boxes", *argv])
    proc = lab.exec(1, "su", "-", SUDO_USER, "-c", command)
    return proc.returncode, proc.stdout + proc.stderr


def test_both_nodes_run_a_job_in_a_container_made_from_a_local_image(converged, labp: Lab) -> None:
    rc, out = srun(labp, "-N", "2", "--ntasks-per-node=1", f"--container-image={IMAGE}",
                   "bash", "-c", 'echo "$(cat /etc/hvd-image) on $(hostname) as $(id -un)"')
    assert rc == 0, out[-4000:]
    assert sorted(line for line in out.splitlines() if line.startswith("hvd tiny image")) == [
        f"hvd tiny image on node{i} as {SUDO_USER}" for i in (1, 2)], out
    for i in (1, 2):  # the same build everywhere: one key, one enroot
        fact = json.loads(labp.exec(i, "cat", "/etc/ansible/facts.d/hvd_pyxis.fact").stdout)
        assert (fact["version"], fact["enroot"], fact["prefix"]) == ("0.24.0", "4.1.2", PREFIX), fact
        for tool in ("enroot", "enroot-nsenter", "enroot-switchroot"):  # enroot runs its helpers by name
            assert labp.exec(i, "readlink", f"/usr/local/bin/{tool}").stdout.strip() == f"{PREFIX}/bin/{tool}"
    keys = {labp.exec(i, "cat", f"{PREFIX}/.hvd-pyxis-key").stdout for i in (1, 2)}
    assert len(keys) == 1


def test_enroot_keeps_a_jobs_container_in_the_users_own_folder_under_pyxis_runtime_path(converged, labp: Lab) -> None:
    """No job has a login session here (no XDG_RUNTIME_DIR): enroot's runtime folder is the one pyxis made for the user
    under its root-owned runtime path, not a folder under a world-writable /tmp or /run."""
    rc, out = srun(labp, "-N", "1", f"--container-image={IMAGE}", "bash", "-c", "echo ran")
    assert rc == 0 and "ran" in out, out[-4000:]
    uid = labp.exec(1, "id", "-u", SUDO_USER).stdout.strip()
    runtime = labp.exec(1, "stat", "-c", "%U %a", "/run/pyxis", f"/run/pyxis/{uid}").stdout.split("\n")
    assert runtime[:2] == ["root 755", f"{SUDO_USER} 700"], runtime
    assert labp.exec(1, "test", "-d", f"/run/pyxis/{uid}/enroot").returncode == 0


def test_a_second_up_changes_nothing(converged, labp: Lab) -> None:
    rc, doc, err = converged.up_json("--full")
    assert rc == 0, err[-4000:]
    for node in ("node1", "node2"):
        assert changed_tasks(doc["log"], node) == set(), node


def test_a_removed_plugin_an_edited_plugstack_and_a_turned_enroot_link_are_named_and_put_back(converged,
                                                                                              labp: Lab) -> None:
    assert labp.exec(2, "rm", f"{PREFIX}/lib/slurm/spank_pyxis.so").returncode == 0
    assert labp.exec(2, "sh", "-c", "echo 'optional /tmp/other.so' >> /etc/slurm/plugstack.conf.d/pyxis.conf"
                     ).returncode == 0
    assert labp.exec(1, "ln", "-sfn", "/tmp/enroot", "/usr/local/bin/enroot").returncode == 0
    rc, doc = converged.check_json()
    assert rc != 0
    named = {(node, d["item"]): d["role"] for node, items in doc["drifted"].items() for d in items}
    assert named == {("node2", "pyxis.files"): "hvd_pyxis", ("node2", "pyxis.config.pyxis.conf"): "hvd_pyxis",
                     ("node1", "pyxis.links"): "hvd_pyxis"}, doc["drifted"]
    rc, doc, err = converged.up_json()
    assert rc == 0, err[-4000:]
    rc, doc = converged.check_json()
    assert rc == 0, doc.get("drifted")
    rc, out = srun(labp, "-N", "2", "--ntasks-per-node=1", f"--container-image={IMAGE}", "cat", "/etc/hvd-image")
    assert rc == 0 and out.count("hvd tiny image") == 2, out[-4000:]
