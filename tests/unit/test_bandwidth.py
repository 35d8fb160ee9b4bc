"""What `health --full` measures and how it judges (issue 52, items 2-5), on the project's own fixtures.

- Floors: plugins/module_utils/hvd_bandwidth.py's run_floor per link kind (NVLink through NVSwitch, NVLink between two
  GPUs, NVLink without NVSwitch among more, PCIe, InfiniBand ports), each term with its source.
- The bisection (culprit.find_culprit) on simulated measurements: which runs fail is decided by a model of the
  cluster (slow nodes, slow links), never by a real GPU.
- nccl-tests runs judged (bandwidth.Meter) on outputs we wrote in nccl-tests' documented format
  (tests/unit/plugins/fixtures/gpu, its README says what each stands for), returned by a stand-in for the SSH to the
  node (bandwidth_fakes.runner).

PCIe ACS and the IOMMU: test_pcie_acs_iommu.py; the commands (`health --full`, `up`'s health read, `up --accept`,
`run`'s gate): test_bandwidth_cli.py.
"""

from __future__ import annotations

import pytest
from ansible_collections.hvd.cluster.plugins.module_utils import (
    hvd_bandwidth,
    hvd_health,
    hvd_health_gpu,
    hvd_health_net,
)

from hvdcluster import bandwidth, culprit
from tests.unit.bandwidth_fakes import (
    A100_4_Q,
    H100_Q,
    IB_HDR4,
    IB_NDR,
    L4_Q,
    NVLINK_A100,
    cpu_links,
    ib,
    nvlinks,
    perf,
    read,
    runner,
)
from tests.unit.health_readings import pci, reading


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
