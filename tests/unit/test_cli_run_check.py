"""`run` and `check`: run's arguments judged against hosts.yaml and the inventory before any node is contacted,
the launch gate (nodes unlike each other are not launched on), and check's drift report and exit codes. The
nodes' reading is given (cli_fakes.fake_reading), never read over SSH."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from hvdcluster import cli, launch
from tests.unit.cli_fakes import SHARED, _refused, fake_launches, fake_reading


# ------------------------------------------------------------------------------------------ run's arguments


@pytest.mark.parametrize("np", ["0", "-1"])
def test_run_with_fewer_than_one_process_exits_2_before_reading_anything(np: str, tmp_path: Path, capsys) -> None:
    err = _refused(["run", str(tmp_path / "none.yaml"), "-np", np, "--print", "--", "python", "x.py"],
                   tmp_path, capsys, "-np must be at least 1")
    assert f"(got {np})" in err


@pytest.fixture
def no_ssh(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Fail the test on any contact with a node; returns the commands that would have run."""
    from hvdcluster import launch

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a node was contacted: {args}")

    from hvdcluster import nodestate

    monkeypatch.setattr(launch, "fabric_interface", refuse)
    monkeypatch.setattr(launch.subprocess, "run", refuse)
    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(nodestate, "read", refuse)
    return []


def test_run_print_validates_against_the_inventory_without_contacting_a_node(
    hosts: Path, rendered: Path, no_ssh: list, capsys
) -> None:
    capsys.readouterr()
    assert cli.main(["run", str(hosts), "-o", str(rendered), "-np", "3", "--print", "--", "python",
                     "t.py"]) == 0
    out = capsys.readouterr()
    assert "horovodrun -np 3 -H gpu01:2,gpu02:2" in out.out
    assert "fabric interface is read from gpu01 when the job starts" in out.err


def test_run_print_uses_the_interface_the_inventory_names(hosts: Path, rendered: Path, no_ssh: list, capsys) -> None:
    (rendered / "c1" / "group_vars" / "all" / "local.yml").write_text("hvd_fabric_interface: ib0\n")
    capsys.readouterr()
    assert cli.main(["run", str(hosts), "-o", str(rendered), "--print", "--", "./job.sh"]) == 0
    assert f"--network-interfaces ib0 {shlex.join(launch.SAME_IMPORTS)} ./job.sh" in capsys.readouterr().out


@pytest.mark.parametrize("print_only", [["--print"], []])
def test_run_with_more_processes_than_slots_exits_2_without_contacting_a_node(
    hosts: Path, rendered: Path, no_ssh: list, capsys, print_only: list[str]
) -> None:
    capsys.readouterr()
    _refused(["run", str(hosts), "-o", str(rendered), "-np", "5", *print_only, "--", "python", "t.py"],
             rendered, capsys, "-np 5 is more than the 4 slots")


def test_run_without_an_inventory_exits_2(hosts: Path, tmp_path: Path, no_ssh: list, capsys) -> None:
    _refused(["run", str(hosts), "-o", str(tmp_path / "inv"), "--print", "--", "x"], tmp_path, capsys,
             "no inventory yet")


def test_run_takes_hosts_first_like_every_command_and_the_job_after_dashes(
    hosts: Path, rendered: Path, no_ssh: list, capsys
) -> None:
    capsys.readouterr()
    argv = ["-o", str(rendered), "--print", "--", "python", "other.yaml", "--hosts", "x.yaml", "--", "-np", "9"]
    assert cli.main(["run", str(hosts), *argv]) == 0
    out = capsys.readouterr()
    assert (f"horovodrun -np 4 -H gpu01:2,gpu02:2 {shlex.join(launch.SAME_IMPORTS)} /opt/hvd/env/bin/python other.yaml "
            "--hosts x.yaml -- -np 9'") in out.out
    assert "deprecated" not in out.err
    assert cli.main(["run", "--print", "-o", str(rendered), str(hosts), "--", "python", "other.yaml"]) == 0  # anywhere
    assert f"gpu02:2 {shlex.join(launch.SAME_IMPORTS)} /opt/hvd/env/bin/python other.yaml'" in capsys.readouterr().out


def test_run_hosts_flag_is_gone_and_its_refusal_says_what_to_write(hosts: Path, rendered: Path, no_ssh: list,
                                                                   capsys) -> None:
    capsys.readouterr()
    err = _refused(["run", "--hosts", str(hosts), "-o", str(rendered), "--print", "--", "python", "t.py"],
                   rendered, capsys, "run: --hosts is not an option of run", "hosts.yaml is HOSTS",
                   "write `hvdcluster run HOSTS [options] -- python train.py --hosts`")
    assert "deprecated" not in err


def test_run_without_hosts_reads_the_hosts_yaml_here(hosts: Path, rendered: Path, no_ssh: list, capsys,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(hosts.parent)
    capsys.readouterr()
    assert cli.main(["run", "-o", str(rendered), "--print", "--", "python", "t.py"]) == 0
    out = capsys.readouterr()
    assert "horovodrun -np 4 -H gpu01:2,gpu02:2" in out.out and "deprecated" not in out.err
    monkeypatch.chdir(rendered)
    _refused(["run", "-o", str(rendered), "--print", "--", "python", "t.py"], rendered, capsys, "hosts.yaml")


# ------------------------------------------------------------------------------------------ check and the launch gate


def test_run_gate_refuses_a_node_whose_env_differs_naming_it_and_no_gate_launches(
    hosts: Path, rendered: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    odd = {**SHARED, "env.dist.torch": "2.12.0 bbbb"}
    fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": odd})
    launched = fake_launches(monkeypatch)
    capsys.readouterr()
    assert cli.main(["run", str(hosts), "-o", str(rendered), "--", "python", "t.py"]) == 1
    err = capsys.readouterr().err
    assert "not launching" in err and "gpu02" in err and "env.dist.torch" in err and not launched
    assert cli.main(["run", str(hosts), "-o", str(rendered), "--no-gate", "--", "python", "t.py"]) == 0
    assert len(launched) == 3 and "horovodrun" in launched[1][-1]


def test_run_gate_lets_identical_nodes_launch(hosts: Path, rendered: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": dict(SHARED)})
    launched = fake_launches(monkeypatch)
    assert cli.main(["run", str(hosts), "-o", str(rendered), "--", "python", "t.py"]) == 0
    assert len(calls) == 1 and len(launched) == 3
    # the job lease on both nodes before the launch, and taken back after it
    (look, hosts_, put, drop), job, (look2, hosts2, put2, drop2) = launched
    assert (look, hosts_, drop) == ("look", ["gpu01", "gpu02"], []) and put.startswith("job-")
    assert "horovodrun" in job[-1] and (look2, hosts2, put2, drop2) == ("look", ["gpu01", "gpu02"], None, [put])


def test_run_takes_gpu_counts_and_the_fabric_interface_from_the_gates_read(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Slots left open in hosts.yaml are one per GPU found, and horovodrun is given the interface hvd_base found:
    both come from the node states the gate read, with no second round of SSH to the nodes."""
    from hvdcluster import launch

    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("cluster: c1\nhosts:\n  - {name: gpu01, address: 10.0.0.1}\n"
                     "  - {name: gpu02, address: 10.0.0.2, slots: 1}\n")
    assert cli.main(["inventory", str(hosts), "-o", str(tmp_path / "inv")]) == 0
    calls = fake_reading(monkeypatch, {"gpu01": {**SHARED, "gpu.count": 4, "base.fabric_interface": "ib0"},
                                       "gpu02": {**SHARED, "gpu.count": 8, "base.fabric_interface": "ib1"}})

    def no_second_read(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a node was read again: {args}")

    monkeypatch.setattr(launch, "fabric_interface", no_second_read)
    monkeypatch.setattr(launch, "gpu_counts", no_second_read)
    launched = fake_launches(monkeypatch, interface=None)
    assert cli.main(["run", str(hosts), "-o", str(tmp_path / "inv"), "--", "python", "t.py"]) == 0
    assert len(calls) == 1 and len(launched) == 3
    remote = launched[1][-1]
    assert "-np 5 -H gpu01:4,gpu02:1 " in remote and "--network-interfaces ib0 " in remote, remote


def test_check_exits_1_naming_the_drifted_node_and_0_in_sync(
    hosts: Path, rendered: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    root = rendered / "c1"
    (root / "state").mkdir()
    for node in ("gpu01", "gpu02"):
        (root / "state" / f"{node}.json").write_text(json.dumps({"state": SHARED}))
    fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": {**SHARED, "env.files": "missing: x.py"}})
    capsys.readouterr()
    assert cli.main(["check", str(hosts), "-o", str(rendered), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["in_sync"] == ["gpu01"] and [d["item"] for d in doc["drifted"]["gpu02"]] == ["env.files"]
    assert doc["drifted"]["gpu02"][0]["role"] == "hvd_pyenv"
    fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": dict(SHARED)})
    assert cli.main(["check", str(hosts), "-o", str(rendered)]) == 0
    assert "in sync" in capsys.readouterr().out


def test_check_names_an_unreachable_node_and_exits_1(hosts: Path, rendered: Path, monkeypatch, capsys) -> None:
    fake_reading(monkeypatch, {"gpu01": dict(SHARED)}, {"gpu02": "unreachable: no route"})
    capsys.readouterr()
    assert cli.main(["check", str(hosts), "-o", str(rendered)]) == 1
    assert "gpu02" in capsys.readouterr().out


def test_check_without_an_inventory_or_with_an_unknown_host_exits_2(hosts: Path, tmp_path: Path, rendered: Path,
                                                                    no_ssh: list, capsys) -> None:
    _refused(["check", str(hosts), "-o", str(tmp_path / "none")], tmp_path, capsys, "no inventory yet")
    _refused(["check", str(hosts), "-o", str(rendered), "--limit", "gpu9"], rendered, capsys, "unknown host")


def test_check_deep_asks_every_node_to_hash_its_env(hosts: Path, rendered: Path, monkeypatch, capsys) -> None:
    calls = fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": dict(SHARED)})
    cli.main(["check", str(hosts), "-o", str(rendered), "--deep"])
    assert [c[2:] for c in calls] == [("deep",)]
