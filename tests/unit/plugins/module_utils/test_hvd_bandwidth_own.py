"""plugins/module_utils/hvd_bandwidth.py: nccl-tests' all_reduce_perf output, NCCL's debug lines and the all_reduce
bandwidth floor over the project's own fixtures.

tests/unit/plugins/fixtures/gpu holds GPU and fabric tool outputs we wrote in each tool's documented format (its
README.md says what each one stands for and which format it follows). They prove every parser and rule path in any
checkout and under ansible-test units; test_hvd_bandwidth.py asserts the same behaviour again on real recorded outputs
(../shared/fixtures-gpu), an extra layer skipped where that folder is absent. Each test here names its counterpart
there.
"""

from __future__ import annotations

import re

import pytest

from ansible_collections.hvd.cluster.tests.unit.plugins.support import own_gpu_fixture

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_bandwidth, hvd_health, hvd_health_gpu, hvd_health_net


NVLINK_A100 = "nvidia-smi-nvlink-s_a100-sxm4-2gpu_12x25GBs.txt"
NVLINK_V100 = "nvidia-smi-nvlink-s-i1_v100-sxm2_links-1-4-inactive.txt"
NVLINK_DEAD = "nvidia-smi-nvlink-s-i2_a100-sxm4_all-links-inactive.txt"
DMESG_LINES = "dmesg_xid-94-64_sxid-12028-nonfatal_mlx5-pcie-x8.log"
IB_NDR = "ibstat_cx7-ndr400-2ib-active_eth-bond-up_2eth-down.txt"
AR_H100 = "all_reduce_perf_1node-8gpu-h100-nvswitch.txt"
AR_A100 = "all_reduce_perf_1node-8gpu-a100-sxm4_old-layout-error-column.txt"
AR_H200 = "all_reduce_perf_1node-8rank-h200_8G-only.txt"
AR_2x8 = "all_reduce_perf_2node-16gpu-h100_nccl-tests-2.17.txt"
AR_2NODE = "all_reduce_perf_2node-1gpu-h100_smoke-to-512M.txt"
AR_SOCKET = "all_reduce_perf_2node-1gpu_mpirun-tagged_nccl-socket-fallback.txt"
AR_FAIL = "all_reduce_perf_1node-8gpu_FAIL-cuda-system-not-yet-initialized.txt"
NCCL_GDR = "nccl-debug-info_2node-1gpu_net-ib-gdrdma.log"
NCCL_IB_ERR = "nccl-debug-info_grep-NET-IB_FAIL-completion-error-12.log"


def read(name: str) -> str:
    return own_gpu_fixture(name).read_text(encoding="utf-8")


def smi(name: str) -> dict:
    return hvd_health_gpu.parse_nvidia_smi_q(read(name))


def items(findings: list[dict]) -> list[str]:
    return [finding["item"] for finding in findings]


@pytest.mark.parametrize("name, avg, rows, ranks, hosts", [
    (AR_H100, 324.146, 7, 8, {"gpu01"}),
    (AR_A100, 77.4156, 11, 8, {"dgx01"}),  # the NCCL INFO line among the rows is no row
    (AR_H200, 478.624, 1, 8, {"h200-01"}),
    (AR_2x8, 218.579, 7, 16, {"gpu01", "gpu02"}),
    (AR_2NODE, 34.4804, 4, 2, {"gpu01", "gpu02"}),
    (AR_SOCKET, 0.9944, 6, 2, {"node-a", "node-b"}),  # every line tagged [1,0]<stdout>: by mpirun
])
def test_all_reduce_perf_reads_average_rows_and_ranks(name: str, avg: float, rows: int, ranks: int,
                                                      hosts: set) -> None:
    result = hvd_bandwidth.parse_nccl_perf(read(name))
    assert result["avg_busbw"] == avg and len(result["rows"]) == rows and len(result["ranks"]) == ranks
    assert {rank["host"] for rank in result["ranks"]} == hosts
    assert result["out_of_bounds_ok"] is True and result["errors"] == []


def test_all_reduce_perf_rows_in_both_column_layouts() -> None:
    new = hvd_bandwidth.parse_nccl_perf(read(AR_H100))["rows"][-1]
    assert new == {"size": 4294967296, "count": 1073741824, "type": "float", "redop": "sum", "algbw_out": 275.41,
                   "busbw_out": 481.96, "algbw_in": 275.85, "busbw_in": 482.74, "wrong": 0}
    old = hvd_bandwidth.parse_nccl_perf(read(AR_A100))["rows"][-1]  # no root column, "error" N/A under -c 0
    assert (old["size"], old["busbw_out"], old["busbw_in"], old["wrong"]) == (8589934592, 230.20, 230.35, 0)
    rank = hvd_bandwidth.parse_nccl_perf(read(AR_2x8))["ranks"][9]
    assert rank == {"rank": 9, "host": "gpu02", "device": 1, "bus_id": "0x2a", "name": "NVIDIA H100 80GB HBM3"}


def test_all_reduce_perf_failed_run_has_its_errors_and_no_result() -> None:
    result = hvd_bandwidth.parse_nccl_perf(read(AR_FAIL))
    assert result["errors"] == ["gpu05: Test CUDA failure common.cu:1035 'system not yet initialized'",
                                ".. gpu05 pid 72210: Test failure common.cu:1177",
                                ".. gpu05 pid 72210: Test failure all_reduce.cu:90"]
    assert (result["rows"], result["avg_busbw"], result["out_of_bounds_ok"]) == ([], None, None)


def test_measured_bus_bandwidth_takes_large_sizes_not_the_average() -> None:
    assert hvd_bandwidth.measured_bus_bandwidth(hvd_bandwidth.parse_nccl_perf(read(AR_A100))) == {
        "busbw": 230.35, "size": 8589934592}
    assert hvd_bandwidth.measured_bus_bandwidth(hvd_bandwidth.parse_nccl_perf(read(AR_2x8))) == {
        "busbw": 362.91, "size": 4294967296}  # the best of the 1 GiB and 4 GiB rows, in-place here
    # nothing reached 1 GiB: the largest size counts
    assert hvd_bandwidth.measured_bus_bandwidth(hvd_bandwidth.parse_nccl_perf(read(AR_2NODE))) == {
        "busbw": 45.93, "size": 536870912}
    assert hvd_bandwidth.measured_bus_bandwidth(hvd_bandwidth.parse_nccl_perf(read(AR_FAIL))) is None


def test_nccl_debug_names_network_transport_and_ib_devices() -> None:
    gdr = hvd_bandwidth.parse_nccl_debug(read(NCCL_GDR))
    assert (gdr["version"], gdr["network"], gdr["ib_detected"], gdr["gdrdma"]) == ("2.21.5+cuda12.4", "IB", True, True)
    assert gdr["ib_devices"] == ["mlx5_0:1/IB", "mlx5_1:1/IB"] and gdr["transports"] == ["NET/IB"]  # " [RO]" left out
    assert (gdr["warnings"], gdr["ib_no_device"]) == ([], False)
    socket = hvd_bandwidth.parse_nccl_debug(read(AR_SOCKET))
    assert (socket["network"], socket["transports"], socket["ib_detected"]) == ("Socket", ["NET/Socket"], False)
    assert socket["version"] == "2.21.5+cuda12.4"
    failed = hvd_bandwidth.parse_nccl_debug(read(NCCL_IB_ERR))
    assert failed["ib_devices"] == ["mlx5_0:1/IB", "mlx5_2:1/RoCE"] and failed["network"] is None
    assert failed["transports"] == ["NET/IB"] and failed["gdrdma"] is False
    assert len(failed["warnings"]) == 1 and "with error 12" in failed["warnings"][0]


# ------------------------------------------------------------------------------------------ bandwidth floor


def test_the_kernels_pcie_rates_are_the_threshold_rows() -> None:
    """The mlx5 line of DMESG_LINES: the kernel's own Gb/s for Gen5 x8 and x16 (pcie_print_link_status)."""
    line = next(line for line in read(DMESG_LINES).splitlines() if "available PCIe bandwidth" in line)
    available, capable = (float(n) for n in re.findall(r"([\d.]+) Gb/s", line))
    lane = hvd_health.threshold("pcie.5.lane_gbs")["value"]
    assert (lane * 8 * 8, lane * 16 * 8) == (pytest.approx(available, abs=0.001), pytest.approx(capable, abs=0.001))


@pytest.mark.parametrize("run, links, floor_gbs", [
    (AR_H100, [{"kind": "nvlink", "generation": 4, "count": 18}], 315.0),  # H100 SXM: 18 NVLink4 links
    (AR_H200, [{"kind": "nvlink", "generation": 4, "count": 18}], 315.0),
    (AR_A100, NVLINK_A100, 210.0),  # the links an A100 SXM4 reports: 12 x 25 GB/s
    (AR_2NODE, [{"kind": "net", "rate_gbps": 400, "count": 1}], 40.0),  # one rank a node: one 400G NIC
    (AR_2x8, [{"kind": "nvlink", "generation": 4, "count": 18}, {"kind": "net", "rate_gbps": 400, "count": 8}],
     315.0),
])
def test_healthy_runs_pass_their_floor(run: str, links: list | str, floor_gbs: float) -> None:
    if isinstance(links, str):
        links = hvd_bandwidth.nvlink_links(hvd_health_gpu.parse_nvlink_status(read(links)))
    floor = hvd_bandwidth.bus_bandwidth_floor(links)
    assert floor["floor_gbs"] == floor_gbs
    assert hvd_bandwidth.check_bus_bandwidth(hvd_bandwidth.parse_nccl_perf(read(run)), floor) == []


def test_the_a100_average_alone_would_have_failed_its_floor() -> None:
    """Why the floor is judged at large sizes: the A100 run's average over 8 bytes to 8 GiB is 77 GB/s."""
    result = hvd_bandwidth.parse_nccl_perf(read(AR_A100))
    floor = hvd_bandwidth.bus_bandwidth_floor(hvd_bandwidth.nvlink_links(hvd_health_gpu.parse_nvlink_status(read(NVLINK_A100))))
    assert result["avg_busbw"] < floor["floor_gbs"] < hvd_bandwidth.measured_bus_bandwidth(result)["busbw"]


def test_socket_fallback_run_is_flagged_below_its_floor() -> None:
    """The nodes' NICs are not named; even a single 100 Gb/s port gives a floor eight times what it reached."""
    floor = hvd_bandwidth.bus_bandwidth_floor([{"kind": "net", "rate_gbps": 100, "count": 1}])
    finding, = hvd_bandwidth.check_bus_bandwidth(hvd_bandwidth.parse_nccl_perf(read(AR_SOCKET)), floor)
    assert (finding["item"], finding["severity"], finding["found"]) == (
        "nccl.busbw", "fail", "1.18 GB/s busbw at 1073741824 bytes")
    assert finding["expected"] == ">= 10 GB/s (12.5 GB/s net line rate x 0.8)"
    assert finding["source"] == hvd_health.threshold("efficiency.net")["source"]


def test_a_run_that_reached_one_nic_of_two_is_flagged() -> None:
    """The 2-node smoke run (one rank a node, 46 GB/s) judged as if its ranks had used both NDR ports."""
    floor = hvd_bandwidth.bus_bandwidth_floor(hvd_bandwidth.net_links(hvd_health_net.parse_ibstat(read(IB_NDR))))
    assert (floor["floor_gbs"], floor["bottleneck"]) == (80.0, "net")
    slow, = hvd_bandwidth.check_bus_bandwidth(hvd_bandwidth.parse_nccl_perf(read(AR_2NODE)), floor)
    assert (slow["item"], slow["found"]) == ("nccl.busbw", "45.93 GB/s busbw at 536870912 bytes")


def test_nvlink_links_count_only_the_active_links_of_the_slowest_gpu() -> None:
    v100 = hvd_bandwidth.nvlink_links(hvd_health_gpu.parse_nvlink_status(read(NVLINK_V100)))
    assert v100 == [{"kind": "nvlink", "gbs_per_link": 25.781, "count": 4}]  # links 1 and 4 down
    assert hvd_bandwidth.bus_bandwidth_floor(v100)["floor_gbs"] == round(4 * 25.781 * 0.7, 2)
    assert hvd_bandwidth.nvlink_links(hvd_health_gpu.parse_nvlink_status(read(NVLINK_DEAD))) == []  # no NVLink: pass PCIe


def test_failed_run_is_a_failure_before_any_floor() -> None:
    floor = hvd_bandwidth.bus_bandwidth_floor([{"kind": "nvlink", "generation": 4, "count": 18}])
    failed, = hvd_bandwidth.check_bus_bandwidth(hvd_bandwidth.parse_nccl_perf(read(AR_FAIL)), floor)
    assert (failed["item"], failed["severity"]) == ("nccl.all_reduce", "fail")
    assert failed["found"] == "the run failed: gpu05: Test CUDA failure common.cu:1035 'system not yet initialized'"


def test_wrong_values_fail_the_run() -> None:
    """No fixture shows a wrong value: one #wrong cell of the H100 run's last row is raised."""
    result = hvd_bandwidth.parse_nccl_perf(read(AR_H100))
    result["rows"][-1]["wrong"] = 2
    floor = hvd_bandwidth.bus_bandwidth_floor([{"kind": "nvlink", "generation": 4, "count": 18}])
    wrong, = hvd_bandwidth.check_bus_bandwidth(result, floor)
    assert (wrong["item"], wrong["found"]) == ("nccl.all_reduce", "2 wrong values")
