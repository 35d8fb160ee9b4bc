"""The commands of issue 52 (items 2-5), on the project's own fixtures: `health --full` (JSON shape, exit codes, bad
input), the health read `up` ends with, `up --accept`, and `run`'s gate on the last health. No node is reached:
the job leases and every nccl-tests run are answered by stand-ins (cli_fakes, bandwidth_fakes.runner)."""

from __future__ import annotations

import json

import pytest

from hvdcluster import bandwidth, cli, health, nodestate
from hvdcluster.cli import stages
from tests.unit.bandwidth_fakes import H100_Q, NVLINK_A100, ib, read, runner
from tests.unit.cli_fakes import SHARED, FakeRun, fake_launches, fake_leases, fake_reading, record_converged
from tests.unit.health_readings import pci, reading


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
            events.append({"event": "runner_on_ok", "event_data": {"host": node, "task": nodestate.STATE_TASK,
                                                                   "res": {"health": found,
                                                                           "health_seconds": 0.42}}})
        return tracker, result


ECC = "nvidia-smi-q-d-ECC_h100_550.144.03_dram-uncorrectable.txt"


def test_up_ends_with_the_health_read_and_a_failing_node_is_not_ready_exit_1(hosts, rendered, capsys,
                                                                             monkeypatch) -> None:
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
