"""What the ``hvdcluster health`` tests share (test_health_cli.py, test_health_cli_own.py, test_bandwidth.py,
test_pcie_acs_iommu.py, test_bandwidth_cli.py): a node's reading as hvd_health_read returns it, a folder standing in
for a GPU node's /, fake GPU tools, the module run as Ansible runs it, and health.read answered without Ansible."""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

import pytest

from ansible_collections.hvd.cluster.tests.unit.plugins.support import run_module
from hvdcluster import health, nodestate


def pci(gpus: int, switches: int = 0) -> list[dict[str, str]]:
    """NVIDIA PCI functions as the module lists them: ``gpus`` 3D controllers and ``switches`` NVSwitches."""
    return ([{"address": f"0000:{0x10 + i:02x}:00.0", "class": "0x030200", "device": "0x2330"} for i in range(gpus)]
            + [{"address": f"0000:{0x80 + i:02x}:00.0", "class": "0x068000", "device": "0x22a3"}
               for i in range(switches)])


def reading(**fields: object) -> dict:
    """A node's reading as plugins/modules/hvd_health_read.py returns it: a CPU node (nothing NVIDIA, no InfiniBand, the
    kernel log readable and quiet) with ``fields`` over it."""
    base = {"user": "hvdadmin", "nvidia_smi_q": None, "nvidia_smi_q_error": "nvidia-smi: not installed",
            "nvlink": None, "nvlink_error": "nvidia-smi: not installed", "kernel_log": "", "kernel_log_error": "",
            "ib": None, "modules": [], "modules_error": "", "pci": [], "fabricmanager_active": "inactive",
            "fabricmanager_version": None, "fabricmanager_journal": None, "dcgm_diag": None,
            "dcgm_diag_error": "dcgmi: not installed"}
    return {**base, **fields}


def items(findings: list[dict]) -> dict[str, str]:
    return {finding["item"]: finding["severity"] for finding in findings}


def fake_tool(folder: Path, name: str, body: str) -> None:
    """An executable ``folder/name`` running ``body`` in sh; ``cat`` in it is the real one (PATH holds ``folder``
    only)."""
    path = folder / name
    path.write_text(f"#!/bin/sh\ncat() {{ {shlex.quote(shutil.which('cat') or '/bin/cat')} \"$@\"; }}\n{body}\n")
    path.chmod(0o755)


@pytest.fixture
def node_root(tmp_path: Path) -> Path:
    """A folder standing in for a GPU node's /: two NVIDIA GPUs and an NVSwitch on the PCI bus (and an Intel
    device), one Active NDR InfiniBand port, the nvidia modules loaded without nvidia_peermem."""
    root = tmp_path / "root"
    for address, vendor, klass in (("0000:07:00.0", "0x10de", "0x030200"), ("0000:08:00.0", "0x10de", "0x030200"),
                                   ("0000:05:00.0", "0x10de", "0x068000"), ("0000:00:1f.0", "0x8086", "0x060100")):
        dev = root / "sys/bus/pci/devices" / address
        dev.mkdir(parents=True)
        for name, value in (("vendor", vendor), ("class", klass), ("device", "0x2330")):
            (dev / name).write_text(value + "\n")
    port = root / "sys/class/infiniband/mlx5_0/ports/1"
    port.mkdir(parents=True)
    for name, value in (("state", "4: ACTIVE"), ("phys_state", "5: LinkUp"), ("rate", "400 Gb/sec (4X NDR)"),
                        ("link_layer", "InfiniBand")):
        (port / name).write_text(value + "\n")
    (root / "proc").mkdir()
    (root / "proc/modules").write_text("nvidia_uvm 1 0 - Live 0x0\nnvidia 2 1 nvidia_uvm, Live 0x0\n"
                                       "mlx5_ib 3 0 - Live 0x0\n")
    return root


def module_reading(root: Path, folder: Path, **args: object) -> dict:
    """hvd_health_read run as Ansible runs it, in check mode, with only ``folder`` on PATH."""
    result = run_module("hvd_health_read", {"root": str(root), "path": str(folder), **args}, check=True,
                        env={**os.environ, "PATH": str(folder)})
    assert result.get("changed") is False and "failed" not in result, result
    return result["reading"]


def fake_health(monkeypatch: pytest.MonkeyPatch, found: dict, unreachable: dict | None = None) -> list:
    """health.read answering ``found`` (node -> reading) without ansible; returns the calls' (limit, quick)."""
    calls: list = []

    def fake(root, limit=None, hosts=(), quick=False):
        calls.append((limit, quick))
        return nodestate.Reading(found=found, unreachable=unreachable or {}, log="runs/log", seconds=0.1)

    monkeypatch.setattr(health, "read", fake)
    return calls
