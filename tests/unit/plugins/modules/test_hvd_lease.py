"""hvd_lease: the build lease of a controller cache entry (taken, waited for, released, taken over from a run that
is gone), tested through its functions and as Ansible runs it.

These run as root (as the modules do on a node: become) against real folders and real tar/zstd.

A lease held by a real ansible-playbook run that is killed: tests/unit/plugins/plays/test_hvd_lease_play.py.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ansible_collections.hvd.cluster.tests.unit.plugins.support import root_only, run_module, sha

from ansible_collections.hvd.cluster.plugins.modules import hvd_artifact
from ansible_collections.hvd.cluster.plugins.modules import hvd_lease


ME = {"pid": os.getpid(), "start": hvd_lease.process(os.getpid())["start"]}  # a live holder: this test process


@pytest.fixture(autouse=True)
def _me_is_the_process_running_the_test() -> None:
    """ME names the process the test runs in: ansible-test units runs each test in a fork of its own (ansible_forked),
    where the process that imported this file is another one, alive but not the one asserted on."""
    global ME
    ME = {"pid": os.getpid(), "start": hvd_lease.process(os.getpid())["start"]}


def _reaped() -> dict:
    """A holder whose process has ended (and been reaped): its pid is gone."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return {"pid": proc.pid, "start": None}


def test_lease_is_created_0600_naming_the_run_and_released_by_it(tmp_path: Path) -> None:
    entry = tmp_path / "envs" / "env-k.tar.zst"
    taken = hvd_lease.acquire(str(entry), "run-a", owner=ME)
    lease = tmp_path / "envs" / "env-k.tar.zst.lease"
    assert taken["acquired"] and not taken["waited"] and not taken["entry_ready"] and taken["took_over"] is None
    assert oct(lease.stat().st_mode & 0o777) == "0o600"
    holder = json.loads(lease.read_text())
    assert (holder["run_id"], holder["pid"], holder["host"]) == ("run-a", os.getpid(), socket.gethostname())
    assert holder["started"] and holder["pid_start"] == ME["start"]
    again = hvd_lease.acquire(str(entry), "run-a", owner=ME)  # the same run asking again holds it already
    assert again["acquired"] and not again["changed"]
    assert hvd_lease.release(str(entry), "run-a")["released"] and not lease.exists()
    assert not hvd_lease.release(str(entry), "run-a")["changed"]  # nothing left to release


def test_a_lease_of_another_run_is_not_released_and_its_holder_is_named(tmp_path: Path) -> None:
    entry = tmp_path / "env.tar.zst"
    hvd_lease.acquire(str(entry), "run-a", owner=ME)
    refused = hvd_lease.release(str(entry), "run-b")
    assert not refused["released"] and not refused["changed"] and "run run-a" in refused["msg"]
    assert json.loads((tmp_path / "env.tar.zst.lease").read_text())["run_id"] == "run-a"


def test_a_second_run_waits_for_the_lease_and_is_told_the_entry_was_published(tmp_path: Path) -> None:
    entry = tmp_path / "env.tar.zst"
    hvd_lease.acquire(str(entry), "builder", owner=ME)
    seen = hvd_lease.acquire(str(entry), "waiter", wait=False, owner=ME)
    assert not seen["acquired"] and seen["holder"]["run_id"] == "builder"

    def build_and_publish() -> None:
        time.sleep(0.5)
        part = tmp_path / "env.tar.zst.part-builder"
        part.write_bytes(b"env")
        hvd_artifact.publish(str(part), str(entry), sha(b"env"))
        hvd_lease.release(str(entry), "builder")

    builder = threading.Thread(target=build_and_publish)
    builder.start()
    try:
        taken = hvd_lease.acquire(str(entry), "waiter", timeout=30, poll_interval=0.05, owner=ME)
    finally:
        builder.join()
    assert taken["acquired"] and taken["waited"] and taken["entry_ready"] and taken["took_over"] is None
    assert json.loads((tmp_path / "env.tar.zst.lease").read_text())["run_id"] == "waiter"


def test_a_second_run_whose_builder_failed_takes_the_lease_and_builds(tmp_path: Path) -> None:
    entry = tmp_path / "env.tar.zst"
    hvd_lease.acquire(str(entry), "builder", owner=ME)
    threading.Timer(0.3, hvd_lease.release, (str(entry), "builder")).start()  # released without publishing
    taken = hvd_lease.acquire(str(entry), "waiter", timeout=30, poll_interval=0.05, owner=ME)
    assert taken["acquired"] and taken["waited"] and not taken["entry_ready"]


def test_a_lease_whose_pid_is_gone_is_taken_over_and_named(tmp_path: Path) -> None:
    entry = tmp_path / "env.tar.zst"
    hvd_lease.acquire(str(entry), "killed-run", owner=_reaped())
    taken = hvd_lease.acquire(str(entry), "next-run", timeout=0, owner=ME)
    assert taken["acquired"] and not taken["waited"]
    assert taken["took_over"]["run_id"] == "killed-run" and "is gone" in taken["stale_reason"]
    assert json.loads((tmp_path / "env.tar.zst.lease").read_text())["run_id"] == "next-run"


def test_a_lease_whose_pid_is_another_process_now_is_taken_over(tmp_path: Path) -> None:
    entry = tmp_path / "env.tar.zst"
    hvd_lease.acquire(str(entry), "old-run", owner={"pid": os.getpid(), "start": "1"})  # pid reused since
    taken = hvd_lease.acquire(str(entry), "next-run", timeout=0, owner=ME)
    assert taken["took_over"]["run_id"] == "old-run" and "another process" in taken["stale_reason"]


class Clock:
    """hvd_lease's clock in a test: ``sleep`` only moves ``monotonic`` on, and is recorded."""

    def __init__(self) -> None:
        self.now, self.sleeps = 1000.0, []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    time = staticmethod(time.time)  # the age of a lease from another host: not used here


def test_a_lease_held_by_a_live_run_times_out_with_a_message_naming_the_holder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = tmp_path / "env.tar.zst"
    holder = hvd_lease.acquire(str(entry), "run-a", owner=ME)["holder"]
    clock = Clock()
    monkeypatch.setattr(hvd_lease, "time", clock)
    with pytest.raises(hvd_lease.LeaseTimeout) as failure:
        hvd_lease.acquire(str(entry), "run-b", timeout=1, poll_interval=0.25, owner=ME)
    assert clock.sleeps == [0.25] * 4  # it polled every poll_interval until the timeout, then gave up
    for part in ("run run-a", f"pid {os.getpid()}", socket.gethostname(), holder["started"], str(entry) + ".lease"):
        assert part in str(failure.value)


def test_a_lease_from_another_host_is_stale_only_after_stale_after(tmp_path: Path) -> None:
    entry = tmp_path / "env.tar.zst"
    lease = tmp_path / "env.tar.zst.lease"
    record = {"run_id": "elsewhere", "pid": 1, "host": "other-controller", "started": "then",
              "started_epoch": time.time() - 120}
    lease.write_text(json.dumps(record))
    assert not hvd_lease.acquire(str(entry), "here", wait=False, stale_after=3600, owner=ME)["acquired"]
    taken = hvd_lease.acquire(str(entry), "here", wait=False, stale_after=60, owner=ME)
    assert taken["acquired"] and taken["took_over"]["host"] == "other-controller"


def test_an_empty_lease_is_being_written_until_it_is_old(tmp_path: Path) -> None:
    entry = tmp_path / "env.tar.zst"
    lease = tmp_path / "env.tar.zst.lease"
    lease.touch()
    assert not hvd_lease.acquire(str(entry), "here", wait=False, owner=ME)["acquired"]
    os.utime(lease, (time.time() - 3600, time.time() - 3600))
    assert hvd_lease.acquire(str(entry), "here", wait=False, owner=ME)["acquired"]


def test_a_folder_entry_is_ready_once_it_holds_a_published_file(tmp_path: Path) -> None:
    entry = tmp_path / "horovod" / "k"
    entry.mkdir(parents=True)
    (entry / "horovod-0.28.1-cp311-linux_x86_64.whl.part-1").write_bytes(b"half")
    assert not hvd_lease.entry_ready(str(entry))
    part = entry / "horovod-0.28.1-cp311-linux_x86_64.whl.part-2"
    part.write_bytes(b"wheel")
    hvd_artifact.publish(str(part), str(entry / "horovod-0.28.1-cp311-linux_x86_64.whl"), sha(b"wheel"))
    assert hvd_lease.entry_ready(str(entry))
    assert hvd_lease.acquire(str(entry), "r", owner=ME)["lease"] == str(tmp_path / "horovod" / "k.lease")


def _become(uid: int) -> None:
    """The pool worker turns into ``uid`` for good. Where this Python's and the collection's files are private to root
    (/root; the 0700 folder ansible-test units runs the tests from) that user can read none of them, so what the worker
    needs is loaded first: the ascii codec hvd_holder reads the boot id with, traceback, and the collection's sources
    in linecache (mtime None: kept without a stat, as a loader's source is), which the expected LeaseError's traceback
    is formatted from to be sent back. Without them the worker dies without a word and the test hangs."""
    import codecs
    import linecache
    import traceback  # noqa: F401 - multiprocessing imports it to format a worker's failure

    codecs.lookup("ascii")
    for module in list(sys.modules.values()):
        source = getattr(module, "__file__", None) or ""
        if getattr(module, "__name__", "").startswith("ansible_collections.") and source.endswith(".py"):
            lines = Path(source).read_text().splitlines(keepends=True)
            linecache.cache[source] = (len(lines), None, lines, source)
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


@root_only
def test_a_stale_lease_of_another_user_is_never_reported_acquired_and_fails_naming_its_owner(tmp_path: Path) -> None:
    """A cache two accounts share (a sticky 1777 folder): the lease of uid 12346 cannot be opened by uid 12345, so it
    can be neither read nor replaced. Young, it is held (not acquired); stale, the run fails naming the lease, its
    owner and how to remove it; released by another run, it stays. The lease is the same file at the end."""
    import multiprocessing
    import shutil
    import tempfile

    shared = Path(tempfile.mkdtemp(dir="/tmp"))  # tmp_path's parents are root's 0700: uid 12345 could not pass
    try:
        shared.chmod(0o1777)
        entry, lease = shared / "env.tar.zst", shared / "env.tar.zst.lease"
        lease.write_text(json.dumps({"run_id": "theirs", "pid": 1, "host": "elsewhere", "started_epoch": time.time()}))
        lease.chmod(0o600)
        os.chown(lease, 12346, 12346)
        before = lease.stat()
        with multiprocessing.get_context("fork").Pool(1, initializer=_become, initargs=(12345,)) as pool:
            young = pool.apply(hvd_lease.acquire, (str(entry), "mine"), {"wait": False, "owner": ME})
            assert not young["acquired"] and not young["changed"], young
            os.utime(lease, (time.time() - 7200, time.time() - 7200))
            with pytest.raises(hvd_lease.LeaseError) as failure:
                pool.apply(hvd_lease.acquire, (str(entry), "mine"), {"stale_after": 60, "owner": ME})
            released = pool.apply(hvd_lease.release, (str(entry), "mine"))
        message = str(failure.value)
        for part in (str(lease), "stale build lease of another user (uid 12346", "remove it as uid 12346 or root",
                     f"rm {lease}"):
            assert part in message, message
        assert not released["released"] and "another user (uid 12346) holds it" in released["msg"], released
        after = lease.stat()
        assert (after.st_ino, after.st_uid) == (before.st_ino, 12346)
    finally:
        shutil.rmtree(shared)


def _take(args: tuple[str, str, dict]) -> bool:
    return hvd_lease.acquire(args[0], args[1], wait=False, owner=args[2])["acquired"]


@pytest.mark.parametrize("start", ["free", "stale"])
def test_of_runs_racing_for_a_free_or_stale_lease_exactly_one_gets_it(tmp_path: Path, start: str) -> None:
    import multiprocessing

    entry = str(tmp_path / "env.tar.zst")
    if start == "stale":
        hvd_lease.acquire(entry, "killed-run", owner=_reaped())
    with multiprocessing.get_context("fork").Pool(8) as pool:
        won = pool.map(_take, [(entry, f"run-{i}", ME) for i in range(16)])
    assert won.count(True) == 1


def test_lease_module_names_the_holder_and_changes_nothing_in_check_mode(tmp_path: Path) -> None:
    entry = str(tmp_path / "env.tar.zst")
    looked = run_module("hvd_lease", {"path": entry, "run_id": "run-a"}, check=True)
    assert looked["acquired"] and looked["changed"] and not (tmp_path / "env.tar.zst.lease").exists()
    taken = run_module("hvd_lease", {"path": entry, "run_id": "run-a"})
    assert taken["acquired"] and taken["holder"]["run_id"] == "run-a"
    busy = run_module("hvd_lease", {"path": entry, "run_id": "run-b", "wait": False})
    assert not busy["acquired"] and busy["holder"]["run_id"] == "run-a"
    late = run_module("hvd_lease", {"path": entry, "run_id": "run-b", "timeout": 0})
    assert late["failed"] and "being built by run run-a" in late["msg"]
    refused = run_module("hvd_lease", {"path": entry, "run_id": "run-b", "state": "released"})
    assert not refused["changed"] and not refused["released"] and "run run-a" in refused["msg"]
    assert run_module("hvd_lease", {"path": entry, "run_id": "run-a", "state": "released"}, check=True)["changed"]
    assert (tmp_path / "env.tar.zst.lease").exists()
    assert run_module("hvd_lease", {"path": entry, "run_id": "run-a", "state": "released"})["released"]
    assert not (tmp_path / "env.tar.zst.lease").exists()
