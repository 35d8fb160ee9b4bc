"""plugins/module_utils/hvd_health*.py: the GPU and fabric parsers and the health rules over the project's own
fixtures.

tests/unit/plugins/fixtures/gpu holds GPU and fabric tool outputs we wrote in each tool's documented format (its
README.md says what each one stands for and which format it follows). They prove every parser and rule path in any
checkout and under ansible-test units; test_hvd_health.py asserts the same behaviour again on real recorded outputs
(../shared/fixtures-gpu), an extra layer skipped where that folder is absent. Each test here names its counterpart
there.
"""

from __future__ import annotations

import re

import pytest

from ansible_collections.hvd.cluster.tests.unit.plugins.support import own_gpu_fixture

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_bandwidth, hvd_health, hvd_health_gpu, hvd_health_net


H100_Q = "nvidia-smi-q_h100-sxm-2gpu_550.144.03.txt"
A100_Q = "nvidia-smi-q_a100-sxm4-4gpu_450.80.02_single-double-bit-ecc-layout.txt"
A10_REMAP = "nvidia-smi-q_a10_535.154.05_row-remap-pending.txt"
L4_LINK = "nvidia-smi-q_l4_555.42.06_pcie-gen1-of-4_x8-of-x16.txt"
ECC_DBE = "nvidia-smi-q-d-ECC_h100_550.144.03_dram-uncorrectable.txt"
PAGES_CLEAN = "nvidia-smi-q-d-PAGE_RETIREMENT_v100-4gpu_535.183.06_clean.txt"
PAGES_PENDING = "nvidia-smi-q-d-PAGE_RETIREMENT_v100-4gpu_535.183.06_pending.txt"
A100_XML = "nvidia-smi-q-x_a100-pcie_535.183.06_persistence-off.xml"
NVLINK_A100 = "nvidia-smi-nvlink-s_a100-sxm4-2gpu_12x25GBs.txt"
NVLINK_V100 = "nvidia-smi-nvlink-s-i1_v100-sxm2_links-1-4-inactive.txt"
NVLINK_DEAD = "nvidia-smi-nvlink-s-i2_a100-sxm4_all-links-inactive.txt"
DMESG_LINES = "dmesg_xid-94-64_sxid-12028-nonfatal_mlx5-pcie-x8.log"
DMESG_119 = "dmesg-T_xid-119-gsp-rpc-timeout.log"
DMESG_DBE = "journalctl-k_xid-48-63-94_dbe-row-remap-contained.log"
DMESG_79 = "journalctl-k_xid-79-fallen-off-bus_sxid-20034-fatal.log"
IB_NDR = "ibstat_cx7-ndr400-2ib-active_eth-bond-up_2eth-down.txt"
IB_ROCE = "ibstat_cx7-roce400_2-ports-down_cx6dx-100.txt"
IB_HDR = "ibstat_cx6-hdr200-4ib-active.txt"
IB_PANIC = "ibstat_cx6-hdr200_ibpanic-exit255.txt"
IB_PORT_DOWN = "ibstat_cx6-hdr200_ib-port-polling_ib-port-at-100.txt"
AR_SOCKET = "all_reduce_perf_2node-1gpu_mpirun-tagged_nccl-socket-fallback.txt"
NCCL_GDR = "nccl-debug-info_2node-1gpu_net-ib-gdrdma.log"
DCGM_R1_FAIL = "dcgmi-diag-r1_h100-2gpu_FAIL-persistence-mode_dcgm3.3.9.txt"
DCGM_R3_FAIL = "dcgmi-diag-r3_h100-2gpu_FAIL-gpu-memory-cuinit-not-initialized_dcgm3.3.9.txt"
DCGM_R3_SKIPS = "dcgmi-diag-r3_blackwell-2gpu_pass-with-skips_printed-twice_dcgm3.3.9.txt"
DCGM_JSON = "dcgmi-diag-r1-j_h100-2gpu_pass_dcgm3.3.9_via-srun.json"
FM_SYSTEMCTL = "systemctl-status_nvidia-fabricmanager_FAIL-version-mismatch_550.90.07-vs-550.144.03.txt"
FM_JOURNAL = "journal-line_nv-fabricmanager_version-mismatch_535.104.05-vs-535.161.08.txt"
FM_NO_SWITCH = "journalctl-u_nvidia-fabricmanager_FAIL-nothing-to-do_no-nvswitch.txt"
FM_LOG = "fabricmanager.log_550.144.03_running_nvswitch-nonfatal-error.txt"


def read(name: str) -> str:
    return own_gpu_fixture(name).read_text(encoding="utf-8")


def smi(name: str) -> dict:
    return hvd_health_gpu.parse_nvidia_smi_q(read(name))


def items(findings: list[dict]) -> list[str]:
    return [finding["item"] for finding in findings]


def test_every_own_fixture_is_described_in_the_folders_readme() -> None:
    """README.md names each file, what it stands for and the documented format it follows; no entry without a file."""
    folder = own_gpu_fixture(H100_Q).parent
    described = set(re.findall(r"^\| `([^`]+)` \|", (folder / "README.md").read_text(encoding="utf-8"), re.M))
    assert described == {path.name for path in folder.iterdir() if path.name != "README.md"}


# ------------------------------------------------------------------------------------------ parsers


def test_smi_q_reads_every_h100_with_its_bus_id_and_a_full_gen5_x16_link() -> None:
    """test_health.py's counterpart: the SRAM/DRAM ECC layout of R550, bus ids in upper case folded to lower."""
    parsed = smi(H100_Q)
    assert (parsed["driver_version"], parsed["cuda_version"], parsed["attached_gpus"]) == ("550.144.03", "12.4", 2)
    assert [gpu["bus_id"] for gpu in parsed["gpus"]] == ["0000:18:00.0", "0000:2a:00.0"]
    for gpu in parsed["gpus"]:
        assert gpu["name"] == "NVIDIA H100 80GB HBM3" and gpu["persistence_mode"] is True
        assert gpu["pcie"] == {"gen_current": 5, "gen_max": 5, "width_current": 16, "width_max": 16}
        assert gpu["ecc_mode"] == "Enabled" and gpu["ecc_uncorrectable"] == {"volatile": 0, "aggregate": 0}
        assert gpu["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
        assert gpu["retired_pages"] == {"single_bit": None, "double_bit": None, "pending": None}  # N/A on Hopper


def test_smi_q_reads_other_drivers_and_gpu_counts() -> None:
    """The R450 layout: ECC counted as Single Bit / Double Bit sections with a Total each; "Max", not "Host Max"."""
    a100 = smi(A100_Q)
    assert (a100["driver_version"], a100["attached_gpus"]) == ("450.80.02", 4)
    assert [gpu["bus_id"] for gpu in a100["gpus"]] == ["0000:07:00.0", "0000:0f:00.0", "0000:47:00.0", "0000:4e:00.0"]
    assert {gpu["name"] for gpu in a100["gpus"]} == {"A100-SXM4-40GB"}
    assert all(gpu["ecc_uncorrectable"] == {"volatile": 0, "aggregate": 0} for gpu in a100["gpus"])
    assert smi(L4_LINK)["gpus"][0]["pcie"]["gen_max"] == 4  # "Max 4" is taken, not the host's "Host Max 5"


def test_smi_q_reads_the_a10s_pending_row_remap_of_two_uncorrectable_rows() -> None:
    gpu, = smi(A10_REMAP)["gpus"]
    assert gpu["bus_id"] == "0000:af:00.0" and gpu["name"] == "NVIDIA A10"
    assert gpu["remapped_rows"] == {"correctable": 1, "uncorrectable": 2, "pending": True, "failure": False}
    assert gpu["ecc_uncorrectable"] == {"volatile": 0, "aggregate": 0}


def test_smi_q_reads_the_l4_link_trained_at_gen1_x8_of_gen4_x16() -> None:
    gpu, = smi(L4_LINK)["gpus"]
    assert gpu["pcie"] == {"gen_current": 1, "gen_max": 4, "width_current": 8, "width_max": 16}


def test_smi_q_ecc_section_sums_the_uncorrectable_counters() -> None:
    """``-q -d ECC``: only the ECC sections; the correctable DRAM count is not summed."""
    gpu, = smi(ECC_DBE)["gpus"]
    assert gpu["bus_id"] == "0000:2a:00.0" and gpu["ecc_uncorrectable"] == {"volatile": 3, "aggregate": 3}
    assert gpu["name"] is None and gpu["pcie"]["width_max"] is None  # sections the output does not have


def test_smi_q_page_retirement_section_reads_counts_and_pending_per_gpu() -> None:
    pending = [(gpu["bus_id"], gpu["retired_pages"]["single_bit"], gpu["retired_pages"]["double_bit"],
                gpu["retired_pages"]["pending"]) for gpu in smi(PAGES_PENDING)["gpus"]]
    assert pending == [("0000:06:00.0", 1, 0, False), ("0000:07:00.0", 0, 2, True), ("0000:0a:00.0", 0, 0, False),
                       ("0000:0b:00.0", 3, 1, True)]
    clean = smi(PAGES_CLEAN)["gpus"]
    assert len(clean) == 4
    assert all(gpu["retired_pages"] == {"single_bit": 0, "double_bit": 0, "pending": False} for gpu in clean)


def test_smi_q_xml_reads_the_same_fields() -> None:
    parsed = hvd_health_gpu.parse_nvidia_smi_q_xml(read(A100_XML))
    assert (parsed["driver_version"], parsed["cuda_version"], parsed["attached_gpus"]) == ("535.183.06", "12.2", 1)
    gpu, = parsed["gpus"]
    assert (gpu["bus_id"], gpu["name"], gpu["persistence_mode"]) == ("0000:41:00.0", "NVIDIA A100-PCIE-40GB", False)
    assert gpu["ecc_mode"] == "Enabled"
    assert gpu["pcie"] == {"gen_current": 4, "gen_max": 4, "width_current": 16, "width_max": 16}
    assert gpu["ecc_uncorrectable"] == {"volatile": 0, "aggregate": 0}
    assert gpu["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    assert gpu["retired_pages"] == {"single_bit": None, "double_bit": None, "pending": None}  # N/A on Ampere


def test_nvlink_status_reads_links_speeds_and_inactive_ones() -> None:
    a100 = hvd_health_gpu.parse_nvlink_status(read(NVLINK_A100))
    assert [gpu["index"] for gpu in a100] == [0, 1]
    assert all(len(gpu["links"]) == 12 and all(link["speed_gbs"] == 25.0 for link in gpu["links"]) for gpu in a100)
    assert a100[1]["uuid"] == "GPU-7e91c2d4-0b5a-4f13-8c6e-2a4f9d01b83d"
    v100, = hvd_health_gpu.parse_nvlink_status(read(NVLINK_V100))
    assert (v100["index"], v100["name"]) == (1, "Tesla V100-SXM2-16GB")
    assert [link["link"] for link in v100["links"] if not link["active"]] == [1, 4]
    assert {link["speed_gbs"] for link in v100["links"] if link["active"]} == {25.781}
    dead, = hvd_health_gpu.parse_nvlink_status(read(NVLINK_DEAD))
    assert (dead["index"], dead["all_inactive"], dead["links"]) == (2, True, [])


@pytest.mark.parametrize("name, xids, sxids", [
    (DMESG_LINES, [("0000:3b:00.0", 94), ("0000:3b:00.0", 64)], [("0000:86:00.0", 12028, "Non-fatal")]),
    (DMESG_119, [("0000:5d:00.0", 119)] * 3, []),  # the _kgspLogXid119 banner is no Xid line
    (DMESG_DBE, [("0000:c3:00.0", 48), ("0000:c3:00.0", 63)] + [("0000:c3:00.0", 94)] * 3, []),
    (DMESG_79, [("0000:ba:00.0", 79)],
     [("0000:05:00.0", 20034, "Fatal"), ("0000:05:00.0", 20034, None), ("0000:06:00.0", 20034, "Fatal"),
      ("0000:06:00.0", 20034, None)]),
])
def test_kernel_log_finds_every_xid_and_sxid_with_its_bus(name: str, xids: list, sxids: list) -> None:
    """dmesg, dmesg -T and journalctl -k lines alike."""
    log = hvd_health_gpu.parse_kernel_log(read(name))
    assert [(event["bus_id"], event["code"]) for event in log["xid"]] == xids
    assert [(event["bus_id"], event["code"], event["severity"]) for event in log["sxid"]] == sxids


def test_kernel_log_keeps_pid_process_and_message() -> None:
    first, remap = hvd_health_gpu.parse_kernel_log(read(DMESG_LINES))["xid"]
    assert (first["pid"], first["process"], first["message"]) == ("88123", "python", "Ch 00000010")
    assert remap["pid"] == "<unknown>" and remap["message"] == "Row Remapper Error: no spare row left in the bank"
    # the form NVIDIA's memory error guide shows, without name=: the whole rest is the message
    last = hvd_health_gpu.parse_kernel_log(read(DMESG_DBE))["xid"][-1]
    assert (last["pid"], last["process"]) == (None, None)
    assert last["message"] == "pid=53115, Contained: CE User Channel (0x9). RST: No, D-RST: No"


def test_ibstat_reads_every_port_and_its_link_layer() -> None:
    ndr = hvd_health_net.parse_ibstat(read(IB_NDR))
    ib = [port for port in ndr["ports"] if port["link_layer"] == "InfiniBand"]
    assert [port["ca"] for port in ib] == ["mlx5_0", "mlx5_1"]
    assert all((p["port"], p["state"], p["physical_state"], p["rate_gbps"], p["ca_type"]) ==
               (1, "Active", "LinkUp", 400.0, "MT4129") for p in ib)
    assert [(p["ca"], p["link_layer"], p["state"], p["rate_gbps"]) for p in ndr["ports"] if p not in ib] == [
        ("mlx5_2", "Ethernet", "Down", 40.0), ("mlx5_3", "Ethernet", "Down", 40.0),
        ("mlx5_bond_0", "Ethernet", "Active", 200.0)]
    assert ndr["errors"] == []


def test_ibstat_keeps_the_ports_before_an_ibpanic_and_the_panic() -> None:
    panic = hvd_health_net.parse_ibstat(read(IB_PANIC))
    assert len(panic["ports"]) == 2 and {p["rate_gbps"] for p in panic["ports"]} == {200.0}
    assert panic["errors"] == ["ibpanic: [23817] main: stat of IB device 'mlx5_2' failed: No such file or directory"]


def test_dcgmi_diag_table_reads_results_metadata_and_wrapped_messages() -> None:
    r1 = hvd_health_gpu.parse_dcgmi_diag(read(DCGM_R1_FAIL))
    assert (r1["passed"], r1["failed"]) == (False, ["Persistence Mode"])
    assert r1["metadata"] == {"DCGM Version": "3.3.9", "Driver Version Detected": "550.144.03",
                              "GPU Device IDs Detected": "2330,2330"}
    persistence = next(test for test in r1["tests"] if test["name"] == "Persistence Mode")
    assert persistence["category"] == "Deployment" and persistence["details"] == [
        "Error: Persistence mode for GPU 1 is disabled. Enable persistence mode by running "
        "\"nvidia-smi -i <gpuId> -pm 1 \" as root."]  # three wrapped lines, joined where dcgmi cut the words
    assert len(r1["tests"]) == 9
    r3 = hvd_health_gpu.parse_dcgmi_diag(read(DCGM_R3_FAIL))
    assert r3["failed"] == ["GPU Memory"]
    memory = next(test for test in r3["tests"] if test["name"] == "GPU Memory")
    assert memory["category"] == "Hardware" and len(memory["details"]) == 2
    assert memory["details"][1].startswith(
        "Warning: GPU 1 Unable to initialize CUDA library: 'system not yet initialized'. Check that a CUDA program")
    skips = hvd_health_gpu.parse_dcgmi_diag(read(DCGM_R3_SKIPS))
    assert skips["passed"] is True and len(skips["tests"]) == 14  # the table printed twice counts once
    assert {test["result"] for test in skips["tests"]} == {"Pass", "Skip - All"}
    assert skips["metadata"]["GPU Device IDs Detected"] == "2bb5,2bb5"


def test_dcgmi_diag_json_skips_leading_lines_and_nulls() -> None:
    diag = hvd_health_gpu.parse_dcgmi_diag_json(read(DCGM_JSON))
    assert diag["passed"] is True and diag["metadata"] == {"DCGM Version": "3.3.9"}
    assert len(diag["tests"]) == 11 and diag["tests"][-1]["name"] == "GPU Memory"
    assert {test["result"] for test in diag["tests"]} == {"Pass"}  # a Skip next to a Pass: the Pass counts
    assert diag["tests"][-1]["details"] == ["warnings: GPU 0 reported 12 correctable DRAM errors before the test"]
    assert diag["tests"][-2]["details"] == ["info: GPU 0 GPU to Host bandwidth:\t\t25.41 GB/s"]


@pytest.mark.parametrize("name, fm, driver, mismatch, failed", [
    (FM_SYSTEMCTL, "550.90.07", "550.144.03", True, True),
    (FM_JOURNAL, "535.104.05", "535.161.08", True, False),
    (FM_NO_SWITCH, None, None, False, True),
    (FM_LOG, "550.144.03", None, False, False),
])
def test_fabricmanager_log_reads_versions_and_failure(name: str, fm: str, driver: str, mismatch: bool,
                                                      failed: bool) -> None:
    parsed = hvd_health_gpu.parse_fabricmanager_log(read(name))
    assert (parsed["fm_version"], parsed["driver_version"], parsed["mismatch"], parsed["failed"]) == (
        fm, driver, mismatch, failed)


def test_fabricmanager_log_keeps_its_error_lines() -> None:
    assert [line.split("] ")[-1] for line in hvd_health_gpu.parse_fabricmanager_log(read(FM_LOG))["errors"]] == [
        "detected NVSwitch non-fatal error 12028 on fid 0 on NVSwitch pci bus id 00000000:86:00.0 physical id 1 port 8"]
    no_switch = hvd_health_gpu.parse_fabricmanager_log(read(FM_NO_SWITCH))["errors"]
    assert len(no_switch) == 1 and "[NV_WARN_NOTHING_TO_DO]" in no_switch[0]


# ------------------------------------------------------------------------------------------ rules


def test_every_finding_names_item_found_expected_fix_and_source() -> None:
    found = hvd_health.check_pcie(smi(L4_LINK), under_load=True) + hvd_health.check_xid(hvd_health_gpu.parse_kernel_log(read(DMESG_79)))
    assert found
    for finding in found:
        assert set(finding) == {"item", "severity", "found", "expected", "fix", "source"}
        assert all(finding.values()) and finding["severity"] in ("fail", "warn")


def test_gpu_count_below_expected_is_named() -> None:
    assert hvd_health.check_gpu_count(smi(H100_Q), 2) == []
    short, = hvd_health.check_gpu_count(smi(A100_Q), 8)
    assert (short["item"], short["severity"], short["found"], short["expected"]) == (
        "gpu.count", "fail", "4 GPUs", "8 GPUs")


def test_uncorrectable_ecc_count_is_a_failure() -> None:
    assert hvd_health.check_ecc(smi(H100_Q)) == [] and hvd_health.check_ecc(smi(A10_REMAP)) == []
    assert hvd_health.check_ecc(smi(A100_Q)) == []  # the R450 layout's Double Bit totals: 0
    finding, = hvd_health.check_ecc(smi(ECC_DBE))
    assert (finding["item"], finding["severity"]) == ("gpu.ecc.0000:2a:00.0", "fail")
    assert finding["found"] == "uncorrectable ECC errors: volatile 3, aggregate 3"


def test_pending_page_retirement_is_named_per_gpu() -> None:
    assert hvd_health.check_retired_pages(smi(PAGES_CLEAN)) == []
    pending = hvd_health.check_retired_pages(smi(PAGES_PENDING))
    assert items(pending) == ["gpu.retired_pages.0000:07:00.0", "gpu.retired_pages.0000:0b:00.0"]
    assert pending[1]["found"] == "pages pending retirement (3 single, 1 double bit retired)"
    assert {finding["severity"] for finding in pending} == {"fail"}


def test_row_remap_pending_and_failure_are_failures() -> None:
    pending, = hvd_health.check_row_remap(smi(A10_REMAP))
    assert (pending["item"], pending["severity"], pending["found"]) == (
        "gpu.row_remap.0000:af:00.0", "fail", "row remap pending (2 rows for uncorrectable errors)")
    assert hvd_health.check_row_remap(smi(H100_Q)) == []
    failed = smi(A10_REMAP)  # no fixture shows a failed remap: the A10's flag is raised
    failed["gpus"][0]["remapped_rows"]["failure"] = True
    finding, = hvd_health.check_row_remap(failed)
    assert finding["found"] == "row remapping failure occurred" and "RMA" in finding["fix"]


def test_pcie_width_is_always_judged_and_gen_only_under_load() -> None:
    idle = hvd_health.check_pcie(smi(L4_LINK))
    assert [(f["item"], f["severity"], f["found"], f["expected"]) for f in idle] == [
        ("gpu.pcie_width.0000:c1:00.0", "fail", "PCIe x8", "x16")]
    under_load = hvd_health.check_pcie(smi(L4_LINK), under_load=True)
    assert items(under_load) == ["gpu.pcie_width.0000:c1:00.0", "gpu.pcie_gen.0000:c1:00.0"]
    assert (under_load[1]["found"], under_load[1]["expected"]) == ("PCIe Gen1 under load", "Gen4")
    assert hvd_health.check_pcie(smi(H100_Q), under_load=True) == []


def test_persistence_mode_off_is_a_warning() -> None:
    off, = hvd_health.check_persistence(hvd_health_gpu.parse_nvidia_smi_q_xml(read(A100_XML)))
    assert (off["item"], off["severity"]) == ("gpu.persistence.0000:41:00.0", "warn")
    assert hvd_health.check_persistence(smi(H100_Q)) == []


def test_inactive_nvlink_links_are_named() -> None:
    assert hvd_health.check_nvlink(hvd_health_gpu.parse_nvlink_status(read(NVLINK_A100))) == []
    v100, = hvd_health.check_nvlink(hvd_health_gpu.parse_nvlink_status(read(NVLINK_V100)))
    assert (v100["item"], v100["severity"], v100["found"]) == (
        "gpu.nvlink.1", "fail", "GPU 1 (Tesla V100-SXM2-16GB): inactive links 1, 4")
    dead, = hvd_health.check_nvlink(hvd_health_gpu.parse_nvlink_status(read(NVLINK_DEAD)))
    assert dead["item"] == "gpu.nvlink.2" and dead["found"] == "GPU 2 (NVIDIA A100-SXM4-80GB): all links inactive"


@pytest.mark.parametrize("name, judged", [
    (DMESG_LINES, [("gpu.xid.0000:3b:00.0.64", "fail"), ("gpu.xid.0000:3b:00.0.94", "warn")]),
    (DMESG_119, [("gpu.xid.0000:5d:00.0.119", "fail")]),
    (DMESG_DBE, [("gpu.xid.0000:c3:00.0.48", "fail"), ("gpu.xid.0000:c3:00.0.63", "warn"),
                 ("gpu.xid.0000:c3:00.0.94", "warn")]),
    (DMESG_79, [("gpu.xid.0000:ba:00.0.79", "fail")]),
])
def test_xid_events_are_judged_by_their_meaning(name: str, judged: list) -> None:
    found = hvd_health.check_xid(hvd_health_gpu.parse_kernel_log(read(name)))
    assert [(f["item"], f["severity"]) for f in found] == judged
    assert all(f["source"] == hvd_health.SOURCES["xid_catalog"] for f in found)


def test_xid_counts_repeats_and_a_clean_log_has_none() -> None:
    contained = hvd_health.check_xid(hvd_health_gpu.parse_kernel_log(read(DMESG_DBE)))[2]
    assert contained["found"].startswith("Xid 94 x3 (Contained ECC error")
    gsp, = hvd_health.check_xid(hvd_health_gpu.parse_kernel_log(read(DMESG_119)))
    assert gsp["found"].startswith("Xid 119 x3 (GSP RPC Timeout")
    assert hvd_health.check_xid(hvd_health_gpu.parse_kernel_log(read(FM_LOG))) == []  # an FM log: no kernel lines


def test_an_xid_outside_the_table_is_a_warning_to_look_up() -> None:
    """No fixture logs one: the 79 of the fixture's line becomes 149, a code XID_MEANING does not hold."""
    line = next(line for line in read(DMESG_79).splitlines() if "NVRM: Xid" in line).replace("): 79,", "): 149,")
    unknown, = hvd_health.check_xid(hvd_health_gpu.parse_kernel_log(line))
    assert (unknown["item"], unknown["severity"]) == ("gpu.xid.0000:ba:00.0.149", "warn")
    assert unknown["found"].startswith("Xid 149 x1 (unknown Xid") and "Xid catalog" in unknown["fix"]


def test_sxid_fatal_fails_and_non_fatal_warns() -> None:
    fatal = hvd_health.check_sxid(hvd_health_gpu.parse_kernel_log(read(DMESG_79)))
    assert [(f["item"], f["severity"]) for f in fatal] == [
        ("nvswitch.sxid.0000:05:00.0.20034", "fail"), ("nvswitch.sxid.0000:06:00.0.20034", "fail")]
    assert fatal[1]["found"] == "SXid 20034 on nvidia-nvswitch1 x2: Fatal, Link 30 LTSSM Fault Up"
    non_fatal, = hvd_health.check_sxid(hvd_health_gpu.parse_kernel_log(read(DMESG_LINES)))
    assert (non_fatal["item"], non_fatal["severity"]) == ("nvswitch.sxid.0000:86:00.0.12028", "warn")
    assert non_fatal["found"] == ("SXid 12028 on nvidia-nvswitch1 x1: Non-fatal, Link 08 egress non-posted PRIV error "
                                  "(First)")


def test_ib_port_down_is_named_and_other_link_layers_are_left_alone() -> None:
    down = hvd_health.check_ib_ports(hvd_health_net.parse_ibstat(read(IB_PORT_DOWN)))
    # mlx5_1 (Ethernet, down) is not named; mlx5_3 trained at 100 beside its sibling at 200
    assert [(f["item"], f["severity"], f["found"], f["expected"]) for f in down] == [
        ("ib.port.mlx5_2/1", "fail", "Down / Polling", "Active / LinkUp"),
        ("ib.rate.mlx5_3/1", "fail", "100 Gb/s", "200 Gb/s")]
    assert hvd_health.check_ib_ports(hvd_health_net.parse_ibstat(read(IB_NDR))) == []
    assert items(hvd_health.check_ib_ports(hvd_health_net.parse_ibstat(read(IB_NDR)), link_layers=("Ethernet",))) == [
        "ib.port.mlx5_2/1", "ib.port.mlx5_3/1"]
    # a RoCE fabric: two CX-7 ports down; the CX-6 Dx ports at 100 are not slow next to the CX-7s at 400
    assert items(hvd_health.check_ib_ports(hvd_health_net.parse_ibstat(read(IB_ROCE)), link_layers=("Ethernet",))) == [
        "ib.port.mlx5_1/1", "ib.port.mlx5_3/1"]


def test_ib_rate_below_the_expected_one_is_named() -> None:
    hdr = hvd_health_net.parse_ibstat(read(IB_HDR))
    assert hvd_health.check_ib_ports(hdr) == [] and hvd_health.check_ib_ports(hdr, expected_rate=200) == []
    slow = hvd_health.check_ib_ports(hdr, expected_rate=400)  # an NDR plan on this HDR node
    assert items(slow) == [f"ib.rate.mlx5_{n}/1" for n in range(4)]
    assert {(f["severity"], f["found"], f["expected"]) for f in slow} == {("fail", "200 Gb/s", "400 Gb/s")}


def test_ibstat_panic_is_a_failure() -> None:
    panic, = hvd_health.check_ib_ports(hvd_health_net.parse_ibstat(read(IB_PANIC)))
    assert (panic["item"], panic["severity"]) == ("ib.read", "fail") and "mlx5_2" in panic["found"]


def test_socket_transport_beside_an_active_ib_port_is_a_failure() -> None:
    """The socket run and the ibstat stand for different machines: the rule needs only the two readings."""
    socket = hvd_bandwidth.parse_nccl_debug(read(AR_SOCKET))
    finding, = hvd_bandwidth.check_nccl_transport(socket, hvd_health_net.parse_ibstat(read(IB_NDR)))
    assert (finding["item"], finding["severity"], finding["found"]) == (
        "nccl.transport", "fail", "NCCL used NET/Socket")
    assert finding["expected"] == "NET/IB over the Active ports (mlx5_0/1, mlx5_1/1)"
    assert hvd_bandwidth.check_nccl_transport(socket, hvd_health_net.parse_ibstat(read(IB_ROCE))) == []  # no IB port at all
    assert hvd_bandwidth.check_nccl_transport(hvd_bandwidth.parse_nccl_debug(read(NCCL_GDR)),
                                              hvd_health_net.parse_ibstat(read(IB_PORT_DOWN))) == []


def test_gpus_beside_an_active_ib_port_without_nvidia_peermem_is_a_warning() -> None:
    ib = hvd_health_net.parse_ibstat(read(IB_NDR))
    finding, = hvd_health.check_peermem(ib, ["nvidia", "nvidia_uvm"], 2)
    assert (finding["item"], finding["severity"]) == ("gpu.peermem", "warn")
    assert finding["found"] == "nvidia_peermem not loaded (2 GPUs, Active ports mlx5_0/1, mlx5_1/1)"
    assert hvd_health.check_peermem(ib, ["nvidia", "nvidia_peermem"], 2) == []
    assert hvd_health.check_peermem(ib, [], 0) == []  # no GPU
    assert hvd_health.check_peermem(hvd_health_net.parse_ibstat(read(IB_ROCE)), [], 8) == []  # Ethernet ports only


def test_fabric_manager_version_must_equal_the_driver() -> None:
    for name, fm, driver in [(FM_SYSTEMCTL, "550.90.07", "550.144.03"), (FM_JOURNAL, "535.104.05", "535.161.08")]:
        finding, = hvd_health.check_fabricmanager(hvd_health_gpu.parse_fabricmanager_log(read(name)))
        assert (finding["item"], finding["severity"]) == ("fabricmanager.version", "fail")
        assert finding["found"] == f"Fabric Manager {fm}, driver {driver}" and driver in finding["fix"]
    running = hvd_health_gpu.parse_fabricmanager_log(read(FM_LOG))
    assert hvd_health.check_fabricmanager(running, driver_version=smi(H100_Q)["driver_version"]) == []
    assert items(hvd_health.check_fabricmanager(running, driver_version="550.127.05")) == ["fabricmanager.version"]
    assert hvd_health.check_fabricmanager(hvd_health_gpu.parse_fabricmanager_log(read(FM_NO_SWITCH))) == []  # no version known


def test_dcgm_diag_failures_are_named_and_skips_are_not() -> None:
    r1, = hvd_health.check_dcgm_diag(hvd_health_gpu.parse_dcgmi_diag(read(DCGM_R1_FAIL)))
    assert (r1["item"], r1["severity"]) == ("dcgm.diag.persistence_mode", "fail")
    assert r1["found"].startswith("Persistence Mode: Fail (Error: Persistence mode for GPU 1 is disabled.")
    r3, = hvd_health.check_dcgm_diag(hvd_health_gpu.parse_dcgmi_diag(read(DCGM_R3_FAIL)))
    assert r3["item"] == "dcgm.diag.gpu_memory" and r3["found"].startswith("GPU Memory: Fail - All (Warning: GPU 0")
    assert hvd_health.check_dcgm_diag(hvd_health_gpu.parse_dcgmi_diag(read(DCGM_R3_SKIPS))) == []
    assert hvd_health.check_dcgm_diag(hvd_health_gpu.parse_dcgmi_diag_json(read(DCGM_JSON))) == []
