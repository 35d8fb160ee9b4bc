"""``hvdcluster health`` over the project's own fixtures: the controller's judgement, the node's read (hvd_health_read)
and the command's contract.

tests/unit/test_health_cli.py asserts the same on real recorded outputs (../shared/fixtures-gpu), an extra layer
skipped where that folder is absent; here the GPU and fabric outputs are ours (tests/unit/plugins/fixtures/gpu, written
in each tool's documented format, its README.md says what each stands for), so every path runs in any checkout. The
helpers, the node's stand-in root and the fake tools are tests/unit/health_readings.py's.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from ansible_collections.hvd.cluster.plugins.module_utils import hvd_health_net
from ansible_collections.hvd.cluster.tests.unit.plugins.support import own_gpu_fixture

from hvdcluster import cli, health
from tests.unit.health_readings import fake_health, fake_tool, items, module_reading, pci, reading
from tests.unit.health_readings import node_root  # noqa: F401 - a fixture: the test below asks for it by name

H100_Q = "nvidia-smi-q_h100-sxm-2gpu_550.144.03.txt"
A100_Q = "nvidia-smi-q_a100-sxm4-4gpu_450.80.02_single-double-bit-ecc-layout.txt"
A10_REMAP = "nvidia-smi-q_a10_535.154.05_row-remap-pending.txt"
SMI_NO_DRIVER = "nvidia-smi_FAIL-couldnt-communicate_then-dkms-install-without-headers.txt"
NVLINK_A100 = "nvidia-smi-nvlink-s_a100-sxm4-2gpu_12x25GBs.txt"
DMESG_79 = "journalctl-k_xid-79-fallen-off-bus_sxid-20034-fatal.log"
IB_NDR = "ibstat_cx7-ndr400-2ib-active_eth-bond-up_2eth-down.txt"
FM_SYSTEMCTL = "systemctl-status_nvidia-fabricmanager_FAIL-version-mismatch_550.90.07-vs-550.144.03.txt"
DCGM_R1_FAIL = "dcgmi-diag-r1_h100-2gpu_FAIL-persistence-mode_dcgm3.3.9.txt"


def read(name: str) -> str:
    return own_gpu_fixture(name).read_text(encoding="utf-8")


def h100(**fields: object) -> dict:
    """Our 2 x H100 node, driver loaded, both GPUs on the bus."""
    return reading(**{"nvidia_smi_q": read(H100_Q), "nvidia_smi_q_error": "", "nvlink": "", "nvlink_error": "",
                      "pci": pci(2), "modules": ["nvidia", "nvidia_modeset", "nvidia_uvm"], **fields})


# ------------------------------------------------------------------------------------------ judge


def test_two_h100s_where_two_are_expected_are_healthy() -> None:
    assert health.judge("gpu01", h100(), 2) == []
    assert health.judge("gpu01", h100(), None) == []  # no record: the 2 GPUs on its PCI bus are expected


def test_four_a100s_where_eight_are_expected_fail_naming_the_count() -> None:
    findings = health.judge("gpu02", reading(nvidia_smi_q=read(A100_Q), nvidia_smi_q_error="", pci=pci(4)), 8)
    assert items(findings) == {"gpu.count": "fail"}
    count, = findings
    assert count["found"] == "4 GPUs" and count["node"] == "gpu02"
    assert count["expected"] == f"8 GPUs ({health.RECORDED})"


def test_without_a_record_the_gpus_on_the_pci_bus_are_expected() -> None:
    findings = health.judge("gpu02", reading(nvidia_smi_q=read(A100_Q), nvidia_smi_q_error="", pci=pci(5)), None)
    count = next(f for f in findings if f["item"] == "gpu.count")
    assert count["expected"] == f"5 GPUs ({health.ON_PCI})"


def test_the_a10s_pending_row_remap_fails() -> None:
    findings = health.judge("gpu03", reading(nvidia_smi_q=read(A10_REMAP), nvidia_smi_q_error="", pci=pci(1)), 1)
    assert items(findings) == {"gpu.row_remap.0000:af:00.0": "fail"}
    assert "2 rows" in findings[0]["found"]


def test_xid_79_in_the_kernel_log_fails_and_names_the_gpu() -> None:
    findings = health.judge("gpu01", h100(kernel_log=read(DMESG_79)), 2)
    assert items(findings) == {"gpu.xid.0000:ba:00.0.79": "fail", "nvswitch.sxid.0000:05:00.0.20034": "fail",
                               "nvswitch.sxid.0000:06:00.0.20034": "fail"}
    assert "fallen off the bus" in next(f["found"] for f in findings if f["item"] == "gpu.xid.0000:ba:00.0.79")


def test_an_active_ib_port_beside_gpus_without_nvidia_peermem_is_a_warning() -> None:
    ib = hvd_health_net.parse_ibstat(read(IB_NDR))
    findings = health.judge("gpu01", h100(ib=ib), 2)
    assert items(findings) == {"gpu.peermem": "warn"}
    assert findings[0]["found"] == "nvidia_peermem not loaded (2 GPUs, Active ports mlx5_0/1, mlx5_1/1)"
    assert health.judge("gpu01", h100(ib=ib, modules=["nvidia", "nvidia_peermem"]), 2) == []
    assert health.judge("cpu01", reading(ib=ib), None) == []  # no GPU: nothing for GPUDirect RDMA to reach


def test_fabric_manager_at_another_version_than_the_driver_fails_on_an_nvswitch_node() -> None:
    node = h100(pci=pci(2, switches=4), fabricmanager_active="failed", fabricmanager_journal=read(FM_SYSTEMCTL))
    findings = health.judge("gpu01", node, 2)
    assert items(findings) == {"fabricmanager.active": "fail", "fabricmanager.version": "fail"}
    version = next(f for f in findings if f["item"] == "fabricmanager.version")
    assert version["found"] == "Fabric Manager 550.90.07, driver 550.144.03"
    assert version["expected"] == "Fabric Manager 550.144.03"
    running = h100(pci=pci(2, switches=4), fabricmanager_active="active\n",
                   fabricmanager_version="Fabric Manager version is : 550.144.03\n")
    assert health.judge("gpu01", running, 2) == []


def test_gpus_on_the_bus_that_nvidia_smi_cannot_reach_fail() -> None:
    said = next(line for line in read(SMI_NO_DRIVER).splitlines() if line.startswith("NVIDIA-SMI has failed"))
    node = reading(nvidia_smi_q=said + "\n", nvidia_smi_q_error=f"nvidia-smi -q: exit 9: {said}", pci=pci(2))
    findings = health.judge("gpu01", node, None)
    assert items(findings) == {"gpu.nvidia_smi": "fail"}
    assert "couldn't communicate with the NVIDIA driver" in findings[0]["found"]


def test_an_unreadable_kernel_log_on_a_gpu_node_is_a_warning_that_keeps_it_healthy() -> None:
    node = h100(kernel_log=None, kernel_log_error="dmesg: exit 1: dmesg: read kernel buffer failed")
    report = health.assess({"gpu01": node}, {"gpu01": {"gpu.count": 2}})
    assert items(report["gpu01"]["findings"]) == {"kernel_log": "warn"} and report["gpu01"]["healthy"]
    assert health.exit_code(report, {}) == 0


def test_identical_nodes_fold_onto_one_line_and_each_finding_is_one_line() -> None:
    report = health.assess({"gpu01": h100(), "gpu02": h100(), "gpu03": h100(kernel_log=read(DMESG_79))},
                           {node: {"gpu.count": 2} for node in ("gpu01", "gpu02", "gpu03")})
    text = health.render(report, {"gpu04": "unreachable: no route"})
    assert "gpu[01-02]: healthy\n" in text
    assert "gpu03: unhealthy, 3 failed\n" in text  # the Xid and 2 NVSwitches' SXid 20034
    assert ("  fail gpu.xid.0000:ba:00.0.79: Xid 79 x1 (GPU has fallen off the bus: the GPU no longer answers on "
            "PCIe) (expected no Xid event) — drain the node") in text
    assert "unreachable: gpu04\n  gpu04: unreachable: no route" in text


# ------------------------------------------------------------------------------------------ the module


@pytest.fixture
def fake_bin(tmp_path: Path) -> Path:
    """nvidia-smi, journalctl and dcgmi printing our fixtures (dcgmi exits 226, as it does when a test fails)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    q = shlex.quote
    fake_tool(folder, "nvidia-smi", f'case "$1" in -q) cat {q(str(own_gpu_fixture(A100_Q)))};; '
                                    f'nvlink) cat {q(str(own_gpu_fixture(NVLINK_A100)))};; esac')
    fake_tool(folder, "journalctl", f'case "$1" in -k) cat {q(str(own_gpu_fixture(DMESG_79)))};; *) exit 1;; esac')
    fake_tool(folder, "dcgmi", f"cat {q(str(own_gpu_fixture(DCGM_R1_FAIL)))}; exit 226")
    return folder


def test_the_module_reads_the_tools_and_the_kernel_files_and_changes_nothing(node_root: Path, fake_bin: Path) -> None:
    got = module_reading(node_root, fake_bin)
    assert got["nvidia_smi_q"] == read(A100_Q) and got["nvlink"] == read(NVLINK_A100)
    assert got["kernel_log_source"] == "journalctl" and "Xid (PCI:0000:ba:00): 79" in got["kernel_log"]
    assert "NVRM: GPU Board Serial Number" in got["kernel_log"]
    assert [d["address"] for d in got["pci"]] == ["0000:05:00.0", "0000:07:00.0", "0000:08:00.0"]
    assert got["ib"]["ports"][0] == {"ca": "mlx5_0", "port": 1, "state": "Active", "physical_state": "LinkUp",
                                     "rate_gbps": 400.0, "link_layer": "InfiniBand"}
    assert got["modules"] == ["nvidia", "nvidia_uvm"]
    assert got["dcgm_diag"] == read(DCGM_R1_FAIL) and "exit 226" in got["dcgm_diag_error"]
    assert got["fabricmanager_active"] is None and got["fabricmanager_active_error"] == "systemctl: not installed"
    judged = items(health.judge("gpu01", got, 2))
    assert judged["gpu.count"] == "fail" and judged["gpu.xid.0000:ba:00.0.79"] == "fail"
    assert judged["gpu.peermem"] == "warn" and judged["fabricmanager.active"] == "fail"
    assert judged["dcgm.diag.persistence_mode"] == "fail"


# ------------------------------------------------------------------------------------------ the command


@pytest.fixture
def rendered(hosts: Path, tmp_path: Path) -> Path:
    """The inventory `up` would have written, and each node's record: 2 GPUs (our H100 node's count)."""
    assert cli.main(["inventory", str(hosts), "-o", str(tmp_path / "inv")]) == 0
    (tmp_path / "inv" / "c1" / "state").mkdir()
    for node in ("gpu01", "gpu02"):
        (tmp_path / "inv" / "c1" / "state" / f"{node}.json").write_text(json.dumps({"state": {"gpu.count": 2}}))
    return tmp_path / "inv"


def test_a_failure_exits_1_and_healthy_nodes_exit_0(hosts: Path, rendered: Path, capsys,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    a100 = reading(nvidia_smi_q=read(A100_Q), nvidia_smi_q_error="", pci=pci(4))
    fake_health(monkeypatch, {"gpu01": h100(), "gpu02": a100})
    assert cli.main(["health", str(hosts), "-o", str(rendered), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["cluster"] == "c1" and doc["unreachable"] == {} and doc["log"] == "runs/log"
    assert doc["nodes"]["gpu01"] == {"healthy": True, "findings": [], "notes": doc["nodes"]["gpu01"]["notes"],
                                     "expected_gpus": 2}
    assert not doc["nodes"]["gpu02"]["healthy"]
    first = doc["nodes"]["gpu02"]["findings"][0]
    assert {"item": "gpu.count", "found": "4 GPUs", "node": "gpu02"}.items() <= first.items()
    calls = fake_health(monkeypatch, {"gpu01": h100(), "gpu02": h100()})
    assert cli.main(["health", str(hosts), "-o", str(rendered), "--quick"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gpu[01-02]: healthy\n")
    assert out.splitlines()[-1] == "health: 2 healthy, 0 with failures (read 2 nodes in 0.1 s; log: runs/log)"
    assert calls == [(None, True)]


def test_warnings_are_printed_and_exit_0_an_unreachable_node_exits_1(hosts: Path, rendered: Path, capsys,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    fake_health(monkeypatch, {"gpu01": h100(kernel_log=None, kernel_log_error="dmesg: refused \x1b[2J")})
    assert cli.main(["health", str(hosts), "-o", str(rendered), "--limit", "gpu01"]) == 0
    out = capsys.readouterr().out
    assert "gpu01: healthy, 1 warning\n  warn kernel_log: dmesg: refused" in out and "\x1b" not in out
    fake_health(monkeypatch, {"gpu01": h100()}, {"gpu02": "unreachable: no route to host"})
    assert cli.main(["health", str(hosts), "-o", str(rendered)]) == 1
    out = capsys.readouterr().out
    assert "unreachable: gpu02\n  gpu02: unreachable: no route to host" in out
    assert "1 unreachable" in out.splitlines()[-1]
