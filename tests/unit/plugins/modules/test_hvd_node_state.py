"""hvd_node_state: one look at a node, read from a fake root (real files in tmp_path, modules/node_tree.py), and as
Ansible runs it.

This file: the whole state, packages, the module as Ansible runs it; the GPU stack (test_hvd_node_state_stack.py),
the env (test_hvd_node_state_env.py), the mesh and how a rank is launched (test_hvd_node_state_mesh.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest

from ansible_collections.hvd.cluster.tests.unit.plugins.modules.node_tree import (
    CLUSTER, DPKG, EVERY_KEY, KEY, PREFIX, look,
)
# a fixture: the tests below ask for it by name
from ansible_collections.hvd.cluster.tests.unit.plugins.modules.node_tree import node  # noqa: F401
from ansible_collections.hvd.cluster.tests.unit.plugins.support import run_module, write

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_files, hvd_state_env, hvd_state_stack


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
