"""hvd_lease in a real ansible-playbook run: the lease is held by the run's ansible-playbook process, and a run
killed while it holds one does not block the next run.

Under ansible-test units these run in the controller's context (this folder is neither modules/ nor
module_utils/, whose tests get Ansible's module_utils only, no ansible-playbook).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ansible_collections.hvd.cluster.tests.unit.plugins.support import ANSIBLE_PLAYBOOK, ROOT


def playbook(tmp_path: Path, name: str, tasks: list) -> Path:
    path = tmp_path / f"{name}.yml"
    path.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    return path


def ansible_playbook(book: Path, **popen) -> subprocess.Popen:
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
    argv = [ANSIBLE_PLAYBOOK, "-i", "localhost,", "-c", "local",
            "-e", f"ansible_python_interpreter={sys.executable}", str(book)]
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            **popen)


def kill_every_process_of(book: Path) -> None:
    """SIGKILL every process running ``book``: Ansible starts each task's worker in a session of its own, which a
    kill of the run's process group does not reach (left alone, it outlives the test)."""
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(book).encode() in (proc / "cmdline").read_bytes().split(b"\0"):
                os.kill(int(proc.name), signal.SIGKILL)
        except OSError:
            pass  # gone meanwhile


def test_a_run_holds_the_lease_by_its_ansible_playbook_pid_and_when_killed_the_next_run_takes_it_over(
        tmp_path: Path) -> None:
    entry = str(tmp_path / "cache" / "envs" / "env-k.tar.zst")
    later = tmp_path / "later-task-ran"
    book = playbook(tmp_path, "killed", [
        {"hvd.cluster.hvd_lease": {"path": entry, "run_id": "killed-run"}},
        {"ansible.builtin.file": {"path": str(later), "state": "touch", "mode": "0644"}},
        {"ansible.builtin.pause": {"seconds": 120}},
    ])
    killed = ansible_playbook(book, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not later.exists() and killed.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert later.exists(), killed.communicate()[0] if killed.poll() is not None else "no later task"
        holder = json.loads(Path(entry + ".lease").read_text())
        # The pid of the run's ansible-playbook, still alive at a later task (not the worker of the task that took it).
        assert holder["pid"] == killed.pid and holder["run_id"] == "killed-run"
        os.kill(holder["pid"], 0)
    finally:
        os.killpg(killed.pid, signal.SIGKILL)
        kill_every_process_of(book)
        killed.communicate()
    with pytest.raises(ProcessLookupError):
        os.kill(holder["pid"], 0)
    assert Path(entry + ".lease").exists()  # a killed run releases nothing...
    nxt = ansible_playbook(playbook(tmp_path, "next", [
        {"hvd.cluster.hvd_lease": {"path": entry, "run_id": "next-run", "timeout": 5}, "register": "lease"},
        {"ansible.builtin.assert": {"that": [
            "lease.acquired", "not lease.waited", "lease.took_over.run_id == 'killed-run'",
            "lease.stale_reason is search('is gone')"]}},
        {"hvd.cluster.hvd_lease": {"path": entry, "run_id": "next-run", "state": "released"}},
    ]))
    out = nxt.communicate(timeout=300)[0]
    assert nxt.returncode == 0, out  # ...and does not block the next one
    assert not Path(entry + ".lease").exists()
