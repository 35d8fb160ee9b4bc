"""plugins/module_utils/hvd_health*.py: the GPU and fabric parsers and the health rules over recorded tool output.

No GPU, NVSwitch or InfiniBand adapter is reachable here, so the GPU and fabric outputs are recorded ones: real
captures from public repositories and issues, read in place from ../shared/fixtures-gpu next to the checkout (its
SOURCES.md names where each came from; they are never copied into this repository). Every value asserted below was
read from those files by hand. Where no recording shows a failure (an uncorrectable ECC counter, a failed row
remap), the test raises that one field of a recorded clean reading and says so.

These real recordings are an extra layer: test_hvd_health_own.py proves every parser and rule path on the project's
own fixtures (tests/unit/plugins/fixtures/gpu), and where ../shared/fixtures-gpu is absent (a plain clone, the copy
ansible-test units runs in) the tests here that read it are skipped, with the reason (tests/unit/plugins/support.py
gpu_fixture).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from ansible_collections.hvd.cluster.tests.unit.plugins.support import gpu_fixture

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_bandwidth, hvd_health, hvd_health_gpu, hvd_health_net


H100_Q = "nvidia-smi-q_h100-8gpu_535.183.01.txt"
H100_Q_565 = "nvidia-smi-q_h100-sxm-8gpu_565.57.01.txt"
A100_Q = "nvidia-smi-q_a100-sxm4-80gb-4gpu_555.42.02.txt"
A10_REMAP = "nvidia-smi-q_a10_row-remap-pending-uncorrectable4_535.129.03.txt"
L4_LINK = "nvidia-smi-q_l4-pcie_gen1-of-gen4_x8-of-x16_550.90.07.txt"
PAGES_CLEAN = "nvidia-smi-q-d-PAGE_RETIREMENT_8gpu_535.86.10_clean.txt"
PAGES_EDITED = "nvidia-smi-q-d-PAGE_RETIREMENT_8gpu_535.86.10_retired-pages-EDITED.txt"
A100_XML = "nvidia-smi-q-x_a100-sxm4-80gb-mig_535.54.03.xml"
NVLINK_A100 = "nvidia-smi-nvlink-s_a100-sxm4-80gb-8gpu_12x25GBs.txt"
NVLINK_V100 = "nvidia-smi-nvlink-s_v100-sxm2-32gb_2-links-inactive_excerpt.txt"
NVLINK_DEAD = "nvidia-smi-nvlink-s-i6_a100-sxm4-80gb_all-links-inactive.txt"
DMESG_LINES = "dmesg_lines_xid-64-row-remap-exhausted_xid-94_sxid-12028_mlx5-pcie-x8-limited.log"
DMESG_119 = "dmesg_xid-119-gsp-rpc-timeout.log"
DMESG_DBE = "dmesg_xid-48-63-94_h100_dbe-row-remap-contained.log"
DMESG_79 = "dmesg_xid-79-fallen-off-bus_sxid-20034_h100-nvswitch.log"
IB_NDR = "ibstat_h100-cx7-ndr400-ib-all-active.txt"
IB_NDR_ETH_DOWN = "ibstat_h100-cx7-ndr400-ib_eth-ports-down.txt"
IB_ROCE = "ibstat_h100-cx7-roce400_2-ports-down-disabled.txt"
IB_HDR = "ibstat_a100-cx6-hdr200-ib-8port.txt"
IB_PANIC = "ibstat_a100-azure-hdr200_ibpanic-exit255.txt"
IB_PORT_DOWN = "ibstat_a100-pcie-node_cx6-hdr200-active_ib-port-down.txt"
AR_SOCKET = "all_reduce_perf_2node-socket-fallback_eks-efa-disabled.txt"
NCCL_GDR = "nccl-debug-info_2node-a100-pcie_net-ib-gdrdma_gather_perf.log"
DCGM_R1_FAIL = "dcgmi-diag-r1_h200-8gpu_FAIL-persistence-mode_dcgm3.1.8.txt"
DCGM_R3_FAIL = "dcgmi-diag-r3_h100-8gpu_FAIL-cuinit-not-initialized_fabricmanager-down.txt"
DCGM_R3_SKIPS = "dcgmi-diag-r3_rtxpro6000-blackwell-2gpu_pass-with-skips_dcgm3.3.9.txt"
DCGM_JSON = "dcgm-diag-r1-json_8gpu-pass_dcgm3.1.0_nvvs.json"
FM_SYSTEMCTL = "systemctl-status_nvidia-fabricmanager_FAIL-version-mismatch_550.127.05-vs-550.120.txt"
FM_JOURNAL = "journal-line_nv-fabricmanager_FAIL-version-mismatch_530.30.02-vs-530.41.03.txt"
FM_NO_SWITCH = "journalctl_nvidia-fabricmanager_FAIL-NV_WARN_NOTHING_TO_DO_a40-nvlink-bridge-no-nvswitch.txt"
FM_LOG = "nv-fabricmanager_h100-535.161.08_nvswitch-nonfatal-12028.log"


def read(name: str) -> str:
    return gpu_fixture(name).read_text(encoding="utf-8")


def smi(name: str) -> dict:
    return hvd_health_gpu.parse_nvidia_smi_q(read(name))


def items(findings: list[dict]) -> list[str]:
    return [finding["item"] for finding in findings]


# ------------------------------------------------------------------------------------------ parsers


def test_smi_q_reads_every_h100_with_its_bus_id_and_a_full_gen5_x16_link() -> None:
    parsed = smi(H100_Q)
    assert (parsed["driver_version"], parsed["cuda_version"], parsed["attached_gpus"]) == ("535.183.01", "12.2", 8)
    assert [gpu["bus_id"] for gpu in parsed["gpus"]] == [
        "0000:53:00.0", "0000:64:00.0", "0000:75:00.0", "0000:86:00.0",
        "0000:97:00.0", "0000:a8:00.0", "0000:b9:00.0", "0000:ca:00.0"]
    for gpu in parsed["gpus"]:
        assert gpu["name"] == "NVIDIA H100 80GB HBM3" and gpu["persistence_mode"] is True
        assert gpu["pcie"] == {"gen_current": 5, "gen_max": 5, "width_current": 16, "width_max": 16}
        assert gpu["ecc_mode"] == "Enabled" and gpu["ecc_uncorrectable"] == {"volatile": 0, "aggregate": 0}
        assert gpu["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
        assert gpu["retired_pages"] == {"single_bit": None, "double_bit": None, "pending": None}  # N/A on Hopper


def test_smi_q_reads_other_drivers_and_gpu_counts() -> None:
    newer = smi(H100_Q_565)
    assert newer["driver_version"] == "565.57.01" and len(newer["gpus"]) == 8
    assert newer["gpus"][0]["bus_id"] == "0000:18:00.0" and newer["gpus"][-1]["bus_id"] == "0000:db:00.0"
    a100 = smi(A100_Q)
    assert [gpu["bus_id"] for gpu in a100["gpus"]] == ["0000:68:00.0", "0000:9e:00.0", "0000:c2:00.0", "0000:d4:00.0"]
    assert a100["gpus"][0]["pcie"]["gen_max"] == 4  # "Max 4" is taken, not the host's "Host Max 5"


def test_smi_q_reads_the_a10s_pending_row_remap_of_four_uncorrectable_rows() -> None:
    gpu, = smi(A10_REMAP)["gpus"]
    assert gpu["bus_id"] == "0000:07:00.0" and gpu["name"] == "NVIDIA A10"
    assert gpu["remapped_rows"] == {"correctable": 0, "uncorrectable": 4, "pending": True, "failure": False}
    assert gpu["ecc_uncorrectable"] == {"volatile": 0, "aggregate": 0}


def test_smi_q_reads_the_l4_link_trained_at_gen1_x8_of_gen4_x16() -> None:
    gpu, = smi(L4_LINK)["gpus"]
    assert gpu["pcie"] == {"gen_current": 1, "gen_max": 4, "width_current": 8, "width_max": 16}


def test_smi_q_page_retirement_section_reads_counts_and_pending_per_gpu() -> None:
    edited = [(gpu["bus_id"], gpu["retired_pages"]["single_bit"], gpu["retired_pages"]["double_bit"],
               gpu["retired_pages"]["pending"]) for gpu in smi(PAGES_EDITED)["gpus"]]
    assert edited == [("0001:00:00.0", 60, 5, False), ("0002:00:00.0", 2, 61, True), ("0003:00:00.0", 0, 0, False),
                      ("0004:00:00.0", 6, 0, True), ("0005:00:00.0", 0, 0, False), ("0006:00:00.0", 20, 45, True),
                      ("0007:00:00.0", 0, 0, False), ("0008:00:00.0", 8, 56, True)]
    clean = smi(PAGES_CLEAN)["gpus"]
    assert len(clean) == 8
    assert all(gpu["retired_pages"] == {"single_bit": 0, "double_bit": 0, "pending": False} for gpu in clean)


def test_smi_q_xml_reads_the_same_fields() -> None:
    parsed = hvd_health_gpu.parse_nvidia_smi_q_xml(read(A100_XML))
    assert (parsed["driver_version"], parsed["attached_gpus"], len(parsed["gpus"])) == ("535.54.03", 4, 1)
    gpu = parsed["gpus"][0]
    assert (gpu["bus_id"], gpu["name"], gpu["persistence_mode"]) == ("0000:01:00.0", "NVIDIA A100-SXM4-80GB", False)
    assert gpu["pcie"] == {"gen_current": 4, "gen_max": 4, "width_current": 16, "width_max": 16}
    assert gpu["ecc_uncorrectable"] == {"volatile": 0, "aggregate": 0}
    assert gpu["remapped_rows"]["pending"] is None  # "N/A": MIG is on


def test_nvlink_status_reads_links_speeds_and_inactive_ones() -> None:
    a100 = hvd_health_gpu.parse_nvlink_status(read(NVLINK_A100))
    assert [gpu["index"] for gpu in a100] == list(range(8))
    assert all(len(gpu["links"]) == 12 and all(link["speed_gbs"] == 25.0 for link in gpu["links"]) for gpu in a100)
    v100, = hvd_health_gpu.parse_nvlink_status(read(NVLINK_V100))
    assert (v100["index"], v100["name"]) == (3, "Tesla V100-SXM2-32GB")
    assert [link["link"] for link in v100["links"] if not link["active"]] == [3, 5]
    assert {link["speed_gbs"] for link in v100["links"] if link["active"]} == {25.781}
    dead, = hvd_health_gpu.parse_nvlink_status(read(NVLINK_DEAD))
    assert (dead["index"], dead["all_inactive"], dead["links"]) == (6, True, [])


@pytest.mark.parametrize("name, xids, sxids", [
    (DMESG_LINES, [("0000:0f:00.0", 94), ("0000:0f:00.0", 64)], [("0000:85:00.0", 12028, "Non-fatal")]),
    (DMESG_119, [("0000:9b:00.0", 119)] * 5, []),
    (DMESG_DBE, [("0000:19:00.0", 48), ("0000:19:00.0", 63)] + [("0000:19:00.0", 94)] * 9, []),
    (DMESG_79, [("0000:91:00.0", 79)],
     [("0000:06:00.0", 20034, "Fatal"), ("0000:05:00.0", 20034, "Fatal"), ("0000:07:00.0", 20034, None),
      ("0000:05:00.0", 20034, None), ("0000:07:00.0", 20034, "Fatal"), ("0000:05:00.0", 20034, "Fatal"),
      ("0000:07:00.0", 20034, None), ("0000:05:00.0", 20034, None)]),
])
def test_kernel_log_finds_every_xid_and_sxid_with_its_bus(name: str, xids: list, sxids: list) -> None:
    log = hvd_health_gpu.parse_kernel_log(read(name))
    assert [(event["bus_id"], event["code"]) for event in log["xid"]] == xids
    assert [(event["bus_id"], event["code"], event["severity"]) for event in log["sxid"]] == sxids


def test_kernel_log_keeps_pid_process_and_message() -> None:
    first = hvd_health_gpu.parse_kernel_log(read(DMESG_LINES))["xid"][0]
    assert (first["pid"], first["process"], first["message"]) == ("2503421", "python3", "Ch 00000008")
    remap = hvd_health_gpu.parse_kernel_log(read(DMESG_LINES))["xid"][1]
    assert remap["pid"] == "<unknown>" and remap["message"].endswith("All reserved rows for bank are remapped")


def test_ibstat_reads_every_port_and_its_link_layer() -> None:
    ndr = hvd_health_net.parse_ibstat(read(IB_NDR))
    ib = [port for port in ndr["ports"] if port["link_layer"] == "InfiniBand"]
    assert [port["ca"] for port in ib] == ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8",
                                           "mlx5_9"]
    assert all((p["state"], p["physical_state"], p["rate_gbps"], p["ca_type"]) == ("Active", "LinkUp", 400.0, "MT4129")
               for p in ib)
    assert [(p["ca"], p["link_layer"], p["rate_gbps"]) for p in ndr["ports"] if p not in ib] == [
        ("mlx5_bond_0", "Ethernet", 200.0)]
    down = hvd_health_net.parse_ibstat(read(IB_NDR_ETH_DOWN))["ports"]
    assert [(p["ca"], p["link_layer"]) for p in down if p["state"] == "Down"] == [
        ("mlx5_2", "Ethernet"), ("mlx5_7", "Ethernet"), ("mlx5_8", "Ethernet")]
    assert hvd_health_net.parse_ibstat(read(IB_NDR))["errors"] == []


def test_ibstat_keeps_the_ports_before_an_ibpanic_and_the_panic() -> None:
    panic = hvd_health_net.parse_ibstat(read(IB_PANIC))
    assert len(panic["ports"]) == 8 and {p["rate_gbps"] for p in panic["ports"]} == {200.0}
    assert panic["errors"] == ["ibpanic: [1400444] main: stat of IB device 'mlx5_8' failed: No such file or directory"]


def test_ib_sysfs_reads_the_kernels_spelling_into_ibstats(tmp_path: Path) -> None:
    """The files as drivers/infiniband/core/sysfs.c writes them (state_show, phys_state_show, rate_show)."""
    for ca, state, phys, rate, layer in [("mlx5_0", "4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)", "InfiniBand"),
                                         ("mlx5_1", "1: DOWN", "3: Disabled", "10 Gb/sec (4X SDR)", "InfiniBand")]:
        port = tmp_path / ca / "ports" / "1"
        port.mkdir(parents=True)
        for name, text in [("state", state), ("phys_state", phys), ("rate", rate), ("link_layer", layer)]:
            (port / name).write_text(text + "\n")
    parsed = hvd_health_net.parse_ib_sysfs(str(tmp_path))
    assert parsed["ports"] == [
        {"ca": "mlx5_0", "port": 1, "state": "Active", "physical_state": "LinkUp", "rate_gbps": 400.0,
         "link_layer": "InfiniBand"},
        {"ca": "mlx5_1", "port": 1, "state": "Down", "physical_state": "Disabled", "rate_gbps": 10.0,
         "link_layer": "InfiniBand"}]
    assert items(hvd_health.check_ib_ports(parsed)) == ["ib.port.mlx5_1/1"]
    assert hvd_health_net.parse_ib_sysfs(str(tmp_path / "absent"))["errors"]


def test_dcgmi_diag_table_reads_results_metadata_and_wrapped_messages() -> None:
    r1 = hvd_health_gpu.parse_dcgmi_diag(read(DCGM_R1_FAIL))
    assert (r1["passed"], r1["failed"]) == (False, ["Persistence Mode"])
    assert r1["metadata"]["DCGM Version"] == "3.1.8" and r1["metadata"]["Driver Version Detected"] == "550.127.08"
    persistence = next(test for test in r1["tests"] if test["name"] == "Persistence Mode")
    assert persistence["details"][0].startswith("Error: Persistence mode for GPU 0 is currently disabled. The DCGM")
    r3 = hvd_health_gpu.parse_dcgmi_diag(read(DCGM_R3_FAIL))
    assert r3["failed"] == ["GPU Memory"]
    memory = next(test for test in r3["tests"] if test["name"] == "GPU Memory")
    assert memory["category"] == "Hardware" and len(memory["details"]) == 8
    assert "Unable to initialize CUDA library: 'system not yet initialized'" in memory["details"][7]
    skips = hvd_health_gpu.parse_dcgmi_diag(read(DCGM_R3_SKIPS))
    assert skips["passed"] is True and len(skips["tests"]) == 15  # the table printed twice counts once
    assert {test["result"] for test in skips["tests"]} == {"Pass", "Skip - All"}


def test_dcgmi_diag_json_skips_leading_junk_and_nulls() -> None:
    diag = hvd_health_gpu.parse_dcgmi_diag_json(read(DCGM_JSON))
    assert diag["passed"] is True and diag["metadata"] == {"DCGM Version": "3.1.0"}
    assert len(diag["tests"]) == 10 and diag["tests"][-1]["name"] == "software"
    assert {test["result"] for test in diag["tests"]} == {"Pass"}


@pytest.mark.parametrize("name, fm, driver, mismatch, failed", [
    (FM_SYSTEMCTL, "550.127.05", "550.120", True, True),
    (FM_JOURNAL, "530.30.02", "530.41.03", True, False),
    (FM_NO_SWITCH, None, None, False, True),
    (FM_LOG, "535.161.08", None, False, False),
])
def test_fabricmanager_log_reads_versions_and_failure(name: str, fm: str, driver: str, mismatch: bool,
                                                      failed: bool) -> None:
    parsed = hvd_health_gpu.parse_fabricmanager_log(read(name))
    assert (parsed["fm_version"], parsed["driver_version"], parsed["mismatch"], parsed["failed"]) == (
        fm, driver, mismatch, failed)


# ------------------------------------------------------------------------------------------ rules


def test_every_finding_names_item_found_expected_fix_and_source() -> None:
    found = hvd_health.check_pcie(smi(L4_LINK), under_load=True) + hvd_health.check_xid(hvd_health_gpu.parse_kernel_log(read(DMESG_79)))
    assert found
    for finding in found:
        assert set(finding) == {"item", "severity", "found", "expected", "fix", "source"}
        assert all(finding.values()) and finding["severity"] in ("fail", "warn")


def test_gpu_count_below_expected_is_named() -> None:
    assert hvd_health.check_gpu_count(smi(H100_Q), 8) == []
    short, = hvd_health.check_gpu_count(smi(A100_Q), 8)
    assert (short["item"], short["found"], short["expected"]) == ("gpu.count", "4 GPUs", "8 GPUs")


def test_uncorrectable_ecc_count_is_a_failure() -> None:
    """No recording shows a non-zero counter: one volatile DRAM count of the clean H100 reading is raised."""
    clean = smi(H100_Q)
    assert hvd_health.check_ecc(clean) == [] and hvd_health.check_ecc(smi(A10_REMAP)) == []
    bad = copy.deepcopy(clean)
    bad["gpus"][2]["ecc_uncorrectable"]["volatile"] = 3
    finding, = hvd_health.check_ecc(bad)
    assert finding["item"] == "gpu.ecc.0000:75:00.0" and "volatile 3" in finding["found"]


def test_pending_page_retirement_is_named_per_gpu() -> None:
    assert hvd_health.check_retired_pages(smi(PAGES_CLEAN)) == []
    assert items(hvd_health.check_retired_pages(smi(PAGES_EDITED))) == [
        "gpu.retired_pages.0002:00:00.0", "gpu.retired_pages.0004:00:00.0", "gpu.retired_pages.0006:00:00.0",
        "gpu.retired_pages.0008:00:00.0"]


def test_row_remap_pending_and_failure_are_failures() -> None:
    pending, = hvd_health.check_row_remap(smi(A10_REMAP))
    assert (pending["item"], pending["found"]) == (
        "gpu.row_remap.0000:07:00.0", "row remap pending (4 rows for uncorrectable errors)")
    assert hvd_health.check_row_remap(smi(H100_Q)) == []
    failed = smi(A10_REMAP)  # no recording of a failed remap: the A10's flag is raised
    failed["gpus"][0]["remapped_rows"]["failure"] = True
    assert "RMA" in hvd_health.check_row_remap(failed)[0]["fix"]


def test_pcie_width_is_always_judged_and_gen_only_under_load() -> None:
    idle = hvd_health.check_pcie(smi(L4_LINK))
    assert [(f["item"], f["found"], f["expected"]) for f in idle] == [
        ("gpu.pcie_width.0000:01:00.0", "PCIe x8", "x16")]
    assert items(hvd_health.check_pcie(smi(L4_LINK), under_load=True)) == [
        "gpu.pcie_width.0000:01:00.0", "gpu.pcie_gen.0000:01:00.0"]
    assert hvd_health.check_pcie(smi(H100_Q), under_load=True) == []


def test_persistence_mode_off_is_a_warning() -> None:
    off, = hvd_health.check_persistence(hvd_health_gpu.parse_nvidia_smi_q_xml(read(A100_XML)))
    assert (off["item"], off["severity"]) == ("gpu.persistence.0000:01:00.0", "warn")
    assert hvd_health.check_persistence(smi(H100_Q)) == []


def test_inactive_nvlink_links_are_named() -> None:
    assert hvd_health.check_nvlink(hvd_health_gpu.parse_nvlink_status(read(NVLINK_A100))) == []
    v100, = hvd_health.check_nvlink(hvd_health_gpu.parse_nvlink_status(read(NVLINK_V100)))
    assert (v100["item"], v100["found"]) == ("gpu.nvlink.3", "GPU 3 (Tesla V100-SXM2-32GB): inactive links 3, 5")
    dead, = hvd_health.check_nvlink(hvd_health_gpu.parse_nvlink_status(read(NVLINK_DEAD)))
    assert dead["item"] == "gpu.nvlink.6" and "all links inactive" in dead["found"]


@pytest.mark.parametrize("name, judged", [
    (DMESG_LINES, [("gpu.xid.0000:0f:00.0.64", "fail"), ("gpu.xid.0000:0f:00.0.94", "warn")]),
    (DMESG_119, [("gpu.xid.0000:9b:00.0.119", "fail")]),
    (DMESG_DBE, [("gpu.xid.0000:19:00.0.48", "fail"), ("gpu.xid.0000:19:00.0.63", "warn"),
                 ("gpu.xid.0000:19:00.0.94", "warn")]),
    (DMESG_79, [("gpu.xid.0000:91:00.0.79", "fail")]),
])
def test_xid_events_are_judged_by_their_meaning(name: str, judged: list) -> None:
    found = hvd_health.check_xid(hvd_health_gpu.parse_kernel_log(read(name)))
    assert [(f["item"], f["severity"]) for f in found] == judged
    assert all(f["source"] == hvd_health.SOURCES["xid_catalog"] for f in found)


def test_xid_counts_repeats_and_a_clean_log_has_none() -> None:
    contained = hvd_health.check_xid(hvd_health_gpu.parse_kernel_log(read(DMESG_DBE)))[2]
    assert contained["found"].startswith("Xid 94 x9 (Contained ECC error")
    assert hvd_health.check_xid(hvd_health_gpu.parse_kernel_log(read(FM_LOG))) == []  # an FM log: no kernel lines


def test_xid_meaning_covers_the_common_codes() -> None:
    for code in (13, 31, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 119):
        meaning = hvd_health.XID_MEANING[code]
        assert meaning["severity"] in ("fail", "warn") and meaning["name"] and meaning["meaning"] and meaning["action"]


def test_sxid_fatal_fails_and_non_fatal_warns() -> None:
    fatal = hvd_health.check_sxid(hvd_health_gpu.parse_kernel_log(read(DMESG_79)))
    assert [(f["item"], f["severity"]) for f in fatal] == [
        ("nvswitch.sxid.0000:05:00.0.20034", "fail"), ("nvswitch.sxid.0000:06:00.0.20034", "fail"),
        ("nvswitch.sxid.0000:07:00.0.20034", "fail")]
    assert fatal[2]["found"] == "SXid 20034 on nvidia-nvswitch2 x3: Fatal, Link 37 LTSSM Fault Up"
    non_fatal, = hvd_health.check_sxid(hvd_health_gpu.parse_kernel_log(read(DMESG_LINES)))
    assert (non_fatal["item"], non_fatal["severity"]) == ("nvswitch.sxid.0000:85:00.0.12028", "warn")


def test_ib_port_down_is_named_and_other_link_layers_are_left_alone() -> None:
    down, = hvd_health.check_ib_ports(hvd_health_net.parse_ibstat(read(IB_PORT_DOWN)))
    assert (down["item"], down["found"]) == ("ib.port.mlx5_3/1", "Down / Disabled")  # mlx5_1 (Ethernet) not named
    assert hvd_health.check_ib_ports(hvd_health_net.parse_ibstat(read(IB_NDR))) == []
    assert hvd_health.check_ib_ports(hvd_health_net.parse_ibstat(read(IB_NDR_ETH_DOWN))) == []
    assert items(hvd_health.check_ib_ports(hvd_health_net.parse_ibstat(read(IB_NDR_ETH_DOWN)), link_layers=("Ethernet",))) == [
        "ib.port.mlx5_2/1", "ib.port.mlx5_7/1", "ib.port.mlx5_8/1"]
    # a RoCE fabric: two CX-7 ports down; the CX-6 Dx ports at 100 are not slow next to the CX-7s at 400
    assert items(hvd_health.check_ib_ports(hvd_health_net.parse_ibstat(read(IB_ROCE)), link_layers=("Ethernet",))) == [
        "ib.port.mlx5_11/1", "ib.port.mlx5_5/1"]


def test_ib_rate_below_the_expected_one_is_named() -> None:
    hdr = hvd_health_net.parse_ibstat(read(IB_HDR))
    assert hvd_health.check_ib_ports(hdr) == [] and hvd_health.check_ib_ports(hdr, expected_rate=200) == []
    slow = hvd_health.check_ib_ports(hdr, expected_rate=400)  # an NDR plan on this HDR node
    assert items(slow) == [f"ib.rate.mlx5_{n}/1" for n in range(1, 9)]
    assert {(f["found"], f["expected"]) for f in slow} == {("200 Gb/s", "400 Gb/s")}


def test_ibstat_panic_is_a_failure() -> None:
    panic, = hvd_health.check_ib_ports(hvd_health_net.parse_ibstat(read(IB_PANIC)))
    assert panic["item"] == "ib.read" and "mlx5_8" in panic["found"]


def test_socket_transport_beside_an_active_ib_port_is_a_failure() -> None:
    """The socket run and the ibstat come from different machines: the rule needs only the two readings."""
    socket = hvd_bandwidth.parse_nccl_debug(read(AR_SOCKET))
    finding, = hvd_bandwidth.check_nccl_transport(socket, hvd_health_net.parse_ibstat(read(IB_NDR)))
    assert (finding["item"], finding["found"]) == ("nccl.transport", "NCCL used NET/Socket")
    assert "mlx5_0/1" in finding["expected"]
    assert hvd_bandwidth.check_nccl_transport(socket, hvd_health_net.parse_ibstat(read(IB_ROCE))) == []  # no IB port at all
    assert hvd_bandwidth.check_nccl_transport(hvd_bandwidth.parse_nccl_debug(read(NCCL_GDR)),
                                              hvd_health_net.parse_ibstat(read(IB_PORT_DOWN))) == []


def test_gpus_beside_an_active_ib_port_without_nvidia_peermem_is_a_warning() -> None:
    ib = hvd_health_net.parse_ibstat(read(IB_NDR))
    finding, = hvd_health.check_peermem(ib, ["nvidia", "nvidia_uvm"], 8)
    assert (finding["item"], finding["severity"]) == ("gpu.peermem", "warn") and "mlx5_0/1" in finding["found"]
    assert hvd_health.check_peermem(ib, ["nvidia", "nvidia_peermem"], 8) == []
    assert hvd_health.check_peermem(ib, [], 0) == []  # no GPU
    assert hvd_health.check_peermem(hvd_health_net.parse_ibstat(read(IB_ROCE)), [], 8) == []  # Ethernet ports only


def test_fabric_manager_version_must_equal_the_driver() -> None:
    for name, fm, driver in [(FM_SYSTEMCTL, "550.127.05", "550.120"), (FM_JOURNAL, "530.30.02", "530.41.03")]:
        finding, = hvd_health.check_fabricmanager(hvd_health_gpu.parse_fabricmanager_log(read(name)))
        assert finding["found"] == f"Fabric Manager {fm}, driver {driver}" and driver in finding["fix"]
    running = hvd_health_gpu.parse_fabricmanager_log(read(FM_LOG))
    assert hvd_health.check_fabricmanager(running, driver_version="535.161.08") == []
    assert items(hvd_health.check_fabricmanager(running, driver_version="535.183.01")) == ["fabricmanager.version"]


def test_dcgm_diag_failures_are_named_and_skips_are_not() -> None:
    r1, = hvd_health.check_dcgm_diag(hvd_health_gpu.parse_dcgmi_diag(read(DCGM_R1_FAIL)))
    assert r1["item"] == "dcgm.diag.persistence_mode" and "currently disabled" in r1["found"]
    r3, = hvd_health.check_dcgm_diag(hvd_health_gpu.parse_dcgmi_diag(read(DCGM_R3_FAIL)))
    assert r3["item"] == "dcgm.diag.gpu_memory" and r3["found"].startswith("GPU Memory: Fail - All (Warning: GPU 0")
    assert hvd_health.check_dcgm_diag(hvd_health_gpu.parse_dcgmi_diag(read(DCGM_R3_SKIPS))) == []
    assert hvd_health.check_dcgm_diag(hvd_health_gpu.parse_dcgmi_diag_json(read(DCGM_JSON))) == []
