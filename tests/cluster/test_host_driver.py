"""A container the host hands its NVIDIA driver to, as the NVIDIA Container Toolkit does: the driver's libraries are
mounted into it, file by file, from the host. The kernel module is the host's; a user space installed beside it would
not match it ("Driver/library version mismatch"). hvd_nvidia_driver must leave it alone, and refuse a stack that asks
for another driver, naming both, through the path an ops team runs: `hvdcluster inventory`, then
`ansible-playbook -i inventories/<cluster> playbooks/nvidia_driver.yml`, logged in as a non-root sudo user.

Mocked, because no GPU is here: the mounted NVML library is a file named as the toolkit names it
(libnvidia-ml.so.580.159.04, the driver of the GPU machine lent on 2026-11-26) holding no real library, and no kernel
module is loaded. The mount itself is real (`docker run -v`), and it is what the role reads.

Beside it, a container given no driver, forced as on a machine without a GPU: there the role installs the driver's
user space from Debian's non-free archive (the node's own apt sources), pinned and held, and nothing of the kernel
side (mode user-space) - what molecule/gpu's converge does before the toolkit, which the full tier no longer runs
(the golden-image suite converges the rest of that stack through `up`).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.conftest import SUDO_USER, Cli
from tests.conftest import BIN, ROOT
from tests.lab.cluster import Lab

pytestmark = pytest.mark.containers

NAME = "hdrv"
GIVEN = "580.159.04"
NVML = f"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{GIVEN}"
OURS = ["libcuda1", "libnvidia-ml1", "nvidia-smi", "nvidia-kernel-dkms", "cuda-drivers"]


@pytest.fixture(scope="module")
def lab(node_image: str, tmp_path_factory: pytest.TempPathFactory) -> Lab:
    work = tmp_path_factory.mktemp(NAME)
    library = work / "host-libnvidia-ml.so"
    library.write_bytes(b"\x7fELF")
    lab = Lab(NAME, 1, work, stack={"driver": "580"}, user=SUDO_USER,
              docker_args={1: ["-v", f"{library}:{NVML}:ro"]})
    lab.up()
    yield lab
    lab.down()


@pytest.fixture(scope="module")
def bare(node_image: str, tmp_path_factory: pytest.TempPathFactory) -> Lab:
    lab = Lab("usp", 1, tmp_path_factory.mktemp("usp"), user=SUDO_USER,
              stack={"driver": "535", "gpu_repo": "distro", "without_device": True})
    lab.up()
    yield lab
    lab.down()


def _play(installed: Path, lab: Lab, *extra: str,
          playbook: str = "nvidia_driver.yml") -> subprocess.CompletedProcess[str]:
    """hosts.yaml rendered to an inventory by the CLI, then the driver's playbook from the checkout, as ops run it."""
    made = Cli(installed, lab.workdir)("inventory", "hosts.yaml")
    assert made.returncode == 0, made.stderr
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_CALLBACK_RESULT_FORMAT": "json", "ANSIBLE_DISPLAY_OK_HOSTS": "true"}
    return subprocess.run([str(BIN / "ansible-playbook"), "-i", str(lab.workdir / "inventories" / lab.name),
                           str(ROOT / "playbooks" / playbook), *extra], cwd=ROOT, env=env,
                          capture_output=True, text=True)


@contextlib.contextmanager
def _stack(lab: Lab, stack: dict) -> Iterator[None]:
    """hosts.yaml with another `stack` for the block, the lab's own again after it."""
    kept = lab.stack
    lab.stack = stack
    lab.write_hosts_yaml()
    try:
        yield
    finally:
        lab.stack = kept
        lab.write_hosts_yaml()


def _ours(lab: Lab) -> list[str]:
    """The driver packages dpkg has installed on the node."""
    listed = lab.exec(1, "dpkg-query", "-W", "-f", "${Package} ${Status}\n", *OURS)
    return sorted(line.split()[0] for line in listed.stdout.splitlines() if line.endswith(" installed"))


def test_the_hosts_driver_is_kept_and_nothing_is_installed_beside_it(installed: Path, lab: Lab) -> None:
    proc = _play(installed, lab)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    assert f"node1: the host's NVIDIA driver {GIVEN} is mounted into this container: nothing installed" in " ".join(
        proc.stdout.split()), proc.stdout[-4000:]
    assert _ours(lab) == []
    fact = json.loads(lab.exec(1, "cat", "/etc/ansible/facts.d/hvd_nvidia_driver.fact").stdout)
    assert fact["mode"] == "host" and fact["installed"] == GIVEN and fact["packages"] == [], fact
    assert not fact["mismatch"] and not fact["reboot_required"], fact
    again = _play(installed, lab)
    assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout[-4000:]
    checked = _play(installed, lab, "--check")
    assert checked.returncode == 0 and "changed=0" in checked.stdout, checked.stdout[-4000:]


def test_a_machine_given_its_driver_on_a_mount_of_its_own_gets_none_either(installed: Path, lab: Lab) -> None:
    """A GPU machine, not a container, whose driver lies on a mount of its own (as a VM given /usr/local/nvidia
    read-only). The node is a container here, so the role is told to count it as a machine
    (hvd_nvidia_driver_container_types empty): a stand-in, no such VM is here. tests/gpu/lent_driver_role.sh runs
    the role on a real GPU machine given its driver."""
    proc = _play(installed, lab, "-e", json.dumps({"hvd_nvidia_driver_container_types": []}))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    assert f"node1: the host's NVIDIA driver {GIVEN} is mounted into this machine: nothing installed" in " ".join(
        proc.stdout.split()), proc.stdout[-4000:]
    assert _ours(lab) == []
    fact = json.loads(lab.exec(1, "cat", "/etc/ansible/facts.d/hvd_nvidia_driver.fact").stdout)
    assert fact["mode"] == "host" and fact["container"] is False and fact["packages"] == [], fact


def test_a_stack_asking_for_another_driver_is_refused_naming_both_and_installs_nothing(installed: Path,
                                                                                       lab: Lab) -> None:
    with _stack(lab, {"driver": "535"}):
        proc = _play(installed, lab)
    assert proc.returncode == 2, (proc.stdout + proc.stderr)[-4000:]
    said = " ".join(proc.stdout.split())
    assert (f"node1: the NVIDIA driver is the host's ({GIVEN}, its libraries mounted into this container); the stack "
            "asks for 535, which a container cannot change: set the stack's driver to 580") in said, said[-4000:]
    assert _ours(lab) == []


def test_the_distros_toolkit_is_refused_where_it_would_bring_a_driver_beside_the_hosts(installed: Path,
                                                                                      lab: Lab) -> None:
    """Debian's nvidia-cuda-toolkit depends on the driver's user space (libcuda1, libnvidia-ml1): in this container
    it would sit beside the host's driver. The CUDA playbook, after the driver's, refuses it and installs nothing."""
    with _stack(lab, {"driver": "580", "gpu_repo": "distro"}):
        driver = _play(installed, lab)
        assert driver.returncode == 0, (driver.stdout + driver.stderr)[-4000:]
        proc = _play(installed, lab, playbook="cuda.yml")
    assert proc.returncode == 2, (proc.stdout + proc.stderr)[-4000:]
    said = " ".join(proc.stdout.split())
    assert (f"node1: the distro's CUDA toolkit depends on the NVIDIA driver's user space (libcuda1, libnvidia-ml1), "
            f"which would be installed beside the host's driver {GIVEN} mounted into this container") in said, said[-3000:]
    assert _ours(lab) == []
    assert lab.exec(1, "dpkg-query", "-W", "nvidia-cuda-toolkit").returncode != 0


def test_a_container_given_no_driver_gets_the_user_space_only_pinned_and_held(installed: Path, bare: Lab) -> None:
    proc = _play(installed, bare)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    assert _ours(bare) == ["libcuda1", "libnvidia-ml1", "nvidia-smi"]
    held = bare.exec(1, "apt-mark", "showhold").stdout.split()
    assert {"libcuda1", "libnvidia-ml1", "nvidia-smi"} <= set(held), held
    fact = json.loads(bare.exec(1, "cat", "/etc/ansible/facts.d/hvd_nvidia_driver.fact").stdout)
    assert fact["mode"] == "user-space" and fact["container"] and not fact["gpu_present"], fact
    assert fact["installed"].startswith("535.") and fact["loaded"] == "" and not fact["reboot_required"], fact
    again = _play(installed, bare)
    assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout[-4000:]
