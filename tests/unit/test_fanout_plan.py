"""hvd_fanout's schedule (its filter plugin) and the run report of what was carried."""

from __future__ import annotations

import math

import pytest

from hvdcluster.progress import Tracker, transfer_line, transfer_report
from tests.conftest import ROOT

from ansible_collections.hvd.cluster.plugins.filter import hvd_fanout as fanout


def nodes(n: int) -> list[str]:
    return [f"node{i:03d}" for i in range(1, n + 1)]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 16, 64, 256])
def test_with_no_holder_the_controller_sends_once_and_rounds_grow_as_log2(n: int) -> None:
    plan = fanout.hvd_fanout_plan(nodes(n), [])
    assert plan["seed"] == "node001"
    received = [plan["seed"]] + [dst for one in plan["rounds"] for dst in one]
    assert sorted(received) == nodes(n)  # every node exactly once
    assert len(plan["rounds"]) == math.ceil(math.log2(n))
    have = {plan["seed"]}
    for one in plan["rounds"]:
        assert set(one.values()) <= have  # only holders send
        assert len(set(one.values())) == len(one)  # each sends to one node per round
        have |= set(one)


def test_a_holder_means_the_controller_sends_nothing() -> None:
    plan = fanout.hvd_fanout_plan(["node2", "node3", "node4"], ["node3"])
    assert plan["seed"] == "" and plan["holders"] == ["node3"]
    assert plan["rounds"] == [{"node2": "node3"}, {"node4": "node3"}]
    assert sorted(d for one in plan["rounds"] for d in one) == ["node2", "node4"]


def test_a_node_added_to_a_converged_cluster_gets_it_in_one_round_from_a_peer() -> None:
    plan = fanout.hvd_fanout_plan(["node4"], ["node1", "node2", "node3"])
    assert plan == {"seed": "", "rounds": [{"node4": "node1"}], "holders": ["node1", "node2", "node3"]}


def test_before_the_mesh_exists_the_controller_sends_to_every_node_that_needs_it() -> None:
    plan = fanout.hvd_fanout_plan(["n1", "n2", "n3"], ["n2"], peers=False)
    assert plan == {"seed": "", "rounds": [{"n1": "controller", "n3": "controller"}], "holders": ["n2"]}
    assert fanout.hvd_fanout_plan([], [], peers=False)["rounds"] == []


def test_nothing_needed_plans_nothing() -> None:
    assert fanout.hvd_fanout_plan([], ["node1"]) == {"seed": "", "rounds": [], "holders": ["node1"]}
    assert fanout.hvd_fanout_plan([], []) == {"seed": "", "rounds": [], "holders": []}


def test_a_bad_copy_is_pulled_again_from_a_holder_that_did_not_send_a_bad_one() -> None:
    assert fanout.hvd_fanout_repair(["node3"], ["node1", "node2"], ["node1"]) == {"node3": "node2"}
    assert fanout.hvd_fanout_repair(["node3", "node4"], ["node1", "node2"], []) == {"node3": "node1", "node4": "node2"}
    assert fanout.hvd_fanout_repair(["node3"], ["node1"], ["node1"]) == {"node3": "node1"}  # the only holder
    assert fanout.hvd_fanout_repair(["node3"], [], []) == {"node3": "controller"}


def test_the_report_counts_controller_and_node_to_node_bytes() -> None:
    copies = [{"artifact": "env", "from": "controller", "to": "node1", "bytes": 3 * 2**30, "ok": True},
              {"artifact": "env", "from": "node1", "to": "node2", "bytes": 3 * 2**30, "ok": False},
              {"artifact": "env", "from": "node1", "to": "node2", "bytes": 3 * 2**30, "ok": True},
              {"artifact": "horovod", "from": "node2", "to": "node3", "bytes": 1000, "ok": True}]
    report = transfer_report(copies)
    assert (report["controller_bytes"], report["peer_bytes"], report["bad_copies"]) == (3 * 2**30, 6 * 2**30 + 1000, 1)
    line = transfer_line(report)
    assert line.startswith("Artifacts: the controller sent 3.0 GiB, nodes passed on 6.0 GiB (4 copies, 1 failed")


def test_the_tracker_reads_the_transfers_from_the_runs_stats() -> None:
    tracker = Tracker.for_hosts(["node1"])
    tracker._stats({"ok": {"node1": 3}, "artifact_data": {"hvd_transfers": [
        {"artifact": "env", "from": "controller", "to": "node1", "bytes": 10, "ok": True}, "noise"]}})
    doc = tracker.as_dict()["transfers"]
    assert doc["controller_bytes"] == 10 and doc["peer_bytes"] == 0 and len(doc["copies"]) == 1
