"""One run at a time: the inventory lock a command holds while Ansible runs, what a second command is told, and
what `run` may do beside `up --rolling`."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hvdcluster import cli, lock
from tests.unit.cli_fakes import _fake_run, _listing

HOLD = """
import sys
from hvdcluster import lock
with lock.hold(sys.argv[1], sys.argv[2]):
    print("held", flush=True)
    sys.stdin.read()
"""


@contextlib.contextmanager
def held(folder: Path, command: str = "up"):
    """A separate process holding the inventory lock of ``folder`` as ``command`` until the block ends."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(lock.__file__).parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder), command], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline().strip() == "held"
    try:
        yield proc
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)


@pytest.fixture
def holder(hosts: Path, tmp_path: Path):
    """A separate process holding the inventory lock of cluster c1 until the test ends."""
    with held(tmp_path / "inv" / "c1") as proc:
        yield proc


def test_run_reads_beside_a_roll_but_not_beside_any_other_run(tmp_path: Path) -> None:
    """`run`'s gate may read while `up --rolling` holds the folder (the roll's marks keep jobs off the nodes it
    changes); beside a plain `up` it is refused at once, naming the holder."""
    folder = tmp_path / "inv" / "c1"
    with held(folder, lock.ROLL) as roll:
        with lock.hold(folder, "run", beside=(lock.ROLL,)):
            assert lock.holder(folder)["pid"] == roll.pid  # the roll keeps it: run never took it
        with pytest.raises(lock.InventoryBusy, match="command up --rolling"):
            with lock.hold(folder, "up"):
                pass
    with held(folder, "up"):
        with pytest.raises(lock.InventoryBusy, match=r"command up\)"):
            with lock.hold(folder, "run", beside=(lock.ROLL,)):
                pass


@pytest.mark.parametrize("command", ["up", "preflight", "inventory"])
def test_a_second_run_exits_at_once_naming_the_holder_and_touches_nothing(
    command: str, hosts: Path, tmp_path: Path, holder: subprocess.Popen, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hvdcluster import runner

    monkeypatch.setattr(runner, "run_playbook", lambda *a, **k: pytest.fail("ansible was started"))
    real_flock, tries = lock.fcntl.flock, []

    def flock(fd: int, operation: int) -> None:
        tries.append(operation)
        return real_flock(fd, operation)

    monkeypatch.setattr(lock.fcntl, "flock", flock)
    before = _listing(tmp_path / "inv")
    assert cli.main([command, str(hosts), "-o", str(tmp_path / "inv")]) == 1
    assert tries == [lock.fcntl.LOCK_EX | lock.fcntl.LOCK_NB]  # one try, never waiting for the holder
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"hvdcluster: {tmp_path / 'inv' / 'c1'} is in use by pid {holder.pid} (started ")
    assert err.endswith(", command up); wait for it or stop it") and len(err.splitlines()) == 1
    assert sorted(before) == ["c1", "c1/.lock"]  # the holder's lock file, nothing else
    assert _listing(tmp_path / "inv") == before


def test_the_lock_is_released_when_its_holder_ends(
    hosts: Path, tmp_path: Path, holder: subprocess.Popen, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert lock.holder(tmp_path / "inv" / "c1")["pid"] == holder.pid
    holder.stdin.close()
    holder.wait(timeout=10)
    assert lock.holder(tmp_path / "inv" / "c1") is None
    calls: list[dict] = []
    from hvdcluster import runner

    monkeypatch.setattr(runner, "run_playbook", _fake_run(calls))
    cli.main(["up", str(hosts), "-o", str(tmp_path / "inv")])
    assert len(calls) == 1 and (tmp_path / "inv" / "c1" / "hosts.yml").is_file()


def test_the_run_holds_the_lock_while_ansible_runs(hosts: Path, tmp_path: Path, monkeypatch) -> None:
    from hvdcluster import runner

    seen: list[dict | None] = []
    monkeypatch.setattr(runner, "run_playbook", lambda root, *a, **k: seen.append(lock.holder(root)) or
                        _fake_run([])(root, *a, **k))
    cli.main(["preflight", str(hosts), "-o", str(tmp_path / "inv")])
    assert seen[0]["pid"] == os.getpid() and seen[0]["command"] == "preflight"
    assert lock.holder(tmp_path / "inv" / "c1") is None
