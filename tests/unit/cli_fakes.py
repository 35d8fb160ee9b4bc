"""What the command's unit tests share (test_cli.py, test_cli_run_check.py, test_cli_lock.py, test_up_fast_path.py,
test_bandwidth_cli.py): a refusal checked to write nothing, stand-ins for Ansible (the playbook run, the
tracked run of site.yml), the nodes' reading, the job leases and the launches over SSH."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from hvdcluster import cli


def _listing(root: Path) -> dict[str, tuple[int, bytes]]:
    """Every path under ``root`` with its mode and content: equal before and after means nothing was written."""
    out: dict[str, tuple[int, bytes]] = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        content = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
        out[str(path.relative_to(root))] = (st.st_mode, content)
    return out


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("hvdcluster: ")
    return err


def _refused(argv: list[str], root: Path, capsys: pytest.CaptureFixture[str], *named: str) -> str:
    """``argv`` exits 2 with one line naming ``named``, and nothing under ``root`` changed."""
    before = _listing(root)
    assert cli.main(argv) == 2
    err = _one_line_error(capsys)
    for text in named:
        assert text in err, err
    assert _listing(root) == before
    return err


def _fake_run(calls: list[dict]) -> object:
    from hvdcluster.runner import RunResult

    def run_playbook(root: Path, playbook: str, **kwargs: object) -> RunResult:
        calls.append({"root": root, "playbook": playbook, **kwargs})
        return RunResult(rc=0, status="successful", log=root / "runs" / "stdout", artifacts=root / "runs")

    return run_playbook


# The nodes are read by playbooks/state.yml through ansible-runner (tests/cluster covers that for real); here the
# reading is given, to prove what the commands make of it.

SHARED = {"env.dist.torch": "2.13.0 aaaa", "env.lock": "l1", "env.key": "k1", "horovod.version": "0.28.1",
          "horovod.record": "r1", "horovod.key": "h1", "mpi.version": "4.1.4", "nccl.version": "absent",
          "nccl.header": "absent", "os.release": "debian 12", "os.kernel": "6.1", "env.files": "ok"}


def fake_reading(monkeypatch: pytest.MonkeyPatch, found: dict, unreachable: dict | None = None) -> list:
    from hvdcluster import nodestate

    calls: list = []

    def read(root, limit=None, hosts=(), deep=False, health=False):  # health: the quick read `up` adds (no reading)
        calls.append((root, limit) if not deep else (root, limit, "deep"))
        return nodestate.Reading(found=found, unreachable=unreachable or {}, log="log", seconds=0.1)

    monkeypatch.setattr(nodestate, "read", read)
    return calls


def fake_leases(monkeypatch: pytest.MonkeyPatch, launched: list) -> list:
    """The job leases' node side (jobs.look: one SSH per node, tests/cluster runs it for real), as calls in order
    among the launches: ('look', hosts, put file, drop files)."""
    from hvdcluster import jobs

    def look(inv, hosts, *, put=None, drop=(), timeout=30):
        launched.append(("look", list(hosts), jobs.file_name(put) if put else None, list(drop)))
        return {h: jobs.Look(h) for h in hosts}

    monkeypatch.setattr(jobs, "look", look)
    return launched


def fake_launches(monkeypatch: pytest.MonkeyPatch, interface: str | None = "eth0") -> list:
    """`run`'s node side as calls in order (:func:`fake_leases`, then each SSH launch's argv), every launch exiting
    0; the fabric interface read answers ``interface`` (None: left as it is)."""
    from hvdcluster import launch

    launched: list = []
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: launched.append(argv) or
                        subprocess.CompletedProcess(argv, 0))
    fake_leases(monkeypatch, launched)
    if interface is not None:
        monkeypatch.setattr(launch, "fabric_interface", lambda inv, host: interface)
    return launched


class FakeRun:
    """Stands in for ansible-runner's run (no node here): records what `up` asked for, reports every node fine and
    hands back, as the run's events, the read-back of site.yml's last play (``after``: node -> state)."""

    def __init__(self) -> None:
        self.calls: list[dict] = []
        self.after: dict[str, dict] = {}

    def __call__(self, root, cluster, console, playbook, events=None, **kw):
        from hvdcluster import nodestate
        from hvdcluster.progress import Tracker

        # what `up` asked for beyond a plain run (no limit, tags, check or diff, no extra variables)
        self.calls.append({"playbook": playbook, **{k: v for k, v in kw.items() if v not in (None, False, {})}})
        for node, state in self.after.items():
            (events if events is not None else []).append({"event": "runner_on_ok", "event_data": {
                "host": node, "task": nodestate.STATE_TASK, "res": {"state": state}}})
        tracker = Tracker.for_hosts([h.name for h in cluster.hosts])
        tracker.finished = True
        return tracker, type("Result", (), {"rc": 0, "log": root / "log", "status": "successful"})()


def record_converged(root: Path) -> None:
    """``root``'s cluster as a converge from these very inputs leaves it: every node's desired state on record."""
    from hvdcluster import nodestate

    (root / "state").mkdir()
    for node in ("gpu01", "gpu02"):
        (root / "state" / f"{node}.json").write_text(json.dumps({"state": SHARED}))
    nodestate.record_inputs(root, nodestate.inputs_digest(root))
