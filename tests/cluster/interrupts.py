"""Runs of `up` cut short at a chosen moment on a node (test_train.py's runs cut short): the moments, the kills on
the node that go with them, and `interrupt_up`."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.cluster.conftest import Cli
from tests.lab.cluster import Lab

# The tar that unpacks the env beside the prefix is running (not its folder: a run killed before leaves one behind)
ENV_UNPACKING = "pgrep -f '[t]ar -C /opt/hvd/.env.hvd-new' >/dev/null"
# ([p]ip, [t]ar: the pattern must not match the shell that runs pgrep)
WHEEL_INSTALLING = "pgrep -f '[p]ip install --no-deps --no-index --force-reinstall'"
# What a dropped connection or a crash does on the node: the unpacking tar and the module above it die.
KILL_UNPACK = ("p=$(pgrep -f '[t]ar -C /opt/hvd/.env.hvd-new' | head -n1) && "
               "kill -KILL $p $(ps -o ppid= -p $p)")
KILL_INSTALL = "pkill -KILL -f '[p]ip install --no-deps --no-index --force-reinstall'"


WATCH_PID = "/run/hvd-test-watch.pid"


def interrupt_up(cli: Cli, lab: Lab, node: int, when: str, sig: signal.Signals, on_node: str | None,
                 log: Path) -> None:
    """Start `up`, and the moment `when` succeeds on the node, send `sig` to the controller (hvdcluster,
    ansible-playbook and its ssh clients: the whole process group). With `on_node` (a kill on the node that
    succeeds only when it found its process), that kill is the condition itself: it runs until it found and killed
    the process, then the controller gets `sig` - so a hard case is never a controller kill alone.

    The condition is polled on the node by one shell loop (every 50 ms), not by a `docker exec` per try: a run on
    this 2-core machine is slowed by nothing but the run itself, and the moment is caught sooner."""
    loop = f"echo $$ > {WATCH_PID}; until {on_node or when}; do sleep 0.05; done"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(cli.bin / "hvdcluster"), "up", "hosts.yaml"], cwd=cli.cwd, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        watch = subprocess.Popen(["docker", "exec", lab.container(node), "timeout", "900", "sh", "-c", loop],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while proc.poll() is None and watch.poll() is None:
                time.sleep(0.05)
            if watch.returncode != 0:
                pytest.fail(f"up ended (rc {proc.returncode}) before `{when}` held on node{node}: {log.read_text()[-3000:]}")
            os.killpg(proc.pid, sig)
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            if watch.poll() is None:  # the loop on the node must not outlive this run (it would kill the next one's)
                lab.exec(node, "sh", "-c", f"kill $(cat {WATCH_PID}) 2>/dev/null; true")
                watch.wait(timeout=30)
    assert proc.returncode != 0, "the interrupted run reported success"
