"""A node as hvd_node_state reads it: a fake root in tmp_path (real files) holding what the roles leave on a node,
and ``look``, the module's read of it. Shared by tests/unit/plugins/modules/test_hvd_node_state*.py and
tests/unit/test_node_state_pyxis.py.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path

import pytest

from ansible_collections.hvd.cluster.tests.unit.plugins.support import write

from ansible_collections.hvd.cluster.plugins.modules import hvd_tree
from ansible_collections.hvd.cluster.plugins.module_utils import hvd_state


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
    "launch.mpi", "launch.nccl", "launch.ld", "mpi.single_copy"}


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
