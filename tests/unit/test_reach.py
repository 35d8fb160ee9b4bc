"""hvd_verify's reach check (roles/hvd_verify/files/reach.sh): every target, four at a time, as mpirun reaches it; a
burst refused before the key exchange tried again; every target that stays unreachable named with ssh's last line, in
the order given.

Run with a stand-in `ssh` first on PATH (it answers per target as told, and logs its arguments): an sshd that
refuses a burst (MaxStartups) cannot be made to do so on cue here. Every container suite's converge runs the script
against real sshds (the post-flight), where the success path is proven."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.conftest import ROOT

SCRIPT = ROOT / "roles" / "hvd_verify" / "files" / "reach.sh"

# Per target: how many of its first tries are refused in a burst, then ok; or a permanent error.
STAND_IN = """\
#!/bin/sh
echo "$*" >> "$HVD_TEST_LOG"
target=$(printf '%s\\n' "$@" | sed -n 7p)
n=$(grep -c " $target true\\$" "$HVD_TEST_LOG")
case $target in
  flaky) [ "$n" -le 2 ] && { echo 'kex_exchange_identification: read: Connection reset by peer' >&2; exit 255; } ;;
  burst) echo 'kex_exchange_identification: Connection closed by remote host' >&2; exit 255 ;;
  gone) printf 'ssh: connect to host gone port 22: No route to host\\n\\n' >&2; exit 255 ;;
  changed) echo 'Host key verification failed.' >&2; exit 255 ;;
esac
exit 0
"""


def _reach(tmp_path: Path, *targets: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    (bin_ / "ssh").write_text(STAND_IN)
    (bin_ / "ssh").chmod(0o755)
    (bin_ / "sleep").symlink_to("/bin/true")  # the two-second pauses between tries, skipped
    log = tmp_path / "ssh.log"
    log.unlink(missing_ok=True)
    env = {**os.environ, "PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}", "HVD_TEST_LOG": str(log)}
    proc = subprocess.run(["sh", "-c", SCRIPT.read_text(), "reach", *targets], env=env, capture_output=True, text=True)
    return proc, log.read_text().splitlines() if log.exists() else []


def test_every_target_is_reached_in_batch_mode_with_strict_host_keys(tmp_path: Path) -> None:
    proc, calls = _reach(tmp_path, "node2", "10.0.0.2", "node3")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert sorted(calls) == [f"-o BatchMode=yes -o StrictHostKeyChecking=yes -o ConnectTimeout=10 {t} true"
                             for t in ("10.0.0.2", "node2", "node3")]


def test_a_burst_refused_before_the_key_exchange_is_tried_again(tmp_path: Path) -> None:
    proc, calls = _reach(tmp_path, "flaky", "node3")
    assert proc.returncode == 0, proc.stderr
    assert sorted(c.split()[-2] for c in calls) == ["flaky", "flaky", "flaky", "node3"]


def test_each_unreachable_target_is_named_with_sshs_last_line_and_the_rest_still_tried(tmp_path: Path) -> None:
    proc, calls = _reach(tmp_path, "gone", "node2", "changed", "burst")
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "gone: ssh: connect to host gone port 22: No route to host",
        "changed: Host key verification failed.",
        "burst: kex_exchange_identification: Connection closed by remote host"]
    # a refused burst: four tries in all, then named; other errors: one try
    assert sorted(c.split()[-2] for c in calls) == sorted(["gone", "node2", "changed", *["burst"] * 4])


def test_four_targets_are_reached_at_once_and_no_more(tmp_path: Path) -> None:
    """Ten targets, each ssh taking 0.4 s: the stand-in logs when each starts and ends; never more than four at once,
    and they overlap."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    log = tmp_path / "spans.log"
    (bin_ / "ssh").write_text('#!/bin/sh\necho "+ $7" >> "$HVD_TEST_LOG"\n/bin/sleep 0.4\n'
                              'echo "- $7" >> "$HVD_TEST_LOG"\n')
    (bin_ / "ssh").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}", "HVD_TEST_LOG": str(log)}
    targets = [f"node{i}" for i in range(10)]
    proc = subprocess.run(["sh", "-c", SCRIPT.read_text(), "reach", *targets], env=env, capture_output=True,
                          text=True)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    running, most = 0, 0
    for line in log.read_text().splitlines():
        running += 1 if line.startswith("+") else -1
        most = max(most, running)
    assert most == 4, log.read_text()
    assert sorted(line.split()[1] for line in log.read_text().splitlines() if line.startswith("+")) == sorted(targets)
