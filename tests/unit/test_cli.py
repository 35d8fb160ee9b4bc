"""The CLI's contract: one located line and exit code 2 for bad input, nothing written or touched.

The other commands' own contracts: test_cli_run_check.py (`run` and `check`), test_cli_lock.py (one run at a
time), test_up_fast_path.py (`up` converging only what drifted); what they share: cli_fakes.py.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from hvdcluster import cli, spec
from tests.unit.cli_fakes import _fake_run, _refused

BAD = sorted((Path(__file__).parent / "bad_hosts").glob("*.yaml"))
FIXTURES = Path(__file__).parent / "bad_hosts" / "fixtures"  # id_test: a private key's shape; ca.pem: a real cert


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
    shutil.copy(FIXTURES / "id_test", tmp_path / ".ssh" / "id_ed25519")
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
    hosts.write_text('cluster: c1\nhosts: [10.0.0.1]\nstack:\n  cuda: "12.4"\n  driver: "470"\n'
                     '  mpi: {version: "3.1.3"}\n  python: {version: "3.12"}\n')
    assert cli.main(["up", str(hosts), "-o", str(tmp_path / "inv")]) == 2
    err = capsys.readouterr().err
    for rule in ("cuda-needs-driver", "horovod-vs-python", "openmpi-known-bad"):
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


def test_no_control_sequence_in_a_file_reaches_the_terminal_through_any_message(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A hosts.yaml whose cluster name and an unknown key carry ESC/OSC/CSI sequences and a carriage return: the
    error printed names them as text and holds no raw control byte (every stream of the CLI passes printable())."""
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("cluster: \"a\\e]0;pwned\\aq\"\nhosts: [10.0.0.1]\n\"x\\e[2J\\r\\x9b1A\": 1\n")
    assert cli.main(["up", str(hosts), "-o", str(tmp_path / "inv")]) == 2
    captured = capsys.readouterr()
    for text in (captured.out, captured.err):
        assert not any(ch in text for ch in "\x1b\x9b\x07\r\x00"), repr(text)
    assert captured.err.startswith(f"hvdcluster: {hosts}:") and len(captured.err.strip().splitlines()) == 1
    assert sys.stdout.__class__.__name__ != "PrintableStream"  # the guard ends with the command


# --------------------------------------------------------------------------------------------- arguments


def test_init_into_a_missing_folder_exits_2_and_writes_nothing(tmp_path: Path, capsys) -> None:
    _refused(["init", str(tmp_path / "nowhere" / "hosts.yaml")], tmp_path, capsys, "init:", "does not exist")


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_init_onto_a_folder_exits_2_and_writes_nothing(tmp_path: Path, capsys, force: list[str]) -> None:
    (tmp_path / "site").mkdir()
    _refused(["init", str(tmp_path / "site"), *force], tmp_path, capsys, "init:", "is a folder")


def test_init_never_writes_into_a_fifo_even_with_force(tmp_path: Path, capsys) -> None:
    os.mkfifo(tmp_path / "hosts.yaml")
    _refused(["init", str(tmp_path / "hosts.yaml"), "--force"], tmp_path, capsys, "not a regular file")


@pytest.mark.parametrize("command", ["inventory", "up", "preflight"])
def test_output_naming_an_existing_file_exits_2_and_writes_nothing(
    command: str, hosts: Path, tmp_path: Path, capsys
) -> None:
    (tmp_path / "inv").write_text("mine\n")
    _refused([command, str(hosts), "-o", str(tmp_path / "inv")], tmp_path, capsys, "-o/--output", "is a file")


@pytest.mark.parametrize("command", ["inventory", "up"])
def test_output_below_a_file_exits_2(command: str, hosts: Path, tmp_path: Path, capsys) -> None:
    (tmp_path / "file").write_text("mine\n")
    _refused([command, str(hosts), "-o", str(tmp_path / "file" / "inv")], tmp_path, capsys, "-o/--output")


def test_output_in_an_unwritable_folder_exits_2(
    hosts: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    if os.geteuid() == 0:  # root may write anywhere: answer as the kernel answers a user
        real_access = os.access
        monkeypatch.setattr(os, "access", lambda path, mode, **kw: False if Path(path) == locked
                            else real_access(path, mode, **kw))
    _refused(["up", str(hosts), "-o", str(locked / "inv")], tmp_path, capsys, "-o/--output", "is not writable")


def test_an_inventory_folder_that_is_a_file_exits_2(hosts: Path, tmp_path: Path, capsys) -> None:
    (tmp_path / "inv").mkdir()
    (tmp_path / "inv" / "c1").write_text("not a folder\n")
    _refused(["inventory", str(hosts), "-o", str(tmp_path / "inv")], tmp_path, capsys, "is a file, not an inventory")


@pytest.mark.parametrize("command", ["up", "preflight"])
@pytest.mark.parametrize(
    ("limit", "named"),
    [("nosuchhost", "unknown host 'nosuchhost'"), ("gpu01,GPU-02", "unknown host 'GPU-02' (did you mean 'gpu02'?"),
     ("gpu9*", "'gpu9*' matches no host"), ("~gpu.*", "give host names"), ("gpu01,,gpu02", "an empty host name"),
     ("gpu[0]", "give host names"), ("@retry", "give host names")],
)
def test_limit_naming_no_host_of_hosts_yaml_exits_2_before_ansible_starts(
    command: str, limit: str, named: str, hosts: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hvdcluster import runner

    monkeypatch.setattr(runner, "run_playbook", lambda *a, **k: pytest.fail("ansible was started"))
    _refused([command, str(hosts), "-o", str(tmp_path / "inv"), "--limit", limit], tmp_path, capsys, "--limit", named)
    assert not (tmp_path / "inv").exists()


@pytest.mark.parametrize(
    ("tags", "named"),
    [("nosuchrole", "unknown tag 'nosuchrole'"), ("base", "did you mean 'hvd_base'?"),
     ("hvd_base,hvd_sshmesh", "unknown tag 'hvd_sshmesh'"), ("hvd_base,", "an empty tag"),
     # building blocks other roles include select nothing on their own: refused, not silently a no-op
     ("hvd_fanout", "unknown tag 'hvd_fanout'"), ("hvd_gpu_component", "unknown tag 'hvd_gpu_component'")],
)
def test_tags_naming_no_role_exits_2_before_ansible_starts(
    tags: str, named: str, hosts: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hvdcluster import runner

    monkeypatch.setattr(runner, "run_playbook", lambda *a, **k: pytest.fail("ansible was started"))
    err = _refused(["up", str(hosts), "-o", str(tmp_path / "inv"), "--tags", tags], tmp_path, capsys, "--tags", named)
    assert "hvd_ssh_mesh" in err or "empty" in err  # an unknown tag lists the valid ones
    assert not (tmp_path / "inv").exists()


@pytest.mark.parametrize(
    ("limit", "tags"),
    [("gpu01", None), ("gpu01,!gpu02", "hvd_base,always"), ("gpu0*", "all"), ("all", "hvd_ssh_mesh"),
     ("hvd_nodes:&gpu02", None)],
)
def test_valid_limits_and_tags_reach_ansible_unchanged(
    limit: str, tags: str | None, hosts: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hvdcluster import runner

    calls: list[dict] = []
    monkeypatch.setattr(runner, "run_playbook", _fake_run(calls))
    cli.main(["up", str(hosts), "-o", str(tmp_path / "inv"), "--limit", limit, *(["--tags", tags] if tags else [])])
    assert [(c["limit"], c["tags"]) for c in calls] == [(limit, tags)]


def test_a_usage_error_says_what_to_write_instead(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """run's job without `--`: the line says the command goes after `--`, with the command to write; any other
    unknown argument names itself and the help to read. Exit 2, nothing run."""
    assert cli.main(["run", str(tmp_path / "hosts.yaml"), "--print", "python", "train.py"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"hvdcluster: run: 'python train.py' is not an option of run: the job's command goes after `--`: "
                   f"write `hvdcluster run HOSTS [options] -- python train.py`")
    assert cli.main(["check", str(tmp_path / "hosts.yaml"), "--deeep"]) == 2
    assert capsys.readouterr().err.strip() == (
        "hvdcluster: check: unrecognized arguments: --deeep (see `hvdcluster check --help`)")
