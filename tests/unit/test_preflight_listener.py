"""The pre-flight's probe listener (hvd_preflight's __hvd_preflight_listener, which its python3 look starts; its own
script run here on loopback): a pre-flight run again soon after one whose listener some peer never reached (a
firewall being fixed) finds the port still held by that listener, which ends after its next connection or at its
deadline. The new listener must take the port over then, so the peers' probes (each retried for 5 s: hvd_host.tcp)
reach one of them."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_host

ROOT = Path(__file__).resolve().parents[2]


def listener_script() -> str:
    return yaml.safe_load((ROOT / "roles" / "hvd_preflight" / "vars" / "main.yml").read_text())[
        "__hvd_preflight_listener"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listen(port: int, wanted: int, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", listener_script(), str(port), str(wanted), str(seconds)],
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # until something listens there (this one, or the one before it)
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0 or proc.poll() is not None:
                break
        time.sleep(0.05)
    return proc


def test_a_listener_ends_after_the_connections_it_waits_for() -> None:
    port = free_port()
    first = listen(port, 1, 30)  # the readiness probe above was its one connection
    assert first.wait(timeout=10) == 0, first.stderr.read()


def test_a_listener_takes_over_the_port_an_earlier_one_still_holds() -> None:
    port = free_port()
    old = listen(port, 3, 5)  # an earlier run's, waiting for three peers: the readiness probe was one
    new = listen(port, 2, 30)  # this run's, started while the old one still holds the port (the probe: the old's)
    try:
        time.sleep(1)  # long enough for a listener that dies on the held port to have died
        assert new.poll() is None, new.stderr.read()  # it waits for the port, it does not die on it
        # The old one takes the next connection, then ends at its deadline; every probe still finds a listener.
        assert hvd_host.tcp("127.0.0.1", port, 5) == ""
        assert old.wait(timeout=10) == 0
        assert hvd_host.tcp("127.0.0.1", port, 5) == ""
        assert hvd_host.tcp("127.0.0.1", port, 5) == ""
        assert new.wait(timeout=10) == 0, new.stderr.read()  # the two it waited for came to it
    finally:
        for proc in (old, new):
            proc.kill()
            proc.wait()
