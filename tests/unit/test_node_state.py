"""hvd_node_state: one look at a node, read from a fake root (real files in tmp_path), and as Ansible runs it."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_modules import run_module

from ansible_collections.hvd.cluster.plugins.modules import hvd_tree
from ansible_collections.hvd.cluster.plugins.module_utils import hvd_driver, hvd_files, hvd_state, hvd_state_env, hvd_state_mesh, hvd_state_stack

CLUSTER = "lab"
PREFIX = "/opt/hvd/env"
SITE = PREFIX + "/lib/python3.11/site-packages"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIClusterKeyBase64 hvdcluster-lab"
OTHER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOtherKeyBase64 someone@else"

DPKG = """\
Package: openmpi-bin
Status: install ok installed
Priority: optional
Architecture: amd64
Version: 4.1.4-3+b1
Description: high performance message passing library
 a continuation line: Version: 9.9

Package: nvidia-driver
Status: hold ok installed
Architecture: amd64
Version: 535.161.08-1

Package: libnccl2
Status: deinstall ok config-files
Architecture: amd64
Version: 2.18.5-1+cuda12.2

Package: linux-image-amd64
Status: hold ok installed
Architecture: amd64
Version: 6.1.76-1
"""

KNOWN_HOSTS = """\
# a line of the admin's
# BEGIN hvdcluster lab n1
n1,10.0.0.1 ssh-ed25519 AAAAn1
# END hvdcluster lab n1
# BEGIN hvdcluster lab n2
n2,10.0.0.2 ssh-ed25519 AAAAn2
# END hvdcluster lab n2
# BEGIN hvdcluster lab2 m1
m1 ssh-ed25519 AAAAm1
# END hvdcluster lab2 m1
"""

EVERY_KEY = {
    "os.release", "os.kernel", "pkg.openmpi-bin", "pkg.openmpi-bin.hold", "pkg.openmpi-bin.guard", "driver.installed", "driver.loaded",
    "gpu.count", "cuda.version", "cuda.home", "cudnn.version", "cudnn.home", "nccl.version", "nccl.home",
    "nccl.header", "mpi.path", "mpi.version", "env.python", "env.key", "env.lock", "env.files", "env.manifest",
    "os.machine-id", "horovod.version",
    "horovod.record", "horovod.key", "horovod.checked", "mesh.authorized", "mesh.known_hosts", "mesh.ssh_config",
    "base.hosts", "base.fabric_interface", "base.ca", "base.run_dir", "mesh.other_keys", "launch.env", "launch.sshd",
    "launch.mpi", "launch.nccl", "launch.ld"}


def write(root: Path, path: str, text: str | bytes, mode: int = 0o644) -> Path:
    full = root / path.lstrip("/")
    full.parent.mkdir(parents=True, exist_ok=True)
    full.write_bytes(text.encode() if isinstance(text, str) else text)
    full.chmod(mode)
    return full


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_dist(root: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """A dist-info in the env's site-packages, as pip installs it: the files, METADATA and a RECORD whose hashes
    and sizes are computed from them (paths relative to site-packages, '../../../bin/x' for scripts)."""
    site = root / SITE.lstrip("/")
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nVersion: 0.0 in the description\n"
    (info / "METADATA").write_text(metadata)
    rows = []
    for rel, text in {**files, f"{info.name}/METADATA": metadata}.items():
        write(root, os.path.normpath(os.path.join(SITE, rel)), text)
        rows.append(f"{rel},{record_hash(text.encode())},{len(text.encode())}")
    rows.append(f"{files and next(iter(files)).split('/')[0]}/__pycache__/x.cpython-311.pyc,,")
    rows.append(f"{info.name}/RECORD,,")
    (info / "RECORD").write_text("\n".join(rows) + "\n")
    return info


@pytest.fixture()
def node(tmp_path: Path) -> Path:
    root = tmp_path / "node"
    write(root, "/etc/os-release", 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\n'
                                   'VERSION_ID="12"\nID=debian\n')
    write(root, "/var/lib/dpkg/status", DPKG)
    write(root, "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.161.08", b"\x7fELF")
    os.symlink("libnvidia-ml.so.535.161.08", root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")
    write(root, "/proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  "
                                               "535.161.08  Release Build  (dvs-builder@U16)\nGCC version: gcc 12\n")
    facts = "/etc/ansible/facts.d/"
    write(root, facts + "hvd_nvidia_driver.fact", json.dumps({"gpu_count": "2", "loaded": "535.161.08"}))
    write(root, facts + "hvd_cuda.fact", json.dumps({"version": "12.2.140", "home": "/usr/local/cuda-12.2"}))
    write(root, facts + "hvd_nccl.fact", json.dumps({"version": "2.19.3", "home": "/opt/nccl"}))
    write(root, facts + "hvd_base.fact", json.dumps({"fabric_address": "n1", "fabric_ip": "10.0.0.1",
                                                     "fabric_interface": "ib0"}))
    write(root, "/opt/nccl/include/nccl.h", "#define NCCL_MAJOR 2\n#define NCCL_MINOR 19\n#define NCCL_PATCH 3\n")
    write(root, facts + "hvd_openmpi.fact", json.dumps({"impl": "openmpi", "source": "source", "version": "4.1.6",
                                                        "mpirun": "/usr/local/bin/mpirun", "details": []}))
    write(root, "/opt/openmpi-4.1.6/bin/mpirun", "#!elf", 0o755)
    os.symlink("/opt/openmpi-4.1.6/bin/mpirun", write(root, "/usr/local/bin/x", "").parent / "mpirun")
    write(root, "/usr/bin/python3.11", "#!elf", 0o755)
    os.symlink("/usr/bin/python3.11", write(root, PREFIX + "/bin/python3", "").parent / "python")
    write(root, PREFIX + "/pyvenv.cfg", "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11.2\n")
    write(root, PREFIX + "/.hvd-env-key", "envkey123\n")
    write(root, PREFIX + "/hvd-requirements.lock", "filelock==3.13.1 --hash=sha256:aa\n")
    make_dist(root, "filelock", "3.13.1", {"filelock/__init__.py": "from ._api import x\n",
                                           "filelock/_api.py": "x = 1\n"})
    make_dist(root, "cloudpickle", "3.0.0", {"cloudpickle/__init__.py": "version = '3.0.0'\n"})
    write(root, SITE + "/cloudpickle/__pycache__/__init__.cpython-311.pyc", b"\xa7\r\r\n compiled")
    # hvd_tree's manifest of the env as it was unpacked; Horovod is installed into it afterwards.
    hvd_tree.write_manifest(str(root / PREFIX.lstrip("/")), {".hvdcluster", ".hvd-env-key"})
    make_dist(root, "Horovod", "0.28.1", {"horovod/__init__.py": "__version__ = '0.28.1'\n",
                                          "../../../bin/horovodrun": "#!python\n"})
    write(root, PREFIX + "/.hvd-horovod-key", "hvdkey456\n")
    write(root, PREFIX + "/.hvd-horovod-checked", "hvdkey456\n")
    write(root, "/etc/passwd", "root:x:0:0:root:/root:/bin/bash\nhvd:x:1000:1000::/home/hvd:/bin/bash\n")
    write(root, "/home/hvd/.ssh/authorized_keys", f"ssh-rsa AAAAB3other x\nfrom=\"10.0.0.0/8\" {KEY.rsplit(' ', 1)[0]} "
                                                  "renamed-comment\n")
    write(root, "/home/hvd/.ssh/config", "Host *\n  ServerAliveInterval 30\n# BEGIN hvdcluster lab\nHost n1 n2\n"
                                         "    IdentityFile ~/.ssh/hvd_lab\n# END hvdcluster lab\n")
    write(root, "/etc/ssh/ssh_known_hosts", KNOWN_HOSTS)
    write(root, "/etc/hosts", "127.0.0.1 localhost\n# BEGIN hvdcluster lab nodes\n10.0.0.1 n1\n10.0.0.2 n2\n"
                              "# END hvdcluster lab nodes\n")
    write(root, "/usr/local/share/ca-certificates/hvdcluster-ca.crt", "-----BEGIN CERTIFICATE-----\n")
    write(root, "/etc/profile.d/hvd-cuda.sh", "export CUDA_HOME=/usr/local/cuda-12.2\n")
    write(root, "/etc/profile.d/other.sh", "not ours\n")
    write(root, "/etc/ld.so.conf.d/hvd-openmpi.conf", "/opt/openmpi-4.1.6/lib\n")
    return root


def look(root: Path, **options) -> dict:
    args = {"cluster": CLUSTER, "packages": ["openmpi-bin"], "env_prefix": PREFIX, "user": "hvd",
            "cluster_public_key": KEY, **options}
    return hvd_state.node_state(str(root), **args)


# ------------------------------------------------------------------------------------------ the whole state


def test_every_key_is_there_with_what_the_node_holds(node: Path) -> None:
    state = look(node)
    assert EVERY_KEY <= set(state)
    assert list(state) == sorted(state)
    assert all(isinstance(value, (str, int, bool)) for value in state.values())
    expected = {
        "os.release": "debian 12", "os.kernel": os.uname().release,
        "pkg.openmpi-bin": "4.1.4-3+b1", "pkg.openmpi-bin.hold": False,
        "driver.installed": "535.161.08", "driver.loaded": "535.161.08", "gpu.count": 2,
        "cuda.version": "12.2.140", "cuda.home": "/usr/local/cuda-12.2", "cudnn.version": "absent",
        "cudnn.home": "absent", "nccl.version": "2.19.3", "nccl.home": "/opt/nccl", "nccl.header": "2.19.3",
        "mpi.path": "/opt/openmpi-4.1.6/bin/mpirun", "mpi.version": "4.1.6",
        "env.python": "/usr/bin/python3.11 3.11.2", "env.key": "envkey123",
        "env.lock": hashlib.sha256(b"filelock==3.13.1 --hash=sha256:aa\n").hexdigest(), "env.files": "ok",
        "horovod.version": "0.28.1", "horovod.key": "hvdkey456", "horovod.checked": "hvdkey456",
        "mesh.authorized": True, "base.fabric_interface": "ib0",
    }
    assert {key: state[key] for key in expected} == expected
    assert state["mesh.ssh_config"] == "Host n1 n2\n    IdentityFile ~/.ssh/hvd_lab"  # small blocks: as text
    for key in ("horovod.record", "mesh.known_hosts", "base.ca", "profile.hvd-cuda.sh", "ldconf.hvd-openmpi.conf"):
        assert len(state[key]) == 16 and int(state[key], 16) >= 0, key
    assert "profile.other.sh" not in state
    assert sorted(k for k in state if k.startswith("env.dist.")) == ["env.dist.cloudpickle", "env.dist.filelock"]
    assert state["env.dist.filelock"].startswith("3.13.1 ")


def test_the_folder_of_job_leases_reads_ok_only_as_hvd_base_makes_it(tmp_path: Path) -> None:
    """/run/hvdcluster: the login user's (the reader's), mode 0700; an old hvd_base's root 1777 folder, or one any
    other user owns, is named (real folders here)."""
    run = tmp_path / "run" / "hvdcluster"
    assert look(tmp_path)["base.run_dir"] == "absent"
    run.mkdir(parents=True)
    run.chmod(0o700)
    assert look(tmp_path)["base.run_dir"] == "ok"
    run.chmod(0o1777)
    assert look(tmp_path)["base.run_dir"] == "mode 1777"
    run.chmod(0o755)
    assert look(tmp_path)["base.run_dir"].startswith("mode 0755")
    if os.geteuid() == 0:
        os.chown(run, 12345, 12345)
        run.chmod(0o700)
        assert look(tmp_path)["base.run_dir"] == "owner uid 12345, not the login user's (uid 0)"
    run.rmdir()
    run.write_text("")
    assert look(tmp_path)["base.run_dir"] == "not a folder"


def test_an_empty_node_reads_absent_for_everything_asked(tmp_path: Path) -> None:
    state = look(tmp_path)
    assert EVERY_KEY - {"os.kernel"} <= set(state)
    assert {key: value for key, value in state.items()
            if value not in ("absent", False, 0) and key != "os.kernel"} == {}
    assert state["gpu.count"] == 0 and state["mesh.authorized"] is False and state["pkg.openmpi-bin.hold"] is False


def test_a_missing_env_makes_every_env_item_absent(node: Path) -> None:
    state = look(node, env_prefix="/opt/hvd/other")
    env = {key: value for key, value in state.items() if key.startswith(("env.", "horovod."))}
    assert set(env) == {"env.python", "env.key", "env.lock", "env.files", "env.manifest", "horovod.version",
                        "horovod.record",
                        "horovod.key", "horovod.checked"}
    assert set(env.values()) == {"absent"}


# ------------------------------------------------------------------------------------------ packages


def test_held_unheld_and_removed_packages(node: Path) -> None:
    state = look(node, packages=["openmpi-bin", "libnccl2", "nvidia-driver", "not-there"])
    assert state["pkg.nvidia-driver"] == "535.161.08-1" and state["pkg.nvidia-driver.hold"] is True
    assert state["pkg.openmpi-bin"] == "4.1.4-3+b1" and state["pkg.openmpi-bin.hold"] is False
    assert state["pkg.libnccl2"] == "absent" and state["pkg.libnccl2.hold"] is False  # config files only: removed
    assert state["pkg.not-there"] == "absent" and state["pkg.not-there.hold"] is False
    # held packages show although not asked for
    assert state["pkg.linux-image-amd64"] == "6.1.76-1" and state["pkg.linux-image-amd64.hold"] is True


def test_a_package_unattended_upgrades_may_move_reads_unguarded(node: Path) -> None:
    """pkg.<name>.guard: an entry of unattended-upgrades' Package-Blacklist matches the name from its start (the file
    hvd_base's `unattended` entry point writes: exact names, '+' in brackets), in any apt.conf.d file."""
    write(node, "/etc/apt/apt.conf.d/51hvdcluster-hvd_nvidia_driver",
          '// Managed by hvdcluster\nUnattended-Upgrade::Package-Blacklist {\n    "nvidia-driver$";\n'
          '    "g[+][+]-11$";\n};\n')
    write(node, "/etc/apt/apt.conf.d/50unattended-upgrades", 'Unattended-Upgrade::Package-Blacklist { "linux-"; };\n')
    state = look(node, packages=["openmpi-bin", "nvidia-driver", "g++-11", "nvidia-driver-bin"])
    assert state["pkg.nvidia-driver.guard"] is True and state["pkg.g++-11.guard"] is True
    assert state["pkg.linux-image-amd64.guard"] is True  # a prefix entry covers the family
    assert state["pkg.openmpi-bin.guard"] is False and state["pkg.nvidia-driver-bin.guard"] is False
    (node / "etc/apt/apt.conf.d/51hvdcluster-hvd_nvidia_driver").unlink()
    assert look(node, packages=["nvidia-driver"])["pkg.nvidia-driver.guard"] is False


def test_unholding_and_removing_show(node: Path) -> None:
    status = node / "var/lib/dpkg/status"
    status.write_text(DPKG.replace("hold ok installed\nArchitecture: amd64\nVersion: 535",
                                   "install ok installed\nArchitecture: amd64\nVersion: 535")
                      .replace("Status: install ok installed\nPriority", "Status: deinstall ok config-files\nPriority"))
    state = look(node, packages=["openmpi-bin", "nvidia-driver"])
    assert state["pkg.nvidia-driver.hold"] is False and state["pkg.nvidia-driver"] == "535.161.08-1"
    assert state["pkg.openmpi-bin"] == "absent"


# ------------------------------------------------------------------------------------------ GPU stack and MPI


def test_a_swapped_nccl_header_shows_although_the_fact_was_not_rewritten(node: Path) -> None:
    write(node, "/opt/nccl/include/nccl.h", "#define NCCL_MAJOR 2\n#define NCCL_MINOR 21\n#define NCCL_PATCH 5\n")
    state = look(node)
    assert state["nccl.version"] == "2.19.3" and state["nccl.header"] == "2.21.5"
    (node / "opt/nccl/include/nccl.h").unlink()
    assert look(node)["nccl.header"] == "absent"


def test_driver_loaded_reads_the_proprietary_module_line_too(node: Path) -> None:
    write(node, "/proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb\n")
    write(node, "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.14", b"")
    state = look(node)
    assert state["driver.loaded"] == "550.54.14" and state["driver.installed"] == "535.161.08,550.54.14"


def test_a_driver_mounted_from_outside_is_found_where_the_loader_is_configured_to_look(node: Path) -> None:
    """A container or VM given the host's driver (the workplace's GPU machine, 2026-11-26: NVML in
    /usr/local/nvidia/lib64, named by /etc/ld.so.conf.d, nothing under /usr/lib): `check` read "installed: absent"
    beside "loaded: 580.159.04". The loader's configuration, includes and all, is where the user space is."""
    write(node, "/proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu\n")
    for path in node.rglob("libnvidia-ml.so*"):
        path.unlink()
    write(node, "/usr/local/nvidia/lib64/libnvidia-ml.so.580.159.04", b"\x7fELF")
    os.symlink("libnvidia-ml.so.580.159.04", node / "usr/local/nvidia/lib64/libnvidia-ml.so.1")
    assert look(node)["driver.installed"] == "absent"
    write(node, "/etc/ld.so.conf", "# libc default\ninclude /etc/ld.so.conf.d/*.conf\n")
    write(node, "/etc/ld.so.conf.d/000_cuda.conf", "/usr/local/cuda/targets/x86_64-linux/lib\n")
    write(node, "/etc/ld.so.conf.d/nvidia.conf", "include nested.d/*.conf\n")  # relative: beside this file
    write(node, "/etc/ld.so.conf.d/nested.d/gpu.conf", "/usr/local/nvidia/lib64 /usr/local/nvidia/lib  # mounted\n")
    assert hvd_driver.loader_dirs(str(node)) == ["/usr/local/cuda/targets/x86_64-linux/lib", "/opt/openmpi-4.1.6/lib",
                                                 "/usr/local/nvidia/lib64", "/usr/local/nvidia/lib"]
    state = look(node)
    assert state["driver.installed"] == state["driver.loaded"] == "580.159.04"



MOUNTINFO = """\
1180 1101 0:355 / / rw,relatime master:509 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/A
1183 1180 0:358 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
1201 1180 259:1 /var/lib/docker/containers/x/hosts /etc/hosts rw,relatime - ext4 /dev/nvme0n1p1 rw
{lines}"""


@pytest.mark.parametrize("mounted", ["/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.159.04", "/usr/local/nvidia"])
def test_a_driver_handed_into_a_container_is_read_as_given(node: Path, mounted: str) -> None:
    """The NVIDIA Container Toolkit mounts each library file of the host's driver into the container; other
    platforms mount a folder (the workplace's GPU machine: /usr/local/nvidia). Either way the library lies on a mount
    of its own: driver.given. Where it lies on the node's own system (its root, a separate /usr), it is not."""
    for path in node.rglob("libnvidia-ml.so*"):
        path.unlink()
    folder = "/usr/lib/x86_64-linux-gnu" if mounted.endswith(".04") else mounted + "/lib64"
    write(node, f"{folder}/libnvidia-ml.so.580.159.04", b"\x7fELF")
    write(node, "/etc/ld.so.conf", f"{folder}\n")
    line = f"1300 1180 259:1 /host{mounted} {mounted} ro,nosuid,nodev,relatime master:1 - ext4 /dev/nvme0n1p1 ro"
    write(node, "/proc/self/mountinfo", MOUNTINFO.format(lines=line + "\n"))
    state = look(node)
    assert state["driver.installed"] == state["driver.given"] == "580.159.04", state
    write(node, "/proc/self/mountinfo", MOUNTINFO.format(lines="1300 1180 259:2 / /usr rw - ext4 /dev/sda2 rw\n"))
    assert "driver.given" not in look(node)
    (node / "proc/self/mountinfo").unlink()
    assert "driver.given" not in look(node)


def test_mount_points_are_read_with_their_escapes_undone(node: Path) -> None:
    write(node, "/proc/self/mountinfo", MOUNTINFO.format(lines="9 1180 0:1 / /srv/a\\040b\\134c rw - tmpfs t rw\n"))
    assert hvd_driver.mount_points(str(node)) == ["/", "/proc", "/etc/hosts", "/srv/a b\\c"]


def test_the_mount_holding_a_path_is_the_longest_above_it_or_the_path_itself() -> None:
    points = ["/", "/usr", "/usr/local/nvidia", "/usr/lib/libnvidia-ml.so.1", "/usr/local/nv"]
    assert hvd_driver.holding_mount("/usr/local/nvidia/lib64/libnvidia-ml.so.1", points) == "/usr/local/nvidia"
    assert hvd_driver.holding_mount("/usr/lib/libnvidia-ml.so.1", points) == "/usr/lib/libnvidia-ml.so.1"
    assert hvd_driver.holding_mount("/usr/local/nvidia2/x", points) == "/usr"  # a name that only starts alike
    assert hvd_driver.holding_mount("/opt/x", []) == "/"


def test_debians_driver_behind_its_alternatives_links_is_read_by_the_file_they_lead_to(node: Path) -> None:
    """Debian's libnvidia-ml1 (non-free 535) puts the versioned library in nvidia/current/ and reaches it through
    /etc/alternatives: only libnvidia-ml.so.1 lies where the loader looks. Before, `check` read "absent" there (the
    role, with its own deeper search, did not; molecule driver and gpu caught the difference once both used one
    reader)."""
    for path in node.rglob("libnvidia-ml.so*"):
        path.unlink()
    lib = "/usr/lib/x86_64-linux-gnu"
    write(node, f"{lib}/nvidia/current/libnvidia-ml.so.535.216.01", b"\x7fELF")
    os.symlink("libnvidia-ml.so.535.216.01", node / f"{lib.lstrip('/')}/nvidia/current/libnvidia-ml.so.1")
    (node / "etc/alternatives").mkdir(parents=True, exist_ok=True)
    os.symlink(f"{lib}/nvidia/current/libnvidia-ml.so.1",
               node / "etc/alternatives/nvidia--libnvidia-ml.so.1-x86_64-linux-gnu")
    os.symlink("/etc/alternatives/nvidia--libnvidia-ml.so.1-x86_64-linux-gnu",
               node / f"{lib.lstrip('/')}/libnvidia-ml.so.1")
    assert look(node)["driver.installed"] == "535.216.01"
    (node / f"{lib.lstrip('/')}/nvidia/current/libnvidia-ml.so.535.216.01").unlink()  # a dangling link: none
    assert look(node)["driver.installed"] == "absent"


def kernel_mode_node(node: Path, kernel: str, modules: tuple[str, ...]) -> None:
    """The node as hvd_nvidia_driver leaves a GPU host: driver in kernel mode, ``kernel`` the only image in /boot
    (no GRUB: the newest boots), ``modules`` built for it, its headers there."""
    write(node, "/etc/ansible/facts.d/hvd_nvidia_driver.fact", json.dumps({"mode": "kernel", "gpu_count": "2"}))
    write(node, f"/boot/vmlinuz-{kernel}", b"MZ")
    write(node, f"/usr/src/linux-headers-{kernel}/Makefile", "")
    for name in modules:
        write(node, f"/lib/modules/{kernel}/updates/dkms/{name}.ko.xz", b"\x7fELF")


def test_next_boot_reads_ok_on_every_healthy_node_whatever_its_kernel(node: Path, tmp_path: Path) -> None:
    kernel_mode_node(node, "6.1.0-27-amd64", ("nvidia", "nvidia-modeset", "nvidia-uvm"))
    other = tmp_path / "other"
    kernel_mode_node(other, "6.1.0-28-amd64", ("nvidia", "nvidia-modeset", "nvidia-uvm"))
    assert look(node)["driver.next_boot"] == "ok"
    assert hvd_state_stack.driver_state(str(other))["driver.next_boot"] == "ok"


def test_next_boot_names_the_kernel_and_the_missing_module(node: Path) -> None:
    kernel_mode_node(node, "6.1.0-27-amd64", ("nvidia", "nvidia-modeset"))
    assert look(node)["driver.next_boot"] == "6.1.0-27-amd64 has no NVIDIA module (nvidia-uvm): not built"
    write(node, "/boot/vmlinuz-6.1.0-28-amd64", b"MZ")  # a kernel upgrade without its headers
    assert look(node)["driver.next_boot"] == ("6.1.0-28-amd64 has no NVIDIA module (nvidia, nvidia-modeset, "
                                              "nvidia-uvm): headers missing")


@pytest.mark.parametrize("mode", ["user-space", "skipped", None])
def test_next_boot_is_only_read_where_the_driver_runs_in_kernel_mode(node: Path, mode: str | None) -> None:
    kernel_mode_node(node, "6.1.0-27-amd64", ())
    fact = {"gpu_count": "0"} if mode is None else {"mode": mode, "gpu_count": "0"}
    write(node, "/etc/ansible/facts.d/hvd_nvidia_driver.fact", json.dumps(fact))
    assert "driver.next_boot" not in look(node)


def test_mpirun_is_the_first_on_the_ssh_path(node: Path) -> None:
    assert look(node, ssh_path="/usr/bin:/bin")["mpi.path"] == "absent"
    write(node, "/usr/bin/mpirun", "#!elf", 0o755)
    assert look(node)["mpi.path"] == "/opt/openmpi-4.1.6/bin/mpirun"  # /usr/local/bin comes first
    assert look(node, ssh_path="/usr/bin:/usr/local/bin")["mpi.path"] == "/usr/bin/mpirun"


def test_the_ssh_path_is_the_one_etc_environment_sets(node: Path) -> None:
    """pam_env gives SSH commands /etc/environment's PATH: the pre-flight's advice for a login-only mpirun."""
    write(node, "/opt/ompi/bin/mpirun", "#!elf", 0o755)
    assert look(node)["mpi.path"] == "/opt/openmpi-4.1.6/bin/mpirun"
    write(node, "/etc/environment", 'LANG=C.UTF-8\nPATH="/opt/ompi/bin:/usr/local/bin:/usr/bin:/bin"\n')
    assert look(node)["mpi.path"] == "/opt/ompi/bin/mpirun"
    assert look(node, ssh_path="/usr/local/bin")["mpi.path"] == "/opt/openmpi-4.1.6/bin/mpirun"  # given wins


def test_gpu_models_come_from_the_driver_when_nvidia_smi_cannot_say(node: Path) -> None:
    from ansible_collections.hvd.cluster.plugins.module_utils import hvd_host

    for bus, model in (("0000:17:00.0", "NVIDIA H100 80GB HBM3"), ("0000:65:00.0", "NVIDIA H100 80GB HBM3")):
        write(node, f"/proc/driver/nvidia/gpus/{bus}/information", f"Model: \t\t {model}\nIRQ:   42\n")
    seen = hvd_host.nvidia(str(node))
    assert seen["gpus"] == ["NVIDIA H100 80GB HBM3"] * 2 and seen["loaded"] == "535.161.08"
    assert seen["installed"] == ["535.161.08"] and seen["nouveau"] is False


# ------------------------------------------------------------------------------------------ the env


def test_a_deleted_and_an_edited_file_show(node: Path) -> None:
    site = node / SITE.lstrip("/")
    (site / "filelock/_api.py").unlink()
    (site / "cloudpickle/__init__.py").write_text("version = '3.0.0'  # edited\n")
    (node / PREFIX.lstrip("/") / "bin/horovodrun").unlink()  # Horovod's files are checked too
    assert look(node)["env.files"] == ("missing: bin/horovodrun; missing: filelock/_api.py; "
                                       "changed: cloudpickle/__init__.py")


def test_an_env_without_its_manifest_is_not_taken_as_installed(node: Path) -> None:
    """With no manifest nothing says what belongs in the env: that is named, and RECORDs are still checked."""
    (node / PREFIX.lstrip("/") / ".hvd-manifest").unlink()
    (node / SITE.lstrip("/") / "filelock/_api.py").write_text("x = 2\n")  # same size: only deep sees it
    assert look(node)["env.files"] == "missing: .hvd-manifest"
    assert look(node, deep=True)["env.files"] == "missing: .hvd-manifest; changed: filelock/_api.py"
    assert look(node)["env.manifest"] == "absent"


def test_with_hvd_trees_manifest_a_same_size_edit_shows_by_its_time(node: Path) -> None:
    prefix = node / PREFIX.lstrip("/")
    hvd_tree.write_manifest(str(prefix), {".hvdcluster", ".hvd-env-key"})
    assert look(node)["env.files"] == "ok"
    api = prefix / "lib/python3.11/site-packages/filelock/_api.py"
    before = api.stat()
    api.write_text("x = 2\n")
    os.utime(api, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    (prefix / "pyvenv.cfg").unlink()  # listed by the manifest only: named relative to the prefix
    assert look(node)["env.files"] == "missing: pyvenv.cfg; changed: filelock/_api.py"
    os.utime(api, ns=(before.st_atime_ns, before.st_mtime_ns))  # the time put back: only deep sees it
    assert look(node)["env.files"] == "missing: pyvenv.cfg"
    assert look(node, deep=True)["env.files"] == "missing: pyvenv.cfg; changed: filelock/_api.py"


def test_many_problems_are_cut_short(node: Path) -> None:
    make_dist(node, "many", "1.0", {f"many/m{i:02}.py": "x\n" for i in range(14)})
    files = look(node)["env.files"]
    # a distribution added since the env was installed: its 14 files, its METADATA and RECORD (16 in all)
    assert files.startswith("added: many-1.0.dist-info/METADATA; ") and files.endswith("; +6 more"), files


def test_a_record_line_the_manifest_never_listed_is_not_a_problem(node: Path) -> None:
    """A conda package's entry points replace the scripts pip wrote (its RECORD still lists bin/pip3.11): the
    manifest, made when the env was installed, is what the env is held to; only a distribution installed later
    (Horovod) is judged by its RECORD."""
    assert look(node)["env.files"] == "ok"
    record = next(p for p in (node / SITE.lstrip("/")).glob("*.dist-info/RECORD") if "horovod" not in p.parent.name.lower())
    with record.open("a") as handle:
        handle.write("../../../bin/never-installed,sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,0\n")
    os.utime(record, ns=(record.stat().st_atime_ns, record.stat().st_mtime_ns))
    files = look(node)["env.files"]
    assert "never-installed" not in files and files.startswith("changed: ") and "RECORD" in files, files


def test_another_version_of_a_distribution_shows_in_its_item_and_in_the_files(node: Path) -> None:
    before = look(node)
    site = node / SITE.lstrip("/")
    for path in sorted(site.glob("filelock-*.dist-info/*")):
        path.unlink()
    (site / "filelock-3.13.1.dist-info").rmdir()
    make_dist(node, "filelock", "3.13.2", {"filelock/__init__.py": "from ._api import x\n",
                                           "filelock/_api.py": "x = 1  # 3.13.2\n"})
    after = look(node)
    assert after["env.dist.filelock"].startswith("3.13.2 ")
    assert after["env.dist.filelock"] != before["env.dist.filelock"]
    assert "missing: filelock-3.13.1.dist-info/RECORD" in after["env.files"]
    assert "added: filelock-3.13.2.dist-info/METADATA" in after["env.files"]
    assert {k for k in before if before[k] != after[k]} == {"env.dist.filelock", "env.files"}


# One addition each that runs code in every rank (or shadows what was installed): none of them may pass as in sync.
ADDITIONS = {
    "a distribution": ("extra_pkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: extra-pkg\nVersion: 1.0\n"),
    "a module": ("evil.py", "import os\n"),
    "a .pth file": ("zz-hook.pth", "import os; os.system('true')\n"),
    "sitecustomize": ("sitecustomize.py", "print('every interpreter start')\n"),
    "usercustomize": ("usercustomize.py", "print('every interpreter start')\n"),
    "a planted byte cache": ("filelock/__pycache__/_api.cpython-311.pyc", "\xa7\r\r\n planted"),
    "a script": ("../../../bin/helper", "#!/bin/sh\n"),
}


@pytest.mark.parametrize("kind", list(ADDITIONS))
def test_anything_added_to_the_env_is_named(node: Path, kind: str) -> None:
    rel, text = ADDITIONS[kind]
    before = look(node)
    assert before["env.files"] == "ok"
    write(node, os.path.normpath(os.path.join(SITE, rel)), text)
    name = os.path.relpath(os.path.normpath(os.path.join(SITE, rel)), PREFIX) if rel.startswith("..") else rel
    assert look(node)["env.files"] == f"added: {name}"


def test_files_horovod_and_hvdcluster_put_there_later_are_not_additions(node: Path) -> None:
    """Horovod's RECORD (byte caches without a hash included) and the markers account for what came after."""
    write(node, SITE + "/horovod/__pycache__/x.cpython-311.pyc", b"compiled")  # listed by Horovod's RECORD
    assert look(node)["env.files"] == "ok"
    write(node, SITE + "/horovod/__pycache__/y.cpython-311.pyc", b"compiled")  # not listed
    assert look(node)["env.files"] == "added: horovod/__pycache__/y.cpython-311.pyc"


def test_the_manifest_digest_ignores_times_and_names_an_edited_manifest(node: Path) -> None:
    prefix = node / PREFIX.lstrip("/")
    before = look(node)
    manifest = json.loads((prefix / ".hvd-manifest").read_text())
    for entry in manifest.values():
        if entry[0] != "link":
            entry[1] += 1  # another node unpacked the same archive at another moment
    (prefix / ".hvd-manifest").write_text(json.dumps(manifest))
    assert look(node)["env.manifest"] == before["env.manifest"]
    write(node, SITE + "/sitecustomize.py", "print('x')\n")
    hvd_tree.write_manifest(str(prefix), {".hvdcluster", ".hvd-env-key"})  # the manifest made to vouch for it
    after = look(node)
    assert after["env.manifest"] != before["env.manifest"]


def test_horovod_is_reported_apart_from_the_distributions(node: Path) -> None:
    state = look(node)
    assert not any("horovod" in key for key in state if key.startswith("env.dist."))
    info = next((node / SITE.lstrip("/")).glob("Horovod-*.dist-info"))
    assert state["horovod.record"] == hashlib.sha256((info / "RECORD").read_bytes()).hexdigest()[:16]
    (info / "RECORD").write_text((info / "RECORD").read_text() + "horovod/extra.py,,\n")
    assert look(node)["horovod.record"] != state["horovod.record"]


def test_a_distribution_name_is_normalized(node: Path) -> None:
    make_dist(node, "Typing_Extensions", "4.9.0", {"typing_extensions.py": "x\n"})
    assert look(node)["env.dist.typing-extensions"].startswith("4.9.0 ")
    assert hvd_state_env.canonical("zope.interface") == "zope-interface" and hvd_state_env.canonical("A__B-c") == "a-b-c"


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


# ------------------------------------------------------------------------------------------ nccl-tests


NCCL_TESTS = "/opt/hvd/nccl-tests"
NCCL_TESTS_BINARIES = ("all_reduce_perf", "all_gather_perf", "reduce_scatter_perf")


def install_nccl_tests(node: Path, tmp_path: Path, key: str = "ntkey789") -> Path:
    """nccl-tests as hvd_nccl_tests installs it: its packed tree unpacked by hvd_tree at the prefix (manifest, build
    key last), and its fact naming the prefix."""
    from tests.unit.test_modules import UNPACK, make_archive

    archive, digest = make_archive(tmp_path, {**{f"bin/{name}": f"\x7fELF {name}" for name in NCCL_TESTS_BINARIES},
                                              "share/doc/nccl-tests/LICENSE.txt": "BSD-3-Clause\n"})
    prefix = node / NCCL_TESTS.lstrip("/")
    hvd_tree.unpack(str(archive), digest, str(prefix), marker_content=key,
                    **{**UNPACK, "marker": hvd_state_stack.NCCL_TESTS_MARKER})
    write(node, "/etc/ansible/facts.d/hvd_nccl_tests.fact",
          json.dumps({"version": "2.19.6", "prefix": NCCL_TESTS, "key": key}))
    return prefix


def test_nccl_tests_reads_its_version_build_key_and_files_where_its_fact_names_the_prefix(node: Path,
                                                                                          tmp_path: Path) -> None:
    assert not [key for key in look(node) if key.startswith("nccl_tests.")]  # not installed: no item at all
    install_nccl_tests(node, tmp_path)
    state = look(node)
    assert {key: value for key, value in state.items() if key.startswith("nccl_tests.")} == {
        "nccl_tests.version": "2.19.6", "nccl_tests.key": "ntkey789", "nccl_tests.files": "ok"}
    assert look(node, sections=["components"])["nccl_tests.files"] == "ok"  # part of the components' section


def test_a_removed_nccl_tests_binary_is_named_missing_and_an_edited_one_changed(node: Path, tmp_path: Path) -> None:
    prefix = install_nccl_tests(node, tmp_path)
    (prefix / "bin" / "all_reduce_perf").unlink()
    assert look(node)["nccl_tests.files"] == "missing: bin/all_reduce_perf"
    target = prefix / "bin" / "all_gather_perf"
    before = target.stat()
    target.write_bytes(b"\x7fELF all_gather_pxrf")  # same size, new time
    assert look(node)["nccl_tests.files"] == "missing: bin/all_reduce_perf; changed: bin/all_gather_perf"
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))  # time put back: only the content tells
    assert look(node)["nccl_tests.files"] == "missing: bin/all_reduce_perf"
    assert look(node, deep=True)["nccl_tests.files"] == "missing: bin/all_reduce_perf; changed: bin/all_gather_perf"


def test_a_removed_nccl_tests_prefix_reads_absent_where_its_fact_still_names_it(node: Path, tmp_path: Path) -> None:
    prefix = install_nccl_tests(node, tmp_path)
    shutil.rmtree(prefix)
    state = look(node)
    assert (state["nccl_tests.key"], state["nccl_tests.files"]) == ("absent", "missing: .hvd-manifest")
    (node / "etc/ansible/facts.d/hvd_nccl_tests.fact").write_text('{"version": "2.19.6", "prefix": "relative/x"}')
    assert not [key for key in look(node) if key.startswith("nccl_tests.")]  # no absolute prefix named: none read


# ------------------------------------------------------------------------------------------ enroot and pyxis


PYXIS = "/opt/hvd/pyxis"


def test_pyxis_reads_its_tree_its_plugstack_files_and_its_links_where_its_fact_names_the_prefix(
        node: Path, tmp_path: Path) -> None:
    """hvd_pyxis's tree as hvd_tree unpacks it, Slurm's plugstack files and the /usr/local/bin link of every program in
    <prefix>/bin: each drift named (an edited plugstack, a link turned elsewhere, one removed, a removed plugin),
    nothing where the role never ran."""
    from hvdcluster import drift
    from tests.unit.test_modules import UNPACK, make_archive

    assert not [key for key in look(node) if key.startswith("pyxis.")]
    tools = ("enroot", "enroot-nsenter", "enroot-mount")
    archive, digest = make_archive(tmp_path, {**{f"bin/{tool}": "#!/bin/bash\n" for tool in tools},
                                              "lib/slurm/spank_pyxis.so": "\x7fELF"})
    prefix = node / PYXIS.lstrip("/")
    hvd_tree.unpack(str(archive), digest, str(prefix), marker_content="pxkey",
                    **{**UNPACK, "marker": hvd_state_stack.PYXIS_MARKER})
    write(node, "/etc/ansible/facts.d/hvd_pyxis.fact", json.dumps({"version": "0.24.0", "prefix": PYXIS}))
    write(node, "/etc/slurm/plugstack.conf", "include /etc/slurm/plugstack.conf.d/*.conf\n")
    write(node, "/etc/slurm/plugstack.conf.d/pyxis.conf", f"required {PYXIS}/lib/slurm/spank_pyxis.so\n")
    links = node / "usr/local/bin"
    links.mkdir(parents=True, exist_ok=True)
    for tool in tools:
        (links / tool).symlink_to(f"{PYXIS}/bin/{tool}")
    state = {key: value for key, value in look(node).items() if key.startswith("pyxis.")}
    assert state.pop("pyxis.config.plugstack.conf") != state.pop("pyxis.config.pyxis.conf") != "absent"
    assert state == {"pyxis.version": "0.24.0", "pyxis.key": "pxkey", "pyxis.files": "ok", "pyxis.links": "ok"}
    before = look(node)["pyxis.config.pyxis.conf"]
    write(node, "/etc/slurm/plugstack.conf.d/pyxis.conf", "optional /tmp/evil.so\n")
    (links / "enroot").unlink()
    (links / "enroot").symlink_to("/tmp/enroot")
    (links / "enroot-mount").unlink()
    (prefix / "lib/slurm/spank_pyxis.so").unlink()
    after = look(node)
    assert after["pyxis.config.pyxis.conf"] != before
    assert after["pyxis.links"] == "missing: enroot-mount; leads elsewhere: enroot -> /tmp/enroot"
    assert after["pyxis.files"] == "missing: lib/slurm/spank_pyxis.so"
    assert drift.owner("pyxis.files") == drift.owner("pyxis.links") == "hvd_pyxis"


# ------------------------------------------------------------------------------------------ as Ansible runs it


def test_the_module_only_reads_and_returns_the_same_state(node: Path) -> None:
    args = {"cluster": CLUSTER, "packages": ["openmpi-bin"], "env_prefix": PREFIX, "user": "hvd",
            "cluster_public_key": KEY, "root": str(node)}
    result = run_module("hvd_node_state", args, check=True)
    assert result["changed"] is False and "failed" not in result
    assert result["state"] == look(node) and list(result["state"]) == sorted(result["state"])
    assert isinstance(result["seconds"], float)
    assert run_module("hvd_node_state", args)["state"] == result["state"]
    assert run_module("hvd_node_state", {"root": str(node)}).get("failed")  # cluster is required


def test_the_module_on_a_real_env_hashes_no_installed_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """A look at a real env stats what the RECORDs list and hashes only the RECORDs (once each) and the lock: the
    read does not grow with the env's bytes (its time on a real env: bench/node_state.py)."""
    prefix = Path(sys.prefix)
    sites = list(prefix.glob("lib/python*/site-packages/*.dist-info"))
    if not sites:
        pytest.skip(f"{prefix} has no site-packages with dist-infos")
    result = run_module("hvd_node_state", {"cluster": CLUSTER, "env_prefix": str(prefix)}, check=True)
    assert result["changed"] is False
    state = result["state"]
    assert state["env.python"] != "absent" and state["env.files"] != "absent"
    assert len([key for key in state if key.startswith("env.dist.")]) + (state["horovod.version"] != "absent") \
        == len({hvd_state_env.canonical(hvd_state_env._metadata(str(info))[0]) for info in sites})
    hashed: list[str] = []
    for module, name in ((hvd_state_env, "sha256_of"), (hvd_state_env, "file_d16"), (hvd_files, "sha256_of")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda path, real=real: hashed.append(path) or real(path))
    env = hvd_state_env.env_state("/", str(prefix))
    assert env == {key: state[key] for key in env}
    assert sorted(hashed) == sorted([str(prefix / "hvd-requirements.lock")] + [str(info / "RECORD") for info in sites])


def test_the_post_flights_script_is_ours_and_nothing_else_beside_it_is(node: Path) -> None:
    write(node, PREFIX + "/libexec/hvdcluster/allreduce.py", "import horovod\n")
    assert look(node)["env.files"] == "ok"
    write(node, PREFIX + "/libexec/hvdcluster/other.py", "x\n")
    assert look(node)["env.files"] == "added: libexec/hvdcluster/other.py"


def test_a_conda_envs_packages_are_read_from_its_conda_meta_records(node: Path) -> None:
    """Each record in conda-meta/ is an item (env.conda.<name>: version and build); a removed record is gone from
    the items, an unreadable one is named so."""
    meta = node / PREFIX.lstrip("/") / "conda-meta"
    meta.mkdir(parents=True)
    (meta / "python-3.11.2-hvd_0.json").write_text(json.dumps({"name": "python", "version": "3.11.2",
                                                               "build": "hvd_0", "files": ["bin/python3.11"]}))
    (meta / "hvd-probe-1.0.0-h4616a5c_0.json").write_text(json.dumps({"name": "hvd-probe", "version": "1.0.0",
                                                                     "build": "h4616a5c_0"}))
    (meta / "history").write_text("")
    state = hvd_state_env.env_state(str(node), PREFIX)
    assert state["env.conda.python"] == "3.11.2 hvd_0" and state["env.conda.hvd-probe"] == "1.0.0 h4616a5c_0"
    (meta / "hvd-probe-1.0.0-h4616a5c_0.json").unlink()
    (meta / "pip-22.3.1-pyh_0.json").write_text("{not json")
    state = hvd_state_env.env_state(str(node), PREFIX)
    assert "env.conda.hvd-probe" not in state and state["env.conda.pip-22.3.1-pyh_0"] == "unreadable "


def test_check_the_pre_flight_and_the_driver_role_read_the_driver_versions_alike(node: Path) -> None:
    """One reading of the installed NVML library and the loaded module (plugins/module_utils/hvd_driver.py): `check`'s
    state, the pre-flight's look and hvd_nvidia_driver's (the hvd_node_state module, run here as Ansible runs it)
    agree, here with a second user space installed next to the first (the mismatch a driver upgrade leaves before a
    reboot)."""
    from ansible_collections.hvd.cluster.plugins.module_utils import hvd_host

    write(node, "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15", b"\x7fELF")
    write(node, "/usr/lib64/libnvidia-ml.so", b"")  # the unversioned link carries no version
    state = hvd_state_stack.driver_state(str(node))
    look = hvd_host.nvidia(str(node))
    role = run_module("hvd_node_state", {"cluster": "cluster", "sections": ["driver"], "root": str(node)}, check=True)
    assert state["driver.installed"] == ",".join(look["installed"]) == "535.161.08,550.54.15"
    assert state["driver.loaded"] == look["loaded"] == "535.161.08"
    assert {key: role["state"][key] for key in ("driver.installed", "driver.loaded")} == {
        "driver.installed": "535.161.08,550.54.15", "driver.loaded": "535.161.08"}
    assert role["changed"] is False
