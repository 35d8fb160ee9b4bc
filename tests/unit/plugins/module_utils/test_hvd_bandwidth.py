"""plugins/module_utils/hvd_bandwidth.py: nccl-tests' all_reduce_perf output, NCCL's debug lines and the all_reduce
bandwidth floor over recorded tool output.

No GPU, NVSwitch or InfiniBand adapter is reachable here, so the GPU and fabric outputs are recorded ones: real
captures from public repositories and issues, read in place from ../shared/fixtures-gpu next to the checkout (its
SOURCES.md names where each came from; they are never copied into this repository). Every value asserted below was
read from those files by hand. Where no recording shows a failure (an uncorrectable ECC counter, a failed row
remap), the test raises that one field of a recorded clean reading and says so.

These real recordings are an extra layer: test_hvd_bandwidth_own.py proves every parser and rule path on the
project's own fixtures (tests/unit/plugins/fixtures/gpu), and where ../shared/fixtures-gpu is absent (a plain clone,
the copy ansible-test units runs in) the tests here that read it are skipped, with the reason
(tests/unit/plugins/support.py gpu_fixture).
"""

from __future__ import annotations

import pytest

from ansible_collections.hvd.cluster.tests.unit.plugins.support import gpu_fixture

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_bandwidth, hvd_health, hvd_health_gpu, hvd_health_net


NVLINK_A100 = "nvidia-smi-nvlink-s_a100-sxm4-80gb-8gpu_12x25GBs.txt"
NVLINK_V100 = "nvidia-smi-nvlink-s_v100-sxm2-32gb_2-links-inactive_excerpt.txt"
NVLINK_DEAD = "nvidia-smi-nvlink-s-i6_a100-sxm4-80gb_all-links-inactive.txt"
DMESG_LINES = "dmesg_lines_xid-64-row-remap-exhausted_xid-94_sxid-12028_mlx5-pcie-x8-limited.log"
IB_NDR = "ibstat_h100-cx7-ndr400-ib-all-active.txt"
AR_H100 = "all_reduce_perf_1node-8gpu-h100-nvswitch_nccl2.29.2.txt"
AR_A100 = "all_reduce_perf_1node-8gpu-a100-sxm4-40gb_nvlink.txt"
AR_H200 = "all_reduce_perf_1node-8gpu-h200_azure-ndv5_8G-only.txt"
AR_10NODE = "all_reduce_perf_10node-80gpu-h100_nccl2.29.2.txt"
AR_2NODE = "all_reduce_perf_2node-1gpu-each-h100_nccl2.29.2.txt"
AR_SOCKET = "all_reduce_perf_2node-socket-fallback_eks-efa-disabled.txt"
AR_FAIL = "all_reduce_perf_1node-8gpu-h100_FAIL-system-not-yet-initialized.txt"
NCCL_GDR = "nccl-debug-info_2node-a100-pcie_net-ib-gdrdma_gather_perf.log"
NCCL_IB_ERR = "nccl-debug-info_2node-azure_net-ib-detected_FAIL-ib-completion-error12.log"


def read(name: str) -> str:
    return gpu_fixture(name).read_text(encoding="utf-8")


def smi(name: str) -> dict:
    return hvd_health_gpu.parse_nvidia_smi_q(read(name))


def items(findings: list[dict]) -> list[str]:
    return [finding["item"] for finding in findings]


@pytest.mark.parametrize("name, avg, rows, ranks, hosts", [
    (AR_H100, 437.957, 10, 8, {"cnode3-002"}),
    (AR_A100, 68.4048, 34, 8, {"localhost"}),
    (AR_H200, 476.967, 1, 8, {"test-h200-deb"}),
    (AR_10NODE, 265.631, 10, 80, {f"cnode3-{n:03d}" for n in range(2, 12)}),
    (AR_2NODE, 43.6076, 5, 2, {"cnode3-002", "cnode3-003"}),
    (AR_SOCKET, 0.733914, 31, 0, set()),  # the mpirun-tagged excerpt lost its header
])
def test_all_reduce_perf_reads_average_rows_and_ranks(name: str, avg: float, rows: int, ranks: int,
                                                      hosts: set) -> None:
    result = hvd_bandwidth.parse_nccl_perf(read(name))
    assert result["avg_busbw"] == avg and len(result["rows"]) == rows and len(result["ranks"]) == ranks
    assert {rank["host"] for rank in result["ranks"]} == hosts
    assert result["out_of_bounds_ok"] is True and result["errors"] == []


def test_all_reduce_perf_rows_in_both_column_layouts() -> None:
    new = hvd_bandwidth.parse_nccl_perf(read(AR_H100))["rows"][-1]
    assert new == {"size": 17179869184, "count": 2147483648, "type": "double", "redop": "sum", "algbw_out": 275.58,
                   "busbw_out": 482.27, "algbw_in": 275.50, "busbw_in": 482.12, "wrong": 0}
    old = hvd_bandwidth.parse_nccl_perf(read(AR_A100))["rows"][-1]  # no root column, "error" N/A
    assert (old["size"], old["busbw_out"], old["busbw_in"], old["wrong"]) == (8589934592, 235.26, 235.03, 0)


def test_all_reduce_perf_failed_run_has_its_errors_and_no_result() -> None:
    result = hvd_bandwidth.parse_nccl_perf(read(AR_FAIL))
    assert result["errors"] == ["test: Test CUDA failure common.cu:941 'system not yet initialized'",
                                ".. test pid 54340: Test failure common.cu:891"]
    assert (result["rows"], result["avg_busbw"]) == ([], None)


def test_measured_bus_bandwidth_takes_large_sizes_not_the_average() -> None:
    assert hvd_bandwidth.measured_bus_bandwidth(hvd_bandwidth.parse_nccl_perf(read(AR_A100))) == {
        "busbw": 235.26, "size": 8589934592}
    assert hvd_bandwidth.measured_bus_bandwidth(hvd_bandwidth.parse_nccl_perf(read(AR_10NODE))) == {
        "busbw": 364.07, "size": 2147483648}
    # nothing reached 1 GiB: the largest size counts
    assert hvd_bandwidth.measured_bus_bandwidth(hvd_bandwidth.parse_nccl_perf(read(AR_2NODE))) == {
        "busbw": 46.46, "size": 536870912}


def test_nccl_debug_names_network_transport_and_ib_devices() -> None:
    gdr = hvd_bandwidth.parse_nccl_debug(read(NCCL_GDR))
    assert (gdr["version"], gdr["network"], gdr["ib_detected"], gdr["gdrdma"]) == ("2.16.5+cuda11.8", "IB", True, True)
    assert gdr["ib_devices"] == ["mlx5_0:1/RoCE", "mlx5_2:1/IB"] and gdr["transports"] == ["NET/IB"]
    socket = hvd_bandwidth.parse_nccl_debug(read(AR_SOCKET))
    assert (socket["network"], socket["transports"], socket["ib_detected"]) == ("Socket", ["NET/Socket"], False)
    failed = hvd_bandwidth.parse_nccl_debug(read(NCCL_IB_ERR))
    assert failed["ib_devices"] == ["ibP111p0s0:1/IB", "rdmaP1111p0s2:1/RoCE"] and failed["network"] is None
    assert len(failed["warnings"]) == 1 and "with error 12" in failed["warnings"][0]


# ------------------------------------------------------------------------------------------ bandwidth floor


def test_every_threshold_row_has_a_value_and_a_source() -> None:
    ids = [row["id"] for row in hvd_health.THRESHOLDS]
    assert len(ids) == len(set(ids))
    for row in hvd_health.THRESHOLDS:
        assert row["value"] > 0 and row["unit"] and row["source"]
    # the Gen5 lane rate the kernel prints in the mlx5 line of DMESG_LINES: 504.112 Gb/s for x16
    assert hvd_health.threshold("pcie.5.lane_gbs")["value"] * 16 * 8 == pytest.approx(504.112, abs=0.01)


def test_floor_is_the_slowest_kind_times_its_efficiency() -> None:
    floor = hvd_bandwidth.bus_bandwidth_floor([{"kind": "nvlink", "generation": 4, "count": 18},
                                               {"kind": "net", "rate_gbps": 400, "count": 8}])
    assert (floor["floor_gbs"], floor["bottleneck"]) == (315.0, "nvlink")  # 450 x 0.7 below 400 x 0.8
    assert {term["kind"]: term["line_gbs"] for term in floor["terms"]} == {"nvlink": 450.0, "net": 400.0}
    pcie = hvd_bandwidth.bus_bandwidth_floor([{"kind": "pcie", "generation": 4, "width": 16}])
    assert pcie["floor_gbs"] == pytest.approx(16 * 16 * 128 / 130 / 8 * 0.3, abs=0.01)
    with pytest.raises(ValueError):
        hvd_bandwidth.bus_bandwidth_floor([])
    with pytest.raises(KeyError):
        hvd_bandwidth.bus_bandwidth_floor([{"kind": "nvlink", "generation": 9, "count": 18}])


@pytest.mark.parametrize("run, links, floor_gbs", [
    (AR_H100, [{"kind": "nvlink", "generation": 4, "count": 18}], 315.0),  # H100 SXM: 18 NVLink4 links
    (AR_H200, [{"kind": "nvlink", "generation": 4, "count": 18}], 315.0),
    (AR_A100, NVLINK_A100, 210.0),  # the links an A100 SXM4 reports: 12 x 25 GB/s (recorded on the 80 GB model)
    (AR_2NODE, [{"kind": "net", "rate_gbps": 400, "count": 1}], 40.0),  # one rank a node: one 400G NIC
])
def test_recorded_healthy_runs_pass_their_floor(run: str, links: list | str, floor_gbs: float) -> None:
    if isinstance(links, str):
        links = hvd_bandwidth.nvlink_links(hvd_health_gpu.parse_nvlink_status(read(links)))
    floor = hvd_bandwidth.bus_bandwidth_floor(links)
    assert floor["floor_gbs"] == floor_gbs
    assert hvd_bandwidth.check_bus_bandwidth(hvd_bandwidth.parse_nccl_perf(read(run)), floor) == []


def test_the_a100_average_alone_would_have_failed_its_floor() -> None:
    """Why the floor is judged at large sizes: the A100 run's average over 1 byte to 8 GiB is 68 GB/s."""
    result = hvd_bandwidth.parse_nccl_perf(read(AR_A100))
    floor = hvd_bandwidth.bus_bandwidth_floor(hvd_bandwidth.nvlink_links(hvd_health_gpu.parse_nvlink_status(read(NVLINK_A100))))
    assert result["avg_busbw"] < floor["floor_gbs"] < hvd_bandwidth.measured_bus_bandwidth(result)["busbw"]


def test_socket_fallback_run_is_flagged_below_its_floor() -> None:
    """The EKS nodes' NICs are not named; even a single 100 Gb/s port gives a floor five times what it reached."""
    floor = hvd_bandwidth.bus_bandwidth_floor([{"kind": "net", "rate_gbps": 100, "count": 1}])
    finding, = hvd_bandwidth.check_bus_bandwidth(hvd_bandwidth.parse_nccl_perf(read(AR_SOCKET)), floor)
    assert (finding["item"], finding["found"]) == ("nccl.busbw", "2 GB/s busbw at 1073741824 bytes")
    assert finding["expected"] == ">= 10 GB/s (12.5 GB/s net line rate x 0.8)"
    assert finding["source"] == hvd_health.threshold("efficiency.net")["source"]


def test_a_run_that_reached_one_nic_of_eight_is_flagged() -> None:
    """The 2-node smoke run (one rank a node, 46 GB/s) judged as if its ranks had used all eight NDR ports."""
    floor = hvd_bandwidth.bus_bandwidth_floor(hvd_bandwidth.net_links(hvd_health_net.parse_ibstat(read(IB_NDR))))
    assert (floor["floor_gbs"], floor["bottleneck"]) == (320.0, "net")
    slow, = hvd_bandwidth.check_bus_bandwidth(hvd_bandwidth.parse_nccl_perf(read(AR_2NODE)), floor)
    assert (slow["item"], slow["found"]) == ("nccl.busbw", "46.46 GB/s busbw at 536870912 bytes")


def test_nvlink_links_count_only_the_active_links_of_the_slowest_gpu() -> None:
    v100 = hvd_bandwidth.nvlink_links(hvd_health_gpu.parse_nvlink_status(read(NVLINK_V100)))
    assert v100 == [{"kind": "nvlink", "gbs_per_link": 25.781, "count": 4}]  # links 3 and 5 down
    assert hvd_bandwidth.bus_bandwidth_floor(v100)["floor_gbs"] == round(4 * 25.781 * 0.7, 2)
    assert hvd_bandwidth.nvlink_links(hvd_health_gpu.parse_nvlink_status(read(NVLINK_DEAD))) == []  # no NVLink: pass PCIe


def test_failed_run_is_a_failure_before_any_floor() -> None:
    floor = hvd_bandwidth.bus_bandwidth_floor([{"kind": "nvlink", "generation": 4, "count": 18}])
    failed, = hvd_bandwidth.check_bus_bandwidth(hvd_bandwidth.parse_nccl_perf(read(AR_FAIL)), floor)
    assert failed["item"] == "nccl.all_reduce" and "system not yet initialized" in failed["found"]
