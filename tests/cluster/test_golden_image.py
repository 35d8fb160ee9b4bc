"""README's golden image through the user's door: `hvdcluster up` with the `hosts.yaml` README gives (`stack: {driver:
"535", gpu_repo: distro, without_device: true}`), on one Debian 12 node that holds a kernel image and its headers
(hvdcluster/node:debian12-kernel) and no NVIDIA device, logged in as a non-root sudo user. Real packages: Debian
non-free's 535 driver with DKMS really compiling its modules for the installed kernel, the distro's CUDA 11.8
toolkit, PyTorch 2.0's cuDNN and NCCL wheels, Horovod compiled with NCCL. Nothing is loaded (a container shares this
machine's kernel). Then `check` reads the node in sync (the module guard included) and a second `up` changes
nothing.

The env and the Horovod wheel land in the shared controller cache (HVDCLUSTER_CACHE, by default ~/.cache/hvdcluster):
a rerun on the same machine builds neither. The first `up`'s wall time is printed (pytest -s).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import yaml

from tests.cluster.conftest import SUDO_USER, Cli, changed_tasks
from tests.conftest import readme_golden_image
from tests.lab import Lab, build_kernel_image

pytestmark = pytest.mark.containers

NAME = "gold"
ENV = "/opt/hvd/env"


@pytest.fixture(scope="module")
def lab(node_image: str, tmp_path_factory: pytest.TempPathFactory) -> Lab:
    lab = Lab(NAME, 1, tmp_path_factory.mktemp(NAME), stack=yaml.safe_load(readme_golden_image())["stack"], user=SUDO_USER,
              image=build_kernel_image())
    lab.up()
    yield lab
    lab.down()


@pytest.fixture(scope="module")
def converged(installed: Path, lab: Lab) -> tuple[Cli, dict]:
    cli = Cli(installed, lab.workdir)
    start = time.monotonic()
    rc, doc, err = cli.up_json()
    print(f"\ngolden image: first up {time.monotonic() - start:.0f} s")
    assert rc == 0, err[-6000:]
    return cli, doc


def _kernel(lab: Lab) -> str:
    """The kernel image the node holds (the one its boot loader would start)."""
    found = lab.exec(1, "sh", "-c", "ls /boot | sed -n 's/^vmlinuz-//p'")
    kernels = found.stdout.split()
    assert len(kernels) == 1, found.stdout + found.stderr
    return kernels[0]


def test_up_builds_the_driver_for_the_installed_kernel_and_loads_nothing(converged, lab: Lab) -> None:
    kernel = _kernel(lab)
    dkms = lab.exec(1, "dkms", "status")
    assert re.search(rf"^nvidia(-current)?/535[\d.]*, {re.escape(kernel)}, x86_64: installed", dkms.stdout, re.M), (
        dkms.stdout + dkms.stderr)
    # Debian names them nvidia-current*.ko (its modprobe aliases map nvidia, nvidia-uvm, nvidia-modeset there)
    found = lab.exec(1, "find", f"/lib/modules/{kernel}", "-name", "nvidia*.ko*")
    files = {Path(f).name.split(".ko")[0].replace("-current", ""): f for f in found.stdout.split()}
    assert {"nvidia", "nvidia-uvm", "nvidia-modeset"} <= set(files), found.stdout + found.stderr
    for module in ("nvidia", "nvidia-uvm", "nvidia-modeset"):
        info = lab.exec(1, "modinfo", "-F", "version", files[module])
        assert info.returncode == 0 and info.stdout.startswith("535."), (module, info.stdout + info.stderr)
    assert lab.exec(1, "sh", "-c", "lsmod 2>/dev/null | grep -q '^nvidia'").returncode != 0
    fact = lab.exec(1, "cat", "/etc/ansible/facts.d/hvd_nvidia_driver.fact")
    assert fact.returncode == 0, fact.stderr
    assert '"mode": "image"' in fact.stdout and kernel in fact.stdout, fact.stdout


def test_up_installs_the_distros_cuda_and_builds_horovod_with_nccl_from_the_frameworks_wheel(converged, lab: Lab) -> None:
    nvcc = lab.exec(1, "nvcc", "--version")
    assert nvcc.returncode == 0 and "release 11.8" in nvcc.stdout, nvcc.stdout + nvcc.stderr
    torch = lab.exec(1, f"{ENV}/bin/python", "-c", "import torch; print(torch.__version__, torch.version.cuda)")
    assert torch.returncode == 0 and torch.stdout.split()[0].startswith("2.0.") and torch.stdout.split()[1] == "11.7", (
        torch.stdout + torch.stderr)
    check = lab.exec(1, f"{ENV}/bin/horovodrun", "--check-build")
    assert check.returncode == 0 and re.search(r"\[X\] NCCL", check.stdout), check.stdout + check.stderr
    linked = lab.exec(1, "sh", "-c", f"ldd {ENV}/lib/python3.11/site-packages/horovod/torch/mpi_lib_v2*.so")
    # hvd_nccl unpacked PyTorch's own NCCL wheel into its prefix; Horovod links it there, shared
    assert re.search(r"libnccl\.so\.2 => /opt/hvd/nccl/lib/libnccl\.so\.2 ", linked.stdout), linked.stdout
    assert re.search(r"libcudart\.so\.11\.0 => ", linked.stdout), linked.stdout


def test_check_reads_the_golden_image_in_sync_guard_included(converged, lab: Lab) -> None:
    cli, _ = converged
    proc = cli("check", "hosts.yaml")
    assert proc.returncode == 0 and "node1: in sync" in proc.stdout, proc.stdout + proc.stderr


def test_a_second_up_changes_nothing(converged) -> None:
    cli, first = converged
    assert changed_tasks(first["log"], "node1"), "the first up changed nothing"
    rc, doc, err = cli.up_json()
    assert rc == 0, err[-4000:]
    assert doc["hosts"]["node1"]["changed"] == 0 and doc["fast_path"]["in_sync"] == ["node1"], doc
