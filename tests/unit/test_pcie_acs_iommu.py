"""PCIe ACS and the IOMMU (issue 52), on the project's own fixtures: lspci -vvv, the config space and /proc/cmdline
parsed and judged, and read by the node module from a folder standing in for /."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_health, hvd_health_net
from ansible_collections.hvd.cluster.tests.unit.plugins.support import own_gpu_fixture

from hvdcluster import health
from tests.unit.bandwidth_fakes import CMDLINE_ON, CMDLINE_PT, LSPCI_ACS, LSPCI_DENIED, read
from tests.unit.health_readings import fake_tool, module_reading


def test_lspci_acs_is_parsed_per_bridge_with_domain_and_bits() -> None:
    devices = hvd_health_net.parse_lspci_acs(read(LSPCI_ACS))["devices"]
    assert devices["0000:02:08.0"]["acsctl"] == {"SrcValid": True, "TransBlk": False, "ReqRedir": True,
                                                 "CmpltRedir": True, "UpstreamFwd": True, "EgressCtrl": False,
                                                 "DirectTrans": False}
    assert devices["0000:00:01.0"]["acsctl"]["SrcValid"] is False
    assert devices["0000:01:00.0"]["acsctl"] is None and devices["0000:03:00.0"]["acsctl"] is None
    denied = hvd_health_net.parse_lspci_acs(read(LSPCI_DENIED))["devices"]
    assert all(dev["denied"] and dev["acsctl"] is None for dev in denied.values()) and len(denied) == 8


PATHS = {"0000:03:00.0": ["0000:00:01.0", "0000:01:00.0", "0000:02:08.0"],
         "0000:04:00.0": ["0000:00:01.0", "0000:01:00.0", "0000:02:10.0"],
         "0000:05:00.0": ["0000:00:01.0", "0000:01:00.0", "0000:02:14.0"]}


def test_acs_redirect_above_a_gpu_and_a_nic_fails_naming_the_bridge_and_the_fix() -> None:
    findings = hvd_health.check_acs(hvd_health_net.parse_lspci_acs(read(LSPCI_ACS)), PATHS, peers=3)
    assert {(f["item"], f["severity"]) for f in findings} == {("pcie.acs.0000:02:08.0", "fail"),
                                                              ("pcie.acs.0000:02:14.0", "fail")}
    first = findings[0]
    assert first["found"] == ("ACSCtl SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+ on bridge 0000:02:08.0 above "
                              "0000:03:00.0")
    assert "setpci -s 0000:02:08.0 ECAP_ACS+0x6.w=0000" in first["fix"] and hvd_health.SOURCES["acs"] in first["source"]
    alone = hvd_health.check_acs(hvd_health_net.parse_lspci_acs(read(LSPCI_ACS)), {"0000:03:00.0": PATHS["0000:03:00.0"]}, peers=1)
    assert [f["severity"] for f in alone] == ["warn"]  # no peer on the node to send P2P traffic to


def test_acs_from_the_config_space_reads_the_control_register_of_the_extended_capability() -> None:
    config = bytearray(4096)
    config[0x100:0x104] = (0x0001 | (1 << 16) | (0x148 << 20)).to_bytes(4, "little")  # AER, next at 0x148
    config[0x148:0x14c] = (0x000D | (1 << 16)).to_bytes(4, "little")  # ACS, last
    config[0x14e:0x150] = (0b0011101).to_bytes(2, "little")  # SrcValid ReqRedir CmpltRedir UpstreamFwd
    bits = hvd_health_net.parse_pci_config_acs(bytes(config))
    assert [name for name, on in bits.items() if on] == ["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"]
    assert hvd_health_net.parse_pci_config_acs(bytes(64)) is None and hvd_health_net.parse_pci_config_acs(bytes(4096)) is None


def test_an_iommu_translating_gpu_dma_is_a_warning_that_names_the_kernel_setting() -> None:
    groups = {"0000:03:00.0": "DMA-FQ", "0000:05:00.0": "DMA-FQ", "0000:04:00.0": "identity"}
    finding, = hvd_health.check_iommu(read(CMDLINE_ON), groups)
    assert finding["severity"] == "warn" and "intel_iommu=on" in finding["found"] and "DMA-FQ" in finding["found"]
    assert "iommu=pt" in finding["fix"] and hvd_health.SOURCES["iommu_groups"] in finding["source"]
    assert hvd_health_net.parse_cmdline_iommu(read(CMDLINE_PT)) == {"intel_iommu": None, "amd_iommu": "on", "iommu": "pt"}
    assert hvd_health.check_iommu(read(CMDLINE_PT), {"0000:03:00.0": "identity"}) == []
    assert hvd_health.check_iommu("", {"0000:03:00.0": None}) == []  # in no group: the IOMMU is off


def test_the_node_module_reads_paths_acs_and_iommu_groups_from_sysfs_and_lspci(tmp_path: Path) -> None:
    root = tmp_path / "root"
    devices = root / "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"
    for bridge, device, klass, vendor in (("0000:02:08.0", "0000:03:00.0", "0x030200", "0x10de"),
                                          ("0000:02:14.0", "0000:05:00.0", "0x020700", "0x15b3")):
        dev = devices / bridge / device
        dev.mkdir(parents=True)
        for name, value in (("vendor", vendor), ("class", klass), ("device", "0x20b5")):
            (dev / name).write_text(value + "\n")
        (root / "sys/bus/pci/devices").mkdir(parents=True, exist_ok=True)
        os.symlink(f"../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0/{bridge}/{device}",
                   root / "sys/bus/pci/devices" / device)
    group = root / "sys/kernel/iommu_groups/17"
    group.mkdir(parents=True)
    (group / "type").write_text("DMA-FQ\n")
    os.symlink("../../../../../../kernel/iommu_groups/17", devices / "0000:02:08.0/0000:03:00.0/iommu_group")
    (root / "sys/class/infiniband/mlx5_0").mkdir(parents=True)
    os.symlink("../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:14.0/0000:05:00.0",
               root / "sys/class/infiniband/mlx5_0/device")
    (root / "proc").mkdir()
    (root / "proc/cmdline").write_text(read(CMDLINE_ON))
    tools = tmp_path / "bin"
    tools.mkdir()
    fake_tool(tools, "lspci", f"cat {shlex.quote(str(own_gpu_fixture(LSPCI_ACS)))}")
    got = module_reading(root, tools, quick=True)
    assert got["pcie_paths"] == {"0000:03:00.0": ["0000:00:01.0", "0000:01:00.0", "0000:02:08.0"],
                                 "0000:05:00.0": ["0000:00:01.0", "0000:01:00.0", "0000:02:14.0"]}
    assert got["iommu_groups"] == {"0000:03:00.0": "DMA-FQ", "0000:05:00.0": None}
    assert got["iommu_cmdline"].startswith("BOOT_IMAGE=") and set(got["acs"]["devices"]) == {
        "0000:00:01.0", "0000:01:00.0", "0000:02:08.0", "0000:02:14.0"}
    judged = {f["item"]: f["severity"] for f in health.judge("gpu01", got, 1) if f["item"].startswith("pcie.")}
    assert judged == {"pcie.acs.0000:02:08.0": "fail", "pcie.acs.0000:02:14.0": "fail", "pcie.iommu": "warn"}
    fake_tool(tools, "lspci", f"cat {shlex.quote(str(own_gpu_fixture(LSPCI_DENIED)))}")
    denied = module_reading(root, tools, quick=True)
    assert denied["acs"] is None and "root only" in denied["acs_error"]
    assert any(note.startswith("PCIe ACS not read: lspci -vvv as ") for note in health.notes(denied, 1))


def test_a_cpu_node_reads_no_pcie_state_and_gets_no_pcie_finding(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    got = module_reading(tmp_path / "nothing", tmp_path / "bin")
    assert got["pcie_paths"] == {} and got["acs"] is None and health.judge("cpu01", got, None) == []
