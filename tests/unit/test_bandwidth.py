"""`health --full`, health in `up`'s loop and `run`'s health gate (issue 52, items 2-5), on the project's own fixtures.

- Floors: plugins/module_utils/hvd_bandwidth.py's run_floor per link kind (NVLink through NVSwitch, NVLink between two
  GPUs, NVLink without NVSwitch among more, PCIe, InfiniBand ports), each term with its source.
- The bisection (culprit.find_culprit) on simulated measurements: which runs fail is decided by a model of the
  cluster (slow nodes, slow links), never by a real GPU.
- nccl-tests runs judged (bandwidth.Meter) on outputs we wrote in nccl-tests' documented format
  (tests/unit/plugins/fixtures/gpu, its README says what each stands for), returned by a stand-in for the SSH to the
  node.
- PCIe ACS and the IOMMU: lspci -vvv, the config space and /proc/cmdline parsed and judged, and read by the node module
  from a folder standing in for /.
- The commands: `health --full` (JSON shape, exit codes, bad input), `up`'s health read, `up --accept`, `run`'s gate.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest
from ansible_collections.hvd.cluster.plugins.module_utils import hvd_bandwidth, hvd_health, hvd_health_gpu, hvd_health_net
from ansible_collections.hvd.cluster.tests.unit.plugins.support import own_gpu_fixture

from hvdcluster import bandwidth, cli, culprit, health, nodestate
from hvdcluster.cli import stages
from tests.unit.health_readings import fake_tool, module_reading, pci, reading
from tests.unit.cli_fakes import SHARED, FakeRun, fake_launches, fake_leases, record_converged

H100_Q = "nvidia-smi-q_h100-sxm-2gpu_550.144.03.txt"
L4_Q = "nvidia-smi-q_l4_555.42.06_pcie-gen1-of-4_x8-of-x16.txt"
A100_4_Q = "nvidia-smi-q_a100-sxm4-4gpu_450.80.02_single-double-bit-ecc-layout.txt"
NVLINK_A100 = "nvidia-smi-nvlink-s_a100-sxm4-2gpu_12x25GBs.txt"
IB_NDR = "ibstat_cx7-ndr400-2ib-active_eth-bond-up_2eth-down.txt"
IB_HDR4 = "ibstat_cx6-hdr200-4ib-active.txt"
LSPCI_ACS = "lspci-D-vvv_2gpu-1nic-pex8747_acs-redirect-on-2-ports.txt"
LSPCI_DENIED = "lspci-D-vvv_as-login-user_capabilities-access-denied.txt"
CMDLINE_ON = "proc-cmdline_intel-iommu-on_without-pt.txt"
CMDLINE_PT = "proc-cmdline_amd-iommu-on_iommu-pt.txt"


def read(name: str) -> str:
    return own_gpu_fixture(name).read_text(encoding="utf-8")


def perf(nodes: int, kind: str) -> str:
    """Our nccl-tests output over ``nodes`` 1-GPU nodes: healthy (net-ib-gdrdma), slow, or socket."""
    names = {"healthy": "net-ib-gdrdma", "slow": "net-ib_one-slow-node", "socket": "nccl-socket-fallback"}
    return read(f"all_reduce_perf_{nodes}node-1gpu_{names[kind]}_to-64M.txt")


def nvlinks(count: int, gbs: float = 25.0) -> list[dict]:
    """parse_nvlink_status's shape for GPUs of ``count`` active links each."""
    return [{"index": i, "name": "GPU", "uuid": "", "all_inactive": False,
             "links": [{"link": n, "speed_gbs": gbs, "active": True} for n in range(count)]} for i in range(2)]


def ib(*rates: float) -> dict:
    return {"ports": [{"ca": f"mlx5_{i}", "port": 1, "state": "Active", "physical_state": "LinkUp", "rate_gbps": r,
                       "link_layer": "InfiniBand"} for i, r in enumerate(rates)], "errors": []}


def cpu_links(gpus: int = 1) -> dict:
    """A node whose links the read cannot see (a container): only its ranks."""
    return hvd_bandwidth.node_links({"gpus": []}, [], None, False, [], gpus)


# ------------------------------------------------------------------------------------------ floors per link kind


def test_nvswitch_h100_node_floor_is_its_eighteen_nvlinks_times_the_efficiency_with_sources() -> None:
    links = hvd_bandwidth.node_links(hvd_health_gpu.parse_nvidia_smi_q(read(H100_Q)), nvlinks(18), None, True, [], 8)
    floor = hvd_bandwidth.run_floor({"gpu01": links})
    assert (floor["floor_gbs"], floor["bottleneck"]) == (315.0, {"kind": "nvlink", "node": "gpu01"})
    term, = floor["terms"]
    assert term["what"] == "18 NVLink links x 25 GB/s through NVSwitch" and term["line_gbs"] == 450.0
    assert hvd_health.SOURCES["nvswitch"] in term["source"] and hvd_health.threshold("efficiency.nvlink")["source"] in term["source"]


def test_two_gpus_joined_by_nvlink_are_judged_by_their_links_without_an_nvswitch() -> None:
    links = hvd_bandwidth.node_links({"gpus": []}, hvd_health_gpu.parse_nvlink_status(read(NVLINK_A100)), None, False, [], 2)
    term, = hvd_bandwidth.run_floor({"gpu01": links})["terms"]
    assert (term["kind"], term["floor_gbs"]) == ("nvlink", 210.0)
    assert "between its 2 GPUs" in term["what"] and hvd_health.SOURCES["nvlink_speeds"] in term["source"]


def test_nvlink_without_nvswitch_among_four_gpus_is_judged_by_the_pcie_path_and_says_why() -> None:
    smi = hvd_health_gpu.parse_nvidia_smi_q(read(A100_4_Q))
    links = hvd_bandwidth.node_links(smi, nvlinks(12), None, False, [], 4)
    term, = hvd_bandwidth.run_floor({"gpu02": links})["terms"]
    assert term["kind"] == "pcie" and "NVLink without NVSwitch among 4 GPUs" in term["what"]
    assert hvd_health.SOURCES["nvlink_mesh"] in term["source"] and hvd_health.SOURCES["pcie_rates"] in term["source"]


def test_pcie_gpus_are_judged_by_the_generation_and_width_gpu_and_slot_support_not_the_idle_link() -> None:
    smi = hvd_health_gpu.parse_nvidia_smi_q(read(L4_Q))
    links = hvd_bandwidth.node_links(smi, [], None, False, [], 2)
    assert links["pcie"] == {"generation": 4, "width": 16}  # idle at Gen1 x8: Max is what the link can do
    term, = hvd_bandwidth.run_floor({"gpu03": links})["terms"]
    assert term["what"] == "PCIe Gen4 x16" and term["floor_gbs"] == pytest.approx(16 * 16 * 128 / 130 / 8 * 0.3, 0.01)


def test_between_nodes_the_floor_counts_one_active_ib_port_a_rank_and_names_the_slowest_node() -> None:
    two_ports = hvd_bandwidth.node_links({"gpus": []}, [], hvd_health_net.parse_ibstat(read(IB_NDR)), False, [], 1)
    four_ports = hvd_bandwidth.node_links({"gpus": []}, nvlinks(18), hvd_health_net.parse_ibstat(read(IB_HDR4)), True, [], 8)
    floor = hvd_bandwidth.run_floor({"gpu01": two_ports, "gpu02": four_ports})
    terms = {term["node"]: term for term in floor["terms"] if term["kind"] == "net"}
    assert terms["gpu01"]["what"] == "1 x 400 Gb/s RDMA port" and terms["gpu01"]["floor_gbs"] == 40.0
    assert terms["gpu02"]["what"] == "4 x 200 Gb/s RDMA ports" and terms["gpu02"]["floor_gbs"] == 80.0
    assert floor["bottleneck"] == {"kind": "net", "node": "gpu01"} and floor["floor_gbs"] == 40.0
    assert all(term["source"].startswith("https://") for term in floor["terms"])


def test_a_multi_node_run_without_rdma_ports_has_no_floor_unless_one_is_given() -> None:
    floor = hvd_bandwidth.run_floor({"n1": cpu_links(), "n2": cpu_links()})
    assert floor["floor_gbs"] is None and "no Active InfiniBand or RoCE port" in floor["not_applicable"]
    assert "--floor" in floor["not_applicable"]
    given = hvd_bandwidth.run_floor({"n1": cpu_links(), "n2": cpu_links()}, given=12.5)
    assert given["floor_gbs"] == 12.5 and given["bottleneck"] == {"kind": "given", "node": None}


def test_one_gpu_is_not_applicable_and_says_why() -> None:
    floor = hvd_bandwidth.run_floor({"gpu01": cpu_links(1)})
    assert floor["floor_gbs"] is None and floor["not_applicable"].startswith("1 rank: an all_reduce over one GPU")


def test_every_threshold_row_keeps_a_source() -> None:
    for row in hvd_health.THRESHOLDS:
        assert row["source"], row
    for name in ("nvswitch", "nvlink_speeds", "nvlink_mesh", "acs", "acs_bits", "iommu", "iommu_groups", "nccl_gdr"):
        assert "https://" in hvd_health.SOURCES[name]


# ------------------------------------------------------------------------------------------ the bisection


def model(slow: tuple[str, ...] = (), links: tuple[tuple[str, str], ...] = (), scale: int | None = None):
    """A cluster where a run fails when it holds a slow node, both ends of a slow link, or ``scale`` nodes or more;
    returns (judge_round, rounds seen)."""
    seen: list[list[tuple[str, ...]]] = []

    def judge(groups: list[tuple[str, ...]]) -> list[bool]:
        seen.append(groups)
        for i, group in enumerate(groups):  # a round runs disjoint node sets at once
            assert not any(set(group) & set(other) for other in groups[i + 1:]), groups
        return [not (set(g) & set(slow) or any(set(link) <= set(g) for link in links) or (scale and len(g) >= scale))
                for g in groups]
    return judge, seen


EIGHT = [f"gpu{i:02d}" for i in range(1, 9)]


@pytest.mark.parametrize("slow", EIGHT)
def test_one_slow_node_among_eight_is_named_in_seven_runs_and_three_rounds(slow: str) -> None:
    judge, seen = model(slow=(slow,))
    found = culprit.find_culprit(EIGHT, judge)
    assert (found["kind"], found["nodes"]) == ("node", [slow])
    assert len(found["runs"]) == 7 and found["rounds"] == 3 == len(seen)  # + the whole run: 8, against the 28 pairs


@pytest.mark.parametrize("peer", ["gpu01", "gpu06"])
def test_a_node_slow_only_with_one_peer_is_the_link_to_that_peer_not_the_node(peer: str) -> None:
    judge, _ = model(links=(("gpu05", peer),))
    found = culprit.find_culprit(EIGHT, judge)
    assert (found["kind"], sorted(found["nodes"])) == ("link", sorted(["gpu05", peer]))


def test_a_slow_link_inside_a_pair_is_named_as_the_link_between_them() -> None:
    judge, _ = model(links=(("gpu03", "gpu04"),))
    found = culprit.find_culprit(EIGHT, judge)
    assert (found["kind"], found["nodes"]) == ("link", ["gpu03", "gpu04"]) and len(found["runs"]) == 6
    assert "the link or path between gpu03 and gpu04" in found["why"]


def test_a_slow_link_between_two_pairs_is_found_by_halves_in_at_most_eleven_runs() -> None:
    judge, _ = model(links=(("gpu02", "gpu05"),))
    found = culprit.find_culprit(EIGHT, judge)
    assert (found["kind"], found["nodes"]) == ("link", ["gpu02", "gpu05"]) and len(found["runs"]) <= 11


def test_two_slow_nodes_in_different_pairs_are_both_named() -> None:
    judge, _ = model(slow=("gpu01", "gpu03"))
    found = culprit.find_culprit(EIGHT[:4], judge)
    assert (found["kind"], found["nodes"]) == ("node", ["gpu01", "gpu03"])


def test_every_pair_slow_is_the_fabric_not_a_node() -> None:
    judge, _ = model(slow=tuple(EIGHT))
    found = culprit.find_culprit(EIGHT, judge)
    assert found["kind"] == "fabric" and found["nodes"] == EIGHT and len(found["runs"]) < 28


def test_a_cause_only_at_scale_is_a_group_that_fails_together() -> None:
    judge, _ = model(scale=5)
    found = culprit.find_culprit(EIGHT, judge)
    assert found["kind"] == "group" and len(found["nodes"]) >= 5


@pytest.mark.parametrize("slow, runs", [("n1", 3), ("n2", 3), ("n3", 3)])
def test_one_slow_node_of_three_is_named_in_three_runs_at_most(slow: str, runs: int) -> None:
    judge, _ = model(slow=(slow,))
    found = culprit.find_culprit(["n1", "n2", "n3"], judge)
    assert (found["kind"], found["nodes"], len(found["runs"])) == ("node", [slow], runs)


def test_a_single_node_or_a_pair_is_named_without_running_anything() -> None:
    judge, seen = model(slow=("n1",))
    assert culprit.find_culprit(["n1"], judge)["kind"] == "node"
    assert culprit.find_culprit(["n1", "n2"], judge)["kind"] == "pair" and seen == []


# ------------------------------------------------------------------------------------------ runs judged


def runner(outputs: dict[int, str] | None = None, slow: str | None = None, kind: str = "healthy", rc: int = 0):
    """Stands in for the SSH to the first node: our recorded output for the run's rank count, slow where ``slow`` is
    among its -H hosts. Records (first node, shell)."""
    calls: list[tuple[str, str]] = []

    def execute(first: str, shell: str) -> tuple[int, str, float]:
        calls.append((first, shell))
        hosts = shlex.split(shell.split("exec ", 1)[1])[6]
        ranks = len(hosts.split(","))
        which = "slow" if slow and f"{slow}:" in hosts else kind
        return rc, (outputs or {}).get(ranks, perf(ranks, which) if ranks in (2, 3) else ""), 0.25

    return execute, calls


STANDIN = bandwidth.Settings(size=64 << 20, gpus_per_node=1, floor=10.0, transport="IB")
THREE = {f"node{i}": cpu_links() for i in (1, 2, 3)}


def test_a_healthy_ib_run_passes_its_floor_and_records_transport_size_and_command() -> None:
    execute, calls = runner()
    meter = bandwidth.Meter(THREE, STANDIN, execute)
    run, = meter.round([("node1", "node2", "node3")], "all_reduce")
    assert run.passed and run.findings == []
    doc = run.as_dict()
    assert doc["network"] == "IB" and doc["gdrdma"] and doc["ranks"] == 3 and doc["size"] == 64 << 20
    assert doc["busbw_gbs"] == 43.53 and len(doc["sizes"]) == 24
    first, shell = calls[0]
    assert first == "node1" and "mpirun -np 3 -H node1:1,node2:1,node3:1 -x NCCL_DEBUG -x NCCL_DEBUG_SUBSYS" in shell
    assert shell.endswith("/opt/hvd/nccl-tests/bin/all_reduce_perf -b 8 -e 67108864 -f 2 -g 1")
    assert "NCCL_DEBUG=INFO" in shell and ". \"$f\"" in shell


def test_a_socket_fallback_where_ib_is_expected_fails_naming_the_transport() -> None:
    execute, _ = runner(kind="socket")
    run, = bandwidth.Meter(THREE, STANDIN, execute).round([("node1", "node2", "node3")], "all_reduce")
    items = {f["item"]: f for f in run.findings}
    assert items["nccl.transport"]["found"] == "NCCL used NET/Socket (NET/IB : No device found)"
    assert items["nccl.transport"]["expected"] == "NET/IB, which every node offers"
    assert "nccl.busbw.all_reduce" in items and not run.passed


def test_ib_without_gpudirect_rdma_where_peermem_is_loaded_is_a_warning() -> None:
    links = {n: hvd_bandwidth.node_links({"gpus": []}, [], ib(400), False, ["nvidia", "nvidia_peermem"], 1) for n in ("a", "b")}
    execute, _ = runner(outputs={2: perf(2, "slow")})
    run, = bandwidth.Meter(links, bandwidth.Settings(size=64 << 20), execute).round([("a", "b")], "all_reduce")
    assert {f["item"]: f["severity"] for f in run.findings} == {"nccl.busbw.all_reduce": "fail", "nccl.gdrdma": "warn"}
    assert run.floor["floor_gbs"] == 40.0  # derived: one 400 Gb/s port a node, x 0.8


def test_a_run_reporting_fewer_ranks_than_gpus_fails() -> None:
    execute, _ = runner(outputs={3: perf(2, "healthy")})
    run, = bandwidth.Meter(THREE, STANDIN, execute).round([("node1", "node2", "node3")], "all_reduce")
    assert [f["item"] for f in run.findings] == ["nccl.ranks"]


def test_a_run_that_cannot_start_fails_with_its_exit_and_last_line() -> None:
    execute, _ = runner(outputs={3: "bash: /opt/hvd/nccl-tests/bin/all_reduce_perf: No such file or directory\n"},
                        rc=127)
    run, = bandwidth.Meter(THREE, STANDIN, execute).round([("node1", "node2", "node3")], "all_reduce")
    failed, = [f for f in run.findings if f["severity"] == "fail"]
    assert failed["item"] == "nccl.all_reduce" and "exit 127: bash: " in failed["found"]
    assert "No such file or directory" in failed["found"]


def test_assess_names_the_slow_node_in_three_runs_and_the_others_healthy() -> None:
    execute, calls = runner(slow="node3")
    full = bandwidth.assess({n: {} for n in THREE}, list(THREE), STANDIN, execute)
    assert not full["passed"] and full["culprit"]["nodes"] == ["node3"] and full["culprit"]["runs_needed"] == 4
    assert [run["nodes"] for run in full["runs"]] == [["node1", "node2", "node3"], ["node1", "node2"],
                                                      ["node1", "node3"], ["node2", "node3"]]
    assert [first for first, _ in calls] == ["node1", "node1", "node1", "node2"]
    assert {n: v["healthy"] for n, v in full["verdicts"].items()} == {"node1": True, "node2": True, "node3": False}
    assert full["verdicts"]["node3"]["findings"][0]["item"] == "nccl.culprit"
    text = bandwidth.render(full)
    assert "culprit: node3 (node)" in text and "found in 4 runs" in text


def test_assess_runs_each_collective_and_passes_when_all_meet_the_floor() -> None:
    execute, calls = runner()
    settings = bandwidth.Settings(size=64 << 20, collectives=("all_reduce", "all_gather"), gpus_per_node=1,
                                  floor=10.0, transport="IB")
    full = bandwidth.assess({n: {} for n in THREE}, list(THREE), settings, execute)
    assert full["passed"] and full["culprit"] is None and len(full["runs"]) == 2
    assert calls[1][1].endswith("bin/all_gather_perf -b 8 -e 67108864 -f 2 -g 1")


def test_assess_on_nodes_without_gpus_is_not_applicable_and_runs_nothing() -> None:
    execute, calls = runner()
    full = bandwidth.assess({n: reading() for n in THREE}, list(THREE), bandwidth.Settings(), execute)
    assert not full["applicable"] and full["passed"] and calls == []
    assert set(full["skipped"]) == set(THREE) and "--gpus-per-node" in full["skipped"]["node1"]
    one = bandwidth.assess({"node1": {}}, ["node1"], bandwidth.Settings(gpus_per_node=1), execute)
    assert not one["applicable"] and "over one GPU" in one["reason"] and calls == []


def test_a_single_node_that_fails_is_its_own_culprit_without_more_runs() -> None:
    links_reading = {"gpu01": reading(nvidia_smi_q=read(H100_Q), nvidia_smi_q_error="", pci=pci(2))}
    execute, calls = runner(outputs={2: perf(2, "slow")})
    full = bandwidth.assess(links_reading, ["gpu01"], bandwidth.Settings(size=64 << 20), execute)
    assert full["culprit"]["kind"] == "node" and full["culprit"]["nodes"] == ["gpu01"] and len(calls) == 1
    assert "-H gpu01:2" in calls[0][1]


# ------------------------------------------------------------------------------------------ PCIe ACS and the IOMMU


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


# ------------------------------------------------------------------------------------------ the command


@pytest.fixture
def rendered(hosts: Path, tmp_path: Path) -> Path:
    assert cli.main(["inventory", str(hosts), "-o", str(tmp_path / "inv")]) == 0
    return tmp_path / "inv"


def fake_read(monkeypatch: pytest.MonkeyPatch, found: dict) -> None:
    monkeypatch.setattr(health, "read", lambda root, limit=None, hosts=(), quick=False: nodestate.Reading(
        found=found, log="runs/log", seconds=0.1))


@pytest.fixture
def measured(monkeypatch: pytest.MonkeyPatch) -> list:
    """No SSH: the job lease always granted (recorded), every run answered by ``runner`` (slow where gpu02 runs)."""
    looks: list = []
    fake_leases(monkeypatch, looks)
    execute, calls = runner(slow="gpu02")
    monkeypatch.setattr(bandwidth, "remote", lambda inv, first, shell: execute(first, shell))
    return calls


def refused(argv: list[str], capsys, text: str) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and text in err, err


def test_bad_full_arguments_exit_2_with_one_line_before_any_node_is_read(hosts, rendered, capsys, monkeypatch) -> None:
    monkeypatch.setattr(health, "read", lambda *a, **k: pytest.fail("a node was read"))
    base = ["health", str(hosts), "-o", str(rendered), "--full"]
    refused([*base, "--size", "4"], capsys, "--size: '4'")
    refused([*base, "--size", "128G"], capsys, "from 8 to 64G")
    refused([*base, "--collectives", "all_reduce,broadcast"], capsys, "--collectives: 'all_reduce,broadcast'")
    refused([*base, "--gpus-per-node", "0"], capsys, "--gpus-per-node: 0")
    refused([*base, "--floor", "-3"], capsys, "--floor: -3")
    refused([*base, "--transport", "IB;rm"], capsys, "--transport: 'IB;rm'")
    refused(["health", str(hosts), "-o", str(rendered), "--collectives", "all_gather"], capsys,
            "--collectives: only with --full")
    refused(["up", str(hosts), "-o", str(rendered), "--floor", "3"], capsys, "--floor: only with --accept")
    refused(["up", str(hosts), "-o", str(rendered), "--accept", "--check"], capsys, "--accept: not with --check")


def test_health_full_json_carries_every_run_and_names_the_culprit(hosts, rendered, capsys, monkeypatch,
                                                                  measured) -> None:
    fake_read(monkeypatch, {"gpu01": reading(), "gpu02": reading()})
    base = ["health", str(hosts), "-o", str(rendered), "--full", "--json", "--gpus-per-node", "1", "--floor", "10",
            "--transport", "IB", "--size", "64M"]
    assert cli.main(base) == 1
    doc = json.loads(capsys.readouterr().out)
    full = doc["full"]
    assert doc["exit"] == 1 and set(doc["nodes"]) == {"gpu01", "gpu02"} and not full["passed"]
    run = full["runs"][0]
    assert set(run) >= {"run", "nodes", "collective", "command", "seconds", "rc", "busbw_gbs", "size", "sizes",
                        "network", "transports", "gdrdma", "floor_gbs", "passed", "findings", "output_tail"}
    assert run["sizes"][-1] == {"size": 64 << 20, "busbw_gbs": run["busbw_gbs"], "algbw_gbs": run["sizes"][-1]["algbw_gbs"]}
    assert full["culprit"]["kind"] == "pair" and full["culprit"]["nodes"] == ["gpu01", "gpu02"]
    assert measured[0][0] == "gpu01" and "-H gpu01:1,gpu02:1" in measured[0][1]
    # Recorded: run refuses both (two nodes cannot be told apart)
    assert [line.split(":")[0] for line in health.refusals(rendered / "c1", ["gpu01", "gpu02"])] == ["gpu01", "gpu02"]


def test_health_full_text_shows_the_runs_and_the_summary(hosts, rendered, capsys, monkeypatch) -> None:
    fake_leases(monkeypatch, [])
    execute, _ = runner()
    monkeypatch.setattr(bandwidth, "remote", lambda inv, first, shell: execute(first, shell))
    fake_read(monkeypatch, {"gpu01": reading(), "gpu02": reading()})
    assert cli.main(["health", str(hosts), "-o", str(rendered), "--full", "--gpus-per-node", "1", "--floor", "10",
                     "--transport", "IB", "--size", "64M"]) == 0
    out = capsys.readouterr().out
    assert "bandwidth (nccl-tests all_reduce, 8 B to 64 MiB, gpu[01-02] x 1 GPU; floor 10 GB/s (--floor)):" in out
    assert "  run 1  gpu[01-02]" in out and "pass" in out
    assert out.splitlines()[-1].endswith("; bandwidth: passed (1 run in 0.0 s)") or "bandwidth: passed (1 run" in out


def test_health_full_refuses_nodes_with_running_work_and_runs_nothing(hosts, rendered, capsys, monkeypatch) -> None:
    from hvdcluster import jobs

    monkeypatch.setattr(jobs, "look", lambda inv, hosts, **kw: {h: jobs.Look(h, gpu_apps=["4242 python"]) for h in hosts})
    monkeypatch.setattr(bandwidth, "remote", lambda *a: pytest.fail("a run started beside running work"))
    fake_read(monkeypatch, {"gpu01": reading(), "gpu02": reading()})
    assert cli.main(["health", str(hosts), "-o", str(rendered), "--full", "--gpus-per-node", "1"]) == 1
    out = capsys.readouterr().out
    assert "not measuring" in out and "gpu01: GPU compute process 4242 python" in out


def test_run_refuses_a_node_whose_last_health_failed_naming_node_and_item_and_no_gate_launches(
        hosts, rendered, capsys, monkeypatch) -> None:
    from tests.unit.cli_fakes import fake_reading

    root = rendered / "c1"
    bad = {"healthy": False, "findings": [{"item": "gpu.ecc.0000:07:00.0", "severity": "fail",
                                           "found": "uncorrectable ECC errors \x1b[31m: volatile 3"}]}
    health.record(root, {"gpu02": bad, "gpu01": {"healthy": True, "findings": []}}, health.QUICK, "up")
    fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": dict(SHARED)})
    launched = fake_launches(monkeypatch)
    capsys.readouterr()
    assert cli.main(["run", str(hosts), "-o", str(rendered), "--", "python", "t.py"]) == 1
    err = capsys.readouterr().err
    assert "not launching: the last health of these nodes failed" in err
    assert "gpu02: last health (up, " in err and "gpu.ecc.0000:07:00.0: uncorrectable ECC errors" in err
    assert "\x1b" not in err and "gpu01" not in err.split("failed", 1)[1] and not launched
    assert cli.main(["run", str(hosts), "-o", str(rendered), "--no-gate", "--", "python", "t.py"]) == 0
    assert any("horovodrun" in str(argv[-1]) for argv in launched)
    # A later quick read that passes keeps a --full failure: only --full clears it
    health.record(root, {"gpu02": {"healthy": False, "findings": [{"item": "nccl.culprit", "severity": "fail",
                                                                   "found": "a slow node"}]}}, health.FULL, "health")
    health.record(root, {"gpu02": {"healthy": True, "findings": []}}, health.QUICK, "health")
    assert [line.startswith("gpu02: last health (health") for line in health.refusals(root, ["gpu02"])] == [True]


class HealthRun(FakeRun):
    """FakeRun whose events also hold the quick health read of state.yml's play (``readings``: node -> reading)."""

    readings: dict[str, dict] = {}

    def __call__(self, root, cluster, console, playbook, events=None, **kw):
        tracker, result = super().__call__(root, cluster, console, playbook, events=events, **kw)
        for node, found in self.readings.items():
            events.append({"event": "runner_on_ok", "event_data": {"host": node, "task": nodestate.HEALTH_TASK,
                                                                   "res": {"reading": found}, "duration": 0.42}})
        return tracker, result


ECC = "nvidia-smi-q-d-ECC_h100_550.144.03_dram-uncorrectable.txt"


def test_up_ends_with_the_health_read_and_a_failing_node_is_not_ready_exit_1(hosts, rendered, capsys,
                                                                             monkeypatch) -> None:
    from tests.unit.cli_fakes import fake_reading

    root = rendered / "c1"
    record_converged(root)
    fake = HealthRun()
    fake.after = {"gpu01": dict(SHARED), "gpu02": dict(SHARED)}
    sick = reading(nvidia_smi_q=read(ECC), nvidia_smi_q_error="", pci=pci(1))
    fake.readings = {"gpu01": reading(), "gpu02": sick}
    monkeypatch.setattr(stages, "tracked_run", fake)
    fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": {**SHARED, "horovod.record": "other"}})
    capsys.readouterr()
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--json"]) == 1
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert doc["health"]["nodes"]["gpu01"]["healthy"] and not doc["health"]["nodes"]["gpu02"]["healthy"]
    assert doc["health"]["seconds"] == 0.42 and fake.calls[0]["extravars"]["hvd_state_health"] is True
    assert doc["health"]["not_ready"][0].startswith("gpu02: not ready: gpu.ecc.")
    assert "Health (quick read, 0.42 s): 1 of 2 nodes ready" in captured.err
    assert health.refusals(root, ["gpu01"]) == [] and health.refusals(root, ["gpu02"])[0].startswith("gpu02: last")


def test_up_on_cpu_nodes_is_ready_every_item_not_applicable(hosts, rendered, capsys, monkeypatch) -> None:
    from tests.unit.cli_fakes import fake_reading

    root = rendered / "c1"
    record_converged(root)
    fake = HealthRun()
    fake.after = {"gpu01": dict(SHARED), "gpu02": dict(SHARED)}
    fake.readings = {"gpu01": reading(kernel_log=None, kernel_log_error="no journal"), "gpu02": reading()}
    monkeypatch.setattr(stages, "tracked_run", fake)
    fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": {**SHARED, "horovod.record": "other"}})
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["health"]["not_ready"] == [] and all(n["healthy"] for n in doc["health"]["nodes"].values())
    assert "no NVIDIA device" in doc["health"]["nodes"]["gpu02"]["notes"][0]


def test_the_post_flight_on_gpus_is_judged_against_the_floor_and_in_host_memory_only_recorded() -> None:
    gpu = reading(nvidia_smi_q=read(H100_Q), nvidia_smi_q_error="", nvlink=read(NVLINK_A100), pci=pci(2), ib=ib(400),
                  modules=["nvidia"])
    readings = {"gpu01": gpu, "gpu02": gpu}
    slow = {"mpi": {"device": "cuda", "bytes": 1 << 30, "busbw_gbs": 12.0, "ranks": 4},
            "gloo": {"device": "cpu", "bytes": 16 << 20, "busbw_gbs": 0.5, "ranks": 4}}
    judged = health.judge_postflight(slow, readings)
    assert judged["judged"]["mpi"]["floor_gbs"] == 40.0 and not judged["judged"]["mpi"]["ok"]
    assert judged["failed"][0].startswith("post-flight allreduce (mpi): busbw 12 GB/s below the floor 40 GB/s")
    assert judged["notes"] == ["post-flight gloo: in host memory: recorded, not judged"]
    fast = {"mpi": {"device": "cuda", "bytes": 1 << 30, "busbw_gbs": 45.0, "ranks": 4}}
    assert health.judge_postflight(fast, readings)["failed"] == []
    small = {"mpi": {"device": "cuda", "bytes": 16 << 20, "busbw_gbs": 3.0, "ranks": 4}}
    assert "recorded, not judged" in health.judge_postflight(small, readings)["notes"][0]


def test_up_accept_measures_after_a_converge_that_ended_well_and_exits_1_naming_the_culprit(
        hosts, rendered, capsys, monkeypatch, measured) -> None:
    from hvdcluster.cli import up

    monkeypatch.setattr(up, "_converge", lambda args: 0)  # a converge that ended well
    fake_read(monkeypatch, {"gpu01": reading(), "gpu02": reading()})
    argv = ["up", str(hosts), "-o", str(rendered), "--accept", "--gpus-per-node", "1", "--floor", "10",
            "--transport", "IB", "--size", "64M"]
    assert cli.main(argv) == 1
    out = capsys.readouterr().out
    assert "acceptance: nccl-tests over 2 nodes" in out and "not accepted: gpu01, gpu02 (pair)" in out
    monkeypatch.setattr(up, "_converge", lambda args: 1)
    assert cli.main(argv) == 1
    assert "acceptance not run: the converge did not end well" in capsys.readouterr().out


def test_up_accept_json_is_the_converges_document_with_the_acceptance_in_it(hosts, rendered, capsys, monkeypatch,
                                                                            measured) -> None:
    from hvdcluster.cli import up

    def converged(args):
        print(json.dumps({"cluster": "c1", "rc": 0, "ok": True, "health": {"not_ready": []}}))
        return 0

    monkeypatch.setattr(up, "_converge", converged)
    fake_read(monkeypatch, {"gpu01": reading(), "gpu02": reading()})
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--accept", "--json", "--gpus-per-node", "1", "--floor",
                     "10", "--transport", "IB", "--size", "64M"]) == 1
    captured = capsys.readouterr()
    doc = json.loads(captured.out)  # one document on stdout; the report went to stderr
    assert doc["ok"] and doc["health"] == {"not_ready": []}
    assert doc["acceptance"]["culprit"]["kind"] == "pair" and not doc["acceptance"]["passed"]
    assert "acceptance: nccl-tests over 2 nodes" in captured.err
