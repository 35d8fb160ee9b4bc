"""The CLI's contract: one located line and exit code 2 for bad input, nothing written or touched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hvdcluster import cli, spec

BAD = sorted((Path(__file__).parent / "bad_hosts").glob("*.yaml"))


@pytest.mark.parametrize("command", ["inventory", "up"])
@pytest.mark.parametrize("case", BAD[:: max(1, len(BAD) // 8)], ids=lambda p: p.stem)
def test_bad_hosts_file_exits_2_with_one_located_line_and_touches_nothing(
    case: Path, command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "inv"
    assert cli.main([command, str(case), "-o", str(out_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith(f"hvdcluster: {case}:")
    assert not out_dir.exists()


def test_missing_hosts_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["up", str(tmp_path / "nope.yaml"), "-o", str(tmp_path / "inv")]) == 2
    assert "nope.yaml" in capsys.readouterr().err


def test_init_writes_an_example_that_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_ed25519").write_text("key\n")
    target = tmp_path / "hosts.yaml"
    assert cli.main(["init", str(target)]) == 0
    loaded = spec.load(target)
    assert loaded.cluster == "lab-a"
    assert [h.name for h in loaded.hosts] == ["ip-192-168-3-3", "gpu02"]


def test_init_refuses_to_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "hosts.yaml"
    target.write_text("mine\n")
    assert cli.main(["init", str(target)]) == 2
    assert target.read_text() == "mine\n"
    assert "--force" in capsys.readouterr().err


def test_inventory_command_writes_the_cluster_folder(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("cluster: c1\nhosts: [10.0.0.1, 10.0.0.2]\n")
    assert cli.main(["inventory", str(hosts), "-o", str(tmp_path / "inv")]) == 0
    assert (tmp_path / "inv" / "c1" / "hosts.yml").is_file()


def test_up_with_an_impossible_stack_exits_2_listing_every_conflict_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text('cluster: c1\nhosts: [10.0.0.1]\nstack:\n  cuda: "12.4"\n  driver: "470"\n  gcc: "13"\n'
                     '  mpi: {version: "3.1.3"}\n')
    assert cli.main(["up", str(hosts), "-o", str(tmp_path / "inv")]) == 2
    err = capsys.readouterr().err
    for rule in ("cuda-needs-driver", "horovod-vs-gcc", "openmpi-known-bad"):
        assert rule in err
    assert not (tmp_path / "inv").exists()


def test_plan_prints_the_resolved_stack_with_reasons(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text('cluster: c1\nhosts: [10.0.0.1]\nstack: {python: {packages: ["torch==2.13.0"]}}\n')
    assert cli.main(["plan", str(hosts)]) == 0
    out = capsys.readouterr().out
    assert "torch==2.13.0" in out and "horovod patches: cxx17" in out and "why:" in out
    assert cli.main(["plan", str(hosts), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["stack"]["horovod"]["controllers"] == ["mpi", "gloo"] and doc["patches"] == ["cxx17"]
