"""hvd_node_state's mesh items (the managed blocks, the cluster key) and how a rank is launched (the variables, files
and ssh settings a rank meets), read from a fake root (real files in tmp_path, modules/node_tree.py).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ansible_collections.hvd.cluster.tests.unit.plugins.modules.node_tree import KNOWN_HOSTS, OTHER_KEY, PREFIX, look
# a fixture: the tests below ask for it by name
from ansible_collections.hvd.cluster.tests.unit.plugins.modules.node_tree import node  # noqa: F401
from ansible_collections.hvd.cluster.tests.unit.plugins.support import write

from ansible_collections.hvd.cluster.plugins.modules import hvd_tree
from ansible_collections.hvd.cluster.plugins.module_utils import hvd_files, hvd_state_mesh


# ------------------------------------------------------------------------------------------ mesh and blocks


def test_digests_are_stable_and_independent_of_order(node: Path) -> None:
    first = look(node, packages=["openmpi-bin", "nvidia-driver"])
    assert look(node, packages=["nvidia-driver", "openmpi-bin"]) == first
    assert list(look(node, packages=["nvidia-driver", "openmpi-bin"])) == list(first)
    blocks = KNOWN_HOSTS.split("# BEGIN")
    write(node, "/etc/ssh/ssh_known_hosts", "# BEGIN".join([blocks[0], blocks[2], blocks[1], blocks[3]]))
    prefix = node / PREFIX.lstrip("/")
    hvd_tree.write_manifest(str(prefix), set())
    with_manifest = look(node)
    manifest = json.loads((prefix / ".hvd-manifest").read_text())
    (prefix / ".hvd-manifest").write_text(json.dumps(dict(reversed(list(manifest.items())))))
    again = look(node)
    assert again == with_manifest and again["mesh.known_hosts"] == first["mesh.known_hosts"]


def test_the_managed_blocks_show_what_changed(node: Path) -> None:
    state = look(node)
    write(node, "/etc/ssh/ssh_known_hosts", KNOWN_HOSTS.replace("AAAAm1", "AAAAm9"))  # another cluster's block
    assert look(node)["mesh.known_hosts"] == state["mesh.known_hosts"]
    write(node, "/etc/ssh/ssh_known_hosts", KNOWN_HOSTS.replace("AAAAn2", "AAAAn9"))
    assert look(node)["mesh.known_hosts"] != state["mesh.known_hosts"]
    write(node, "/etc/hosts",
          "127.0.0.1 localhost\n# BEGIN hvdcluster lab nodes\n10.0.0.1 n1\n# END hvdcluster lab nodes\n")
    assert state["base.hosts"] == "10.0.0.1 n1\n10.0.0.2 n2"  # small blocks are read as text: check names the line
    assert look(node)["base.hosts"] == "10.0.0.1 n1"
    assert look(node, cluster="lab2")["base.hosts"] == "absent"
    assert look(node, cluster="lab2")["mesh.ssh_config"] == "absent"
    assert look(node, user="root")["mesh.ssh_config"] == "absent"
    write(node, "/etc/profile.d/hvd-cuda.sh", "export CUDA_HOME=/usr/local/cuda-12.4\n")
    assert look(node)["profile.hvd-cuda.sh"] != state["profile.hvd-cuda.sh"]
    (node / "usr/local/share/ca-certificates/hvdcluster-ca.crt").unlink()
    assert look(node)["base.ca"] == "absent"


def test_the_cluster_key_is_compared_by_type_and_base64(node: Path) -> None:
    assert look(node)["mesh.authorized"] is True  # behind options, under another comment
    assert look(node, cluster_public_key=OTHER_KEY)["mesh.authorized"] is False
    assert look(node, cluster_public_key="")["mesh.authorized"] is False
    assert look(node, user="nobody")["mesh.authorized"] is False
    assert look(node, user="root")["mesh.authorized"] is False


# ------------------------------------------------------------------------------------------ how a rank is launched


def test_the_variables_ssh_gives_a_command_are_named_by_file_and_line(node: Path) -> None:
    """pam_env's files and, only where sshd's PermitUserEnvironment (here in an Include'd file) lets it, the user's
    ~/.ssh/environment; sshd's own lines that give variables. Comments and blank lines are not settings."""
    assert look(node)["launch.env"] == "absent"
    write(node, "/etc/environment", "# the site's\nOMPI_MCA_mpi_yield_when_idle=1\n\nPYTHONPATH=/srv/planted\n")
    write(node, "/etc/security/pam_env.conf", "# VARIABLE [DEFAULT=[value]] [OVERRIDE=[value]]\n"
                                              "LD_PRELOAD DEFAULT=/opt/x/libhook.so\n")
    write(node, "/home/hvd/.pam_environment", "NCCL_DEBUG DEFAULT=INFO\n")
    write(node, "/home/hvd/.ssh/environment", "HOROVOD_FUSION_THRESHOLD=0\n")
    write(node, "/etc/ssh/sshd_config", "Include /etc/ssh/sshd_config.d/*.conf\nPort 22\nAcceptEnv LANG LC_*\n")
    state = look(node)
    assert state["launch.env"].split("\n") == [
        "/etc/environment: OMPI_MCA_mpi_yield_when_idle=1", "/etc/environment: PYTHONPATH=/srv/planted",
        "/etc/security/pam_env.conf: LD_PRELOAD DEFAULT=/opt/x/libhook.so",
        "/home/hvd/.pam_environment: NCCL_DEBUG DEFAULT=INFO"]
    assert state["launch.sshd"] == "/etc/ssh/sshd_config: AcceptEnv LANG LC_*"
    write(node, "/etc/ssh/sshd_config.d/site.conf", "PermitUserEnvironment=yes\nSetEnv PYTHONHOME=/opt/py\n")
    state = look(node)
    assert state["launch.env"].endswith("\n/home/hvd/.ssh/environment: HOROVOD_FUSION_THRESHOLD=0")
    assert state["launch.sshd"].split("\n") == [
        "/etc/ssh/sshd_config: AcceptEnv LANG LC_*", "/etc/ssh/sshd_config.d/site.conf: PermitUserEnvironment=yes",
        "/etc/ssh/sshd_config.d/site.conf: SetEnv PYTHONHOME=/opt/py"]


def test_the_mpi_nccl_and_linker_files_a_rank_reads_are_named_but_the_roles_own_ldconf_files(node: Path) -> None:
    """Open MPI's parameter files beside the mpirun on the SSH PATH, Debian's and the user's; NCCL's system and user
    files; the linker's preload and every file ld.so.conf includes, but the hvd-*.conf the roles write (ldconf.*)."""
    before = look(node)
    assert [before[k] for k in ("launch.mpi", "launch.nccl", "launch.ld")] == ["absent"] * 3
    write(node, "/opt/openmpi-4.1.6/etc/openmpi-mca-params.conf", "# defaults\nbtl_tcp_if_include = eth9\n")
    write(node, "/etc/openmpi/openmpi-mca-params.conf", "btl = ^openib\n")
    write(node, "/home/hvd/.openmpi/mca-params.conf", "pml = ob1\n")
    write(node, "/etc/nccl.conf", "NCCL_P2P_DISABLE=1\n")
    write(node, "/home/hvd/.nccl.conf", "NCCL_SOCKET_IFNAME=eth9\n")
    write(node, "/etc/ld.so.preload", "/opt/x/libhook.so\n")
    write(node, "/etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n")
    write(node, "/etc/ld.so.conf.d/zz-other.conf", "/opt/other/lib\n")
    state = look(node)
    assert state["launch.mpi"].split("\n") == [
        "/opt/openmpi-4.1.6/etc/openmpi-mca-params.conf: btl_tcp_if_include = eth9",
        "/etc/openmpi/openmpi-mca-params.conf: btl = ^openib", "/home/hvd/.openmpi/mca-params.conf: pml = ob1"]
    assert state["launch.nccl"] == "/etc/nccl.conf: NCCL_P2P_DISABLE=1\n/home/hvd/.nccl.conf: NCCL_SOCKET_IFNAME=eth9"
    assert state["launch.ld"].split("\n") == [
        "/etc/ld.so.preload: /opt/x/libhook.so", "/etc/ld.so.conf: include /etc/ld.so.conf.d/*.conf",
        "/etc/ld.so.conf.d/zz-other.conf: /opt/other/lib"]  # hvd-openmpi.conf: the ldconf.* item, hvd_openmpi's
    assert state["ldconf.hvd-openmpi.conf"] == before["ldconf.hvd-openmpi.conf"]


def test_hvd_openmpis_own_block_is_the_nodes_single_copy_item_not_a_launch_setting(node: Path) -> None:
    """The block hvd_openmpi writes where a node's ranks may not read each other's memory is read apart from the
    operator's lines around it: ``mpi.single_copy`` (per node: a container beside a bare-metal node), held against
    the node's record; the lines around it stay ``launch.mpi``. Its marker is the role's (roles/hvd_openmpi)."""
    role = (Path(__file__).parents[4] / "roles/hvd_openmpi/tasks/main.yml").read_text()
    assert f'marker: "# {{mark}} {hvd_state_mesh.MPI_BLOCK}"' in role
    path = "/etc/openmpi/openmpi-mca-params.conf"
    assert look(node)["mpi.single_copy"] == "absent"
    block = (f"# BEGIN {hvd_state_mesh.MPI_BLOCK}\n# refused here: copy through the shared segment\n"
             f"btl_vader_single_copy_mechanism = none\n# END {hvd_state_mesh.MPI_BLOCK}\n")
    write(node, path, "# the site's\nbtl = ^openib\n" + block + "pml = ob1\n")
    state = look(node)
    assert state["launch.mpi"] == f"{path}: btl = ^openib\n{path}: pml = ob1"
    assert state["mpi.single_copy"] == f"{path}: btl_vader_single_copy_mechanism = none"
    write(node, path, block)
    assert look(node)["launch.mpi"] == "absent"
    write(node, path, block.replace("= none", "= cma"))  # edited inside the block: the node's item, hvd_openmpi's
    assert look(node)["mpi.single_copy"] == f"{path}: btl_vader_single_copy_mechanism = cma"
    # the same marker in the user's own file (which the user may write) hides nothing: the user's lines, launch.mpi
    write(node, "/home/hvd/.openmpi/mca-params.conf", block.replace("= none", "= cma") + "pml = ob1\n")
    state = look(node)
    assert state["launch.mpi"] == ("/home/hvd/.openmpi/mca-params.conf: btl_vader_single_copy_mechanism = cma\n"
                                   "/home/hvd/.openmpi/mca-params.conf: pml = ob1")
    assert state["mpi.single_copy"] == f"{path}: btl_vader_single_copy_mechanism = cma"


def test_a_launch_item_is_bounded_and_names_an_unreadable_file(node: Path) -> None:
    write(node, "/etc/environment", "".join(f"V{i}={'x' * 300}\n" for i in range(60)))
    lines = look(node)["launch.env"].split("\n")
    assert len(lines) == hvd_state_mesh.LAUNCH_LINES + 1 and all(len(line) <= hvd_files.LINE_KEPT for line in lines)
    assert lines[-1].startswith("/etc/environment: +10 more lines ")
    if os.geteuid() != 0:  # root reads any file
        (node / "etc/environment").chmod(0)
        assert look(node)["launch.env"] == "/etc/environment: unreadable"


@pytest.mark.skipif(not shutil.which("ssh"), reason="no OpenSSH client")
def test_what_ssh_makes_of_each_peers_name_is_read_with_ssh_g(node: Path) -> None:
    """Real `ssh -G` with the user's config: a Host block before ours that sends n2 elsewhere shows in n2's item
    only, by the options that changed."""
    state = look(node, peers=["n1", "n2"])
    n1 = state["launch.ssh.n1"].split("\n")
    assert {"hostname n1", "port 22", "identityfile ~/.ssh/hvd_lab"} <= set(n1)
    assert state["launch.ssh.n2"].split("\n") == [line.replace("n1", "n2") for line in n1]
    config = node / "home/hvd/.ssh/config"
    config.write_text("Host n2\n  Port 2222\n  ProxyCommand nc jump 22\n" + config.read_text())
    again = look(node, peers=["n1", "n2"])
    assert again["launch.ssh.n1"] == state["launch.ssh.n1"]
    n2 = again["launch.ssh.n2"].split("\n")
    assert "port 2222" in n2 and "proxycommand nc jump 22" in n2 and "port 22" not in n2
    assert "launch.ssh.n1" not in look(node)  # no peers named: no such item


@pytest.mark.skipif(not shutil.which("ssh") or os.geteuid() != 0, reason="needs root and an OpenSSH client")
def test_a_reader_running_as_root_resolves_as_the_login_user() -> None:
    """On a node (root "/"), a look run as root (a role's) runs `ssh -G` with the login user's ids: their config, their
    known_hosts; a user the node does not have reads absent."""
    state = hvd_state_mesh.ssh_resolved("/", "nobody", ["n1"])
    assert "user nobody" in state["launch.ssh.n1"].split("\n")
    assert hvd_state_mesh.ssh_resolved("/", "no-such-user-here", ["n1"]) == {"launch.ssh.n1": "absent"}


def test_keys_beyond_the_clusters_are_listed_by_fingerprint(node: Path, tmp_path: Path) -> None:
    """As ssh-keygen -l names them; the cluster key (here behind options) is not one of them."""
    assert look(node)["mesh.other_keys"] == "ssh-rsa SHA256:" + base64.b64encode(
        hashlib.sha256(b"AAAAB3other").digest()).decode().rstrip("=") + " x"  # not base64: its bytes as they are
    if not shutil.which("ssh-keygen"):
        return
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "mallory@elsewhere", "-f",
                    str(tmp_path / "k")], check=True)
    keys = node / "home/hvd/.ssh/authorized_keys"
    keys.write_text(keys.read_text() + (tmp_path / "k.pub").read_text())
    listed = subprocess.run(["ssh-keygen", "-l", "-f", str(tmp_path / "k.pub")], capture_output=True, text=True,
                            check=True).stdout.split()  # 256 SHA256:... mallory@elsewhere (ED25519)
    assert look(node)["mesh.other_keys"].split("\n")[1] == f"ssh-ed25519 {listed[1]} mallory@elsewhere"
    assert look(node, cluster_public_key="")["mesh.other_keys"].count("\n") == 2  # every key then
