"""Progress and summary from a real event stream.

The events in fixtures/events_node3_down.jsonl were recorded (trimmed to the fields we read) from a real
`hvdcluster up` of the 3-node container lab with node3 stopped.
"""

from __future__ import annotations

import io
import json

import pytest
from pathlib import Path

from hvdcluster.progress import Console, Tracker, failure_message

EVENTS = [json.loads(line) for line in (Path(__file__).parent / "fixtures" / "events_node3_down.jsonl").open()]


def replay() -> tuple[Tracker, io.StringIO]:
    tracker = Tracker.for_hosts(["node1", "node2", "node3"])
    stream = io.StringIO()
    console = Console(stream, live=False)
    for event in EVENTS:
        console.update(tracker, tracker.handle(event))
    console.summary(tracker, "/logs/stdout")
    return tracker, stream


def test_stopped_node_is_reported_unreachable_and_the_others_converge() -> None:
    tracker, _ = replay()
    assert tracker.hosts["node3"].status == "unreachable"
    assert [tracker.hosts[n].status for n in ("node1", "node2")] == ["up-to-date", "up-to-date"]
    assert not tracker.ok


def test_failure_names_host_role_task_and_message() -> None:
    tracker, _ = replay()
    [failure] = tracker.failures
    assert (failure.host, failure.role, failure.unreachable) == ("node3", "hvd_preflight", True)
    assert "Connection refused" in failure.message
    assert not failure.message.startswith("Task failed")


def test_counts_come_from_ansibles_recap() -> None:
    tracker, _ = replay()
    stats = next(e for e in EVENTS if e["event"] == "playbook_on_stats")["event_data"]
    assert tracker.hosts["node1"].ok == stats["ok"]["node1"]
    assert tracker.hosts["node3"].unreachable == stats["dark"]["node3"]


def test_plain_output_shows_each_role_once_per_host_then_the_summary() -> None:
    _, stream = replay()
    text = stream.getvalue()
    assert text.count("node1: converging hvd_base") == 1
    assert "node3: unreachable" in text
    assert "Failures:" in text and "node3: unreachable: hvd_preflight:" in text
    assert text.rstrip().endswith("Full log: /logs/stdout")


def test_live_output_redraws_one_line_per_host() -> None:
    tracker = Tracker.for_hosts(["a", "b"])
    stream = io.StringIO()
    console = Console(stream, live=True)
    console.update(tracker, {"a", "b"})
    console.update(tracker, tracker.handle({"event": "runner_on_start",
                                            "event_data": {"host": "a", "role": "hvd_base"}}))
    assert "\x1b[2F" in stream.getvalue()
    assert stream.getvalue().count("converging hvd_base") == 1


def test_failure_message_prefers_the_failed_loop_item() -> None:
    res = {"msg": "One or more items failed", "results": [{"failed": False, "msg": "ok"},
                                                          {"failed": True, "msg": "cannot resolve x"}]}
    assert failure_message(res) == "cannot resolve x"


def test_json_document_lists_every_host() -> None:
    tracker, _ = replay()
    doc = tracker.as_dict()
    assert doc["ok"] is False
    assert doc["hosts"]["node3"]["status"] == "unreachable"
    assert doc["failures"][0]["host"] == "node3"


def test_changed_host_key_banner_becomes_one_line_with_the_fix() -> None:
    banner = (
        "Task failed: Failed to connect to the host via ssh: @@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n"
        "@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n"
        "Add correct host key in /inv/ssh/known_hosts to get rid of this message.\n"
        "  remove with:\\n  ssh-keygen -f '/inv/ssh/known_hosts' -R '[127.0.0.1]:32769'\n"
        "Host key verification failed."
    ).replace("\\\n", "\n")
    message = failure_message({"msg": banner, "unreachable": True})
    assert message.startswith("host key changed since it was pinned")
    assert "ssh-keygen -f '/inv/ssh/known_hosts' -R '[127.0.0.1]:32769'" in message


def test_notices_set_by_roles_are_listed_per_host_in_the_summary_and_json() -> None:
    tracker = Tracker.for_hosts(["gpu01", "gpu02"])
    stats = {"event": "playbook_on_stats", "event_data": {
        "ok": {"gpu01": 3, "gpu02": 3}, "changed": {}, "failures": {}, "dark": {}, "skipped": {},
        "artifact_data": {"hvd_notices": {"gpu02": ["reboot required: driver 550.54.15 installed, 535.104 loaded"]}}}}
    tracker.handle(stats)
    stream = io.StringIO()
    Console(stream, live=False).summary(tracker, "/log")
    assert "Notices:\n  gpu02: reboot required: driver 550.54.15 installed, 535.104 loaded" in stream.getvalue()
    assert tracker.as_dict()["notices"] == {"gpu02": ["reboot required: driver 550.54.15 installed, 535.104 loaded"]}
    assert tracker.ok


def test_a_failed_command_is_summarized_by_its_last_stderr_lines() -> None:
    res = {"msg": "non-zero return code", "rc": 1, "stderr": "building...\n\nerror: torch not found\nBuild failed\n"}
    assert failure_message(res) == "rc 1: building... | error: torch not found | Build failed"


def test_a_failed_raw_command_is_summarized_by_its_own_words_not_the_ssh_clients() -> None:
    """A raw command runs on a terminal: what it printed is in stdout, and stderr holds only the SSH client's lines
    (recorded as the pre-flight's python3 look printed them on a node without python3)."""
    res = {"msg": "non-zero return code", "rc": 1,
           "stdout": "python3 not found on the PATH of node2: install python3 (apt-get install python3)\r\n",
           "stderr": "Warning: Permanently added '[127.0.0.1]:32778' (ED25519) to the list of known hosts.\r\n"
                     "Shared connection to 127.0.0.1 closed.\r\n"}
    assert failure_message(res) == "rc 1: python3 not found on the PATH of node2: install python3 (apt-get install python3)"
    assert failure_message({**res, "stdout": ""}) == "non-zero return code"
    assert failure_message({**res, "stderr": "sudo: a password is required\n" + res["stderr"]}) == \
        "rc 1: sudo: a password is required"


def test_a_failed_hvd_run_is_summarized_by_its_commands_words() -> None:
    """hvd_run's failure says "non-zero return code (N)" (recorded as hvd_openmpi's look failed on a node whose
    mpirun is not on the SSH PATH): the command's own stderr is the summary, not the JSON it printed."""
    res = {"msg": "non-zero return code (3)", "rc": 3, "stdout": '{"which": {"rc": 1, "stdout": ""}}',
           "stderr": "mpirun/orted not on the default PATH of a non-interactive SSH command (): mpirun would fail"}
    assert failure_message(res) == ("rc 3: mpirun/orted not on the default PATH of a non-interactive SSH command (): "
                                    "mpirun would fail")


def test_preflight_findings_are_listed_in_the_summary_and_json() -> None:
    finding = {"host": "gpu02", "check": "shm-size", "severity": "fail", "found": "/dev/shm is 64 MiB",
               "expected": ">= 256 MiB", "fix": "mount -o remount,size=1G /dev/shm"}
    warning = dict(finding, host="gpu01", check="gpu-models", severity="warn", found="GPUs A100")
    tracker = Tracker.for_hosts(["gpu01", "gpu02"])
    tracker.handle({"event": "playbook_on_stats", "event_data": {
        "ok": {"gpu01": 9, "gpu02": 9}, "changed": {}, "failures": {"gpu02": 1}, "dark": {}, "skipped": {},
        "artifact_data": {"hvd_preflight": {"gpu01": [warning], "gpu02": [finding], "bad": "not a list"}}}})
    stream = io.StringIO()
    Console(stream, live=False).summary(tracker, "/log")
    text = stream.getvalue()
    assert ("Pre-flight findings:\n  WARN  gpu01  gpu-models: found GPUs A100; expected >= 256 MiB; fix: mount"
            in text)
    assert "  FAIL  gpu02  shm-size: found /dev/shm is 64 MiB; expected >= 256 MiB; fix: mount -o" in text
    assert tracker.as_dict()["preflight"] == {"gpu01": [warning], "gpu02": [finding]}
    assert not tracker.ok


HOSTILE_VERSION = "2.3.1\x1b[2J\x1b]0;pwned\x07\x9b31m+cu121\r\x00"  # clear screen, set title, 8-bit CSI, CR, NUL


def test_node_supplied_text_reaches_the_terminal_without_control_characters() -> None:
    """A package version (or any text a node supplies) carrying ESC[2J, an OSC title, an 8-bit CSI (0x9b), a carriage
    return or a NUL is shown as text: no terminal acts on it, in the live lines, the failures, findings and notices."""
    tracker = Tracker.for_hosts(["gpu01", f"gpu02{chr(0x1b)}[2J"])
    stream = io.StringIO()
    console = Console(stream, live=True)
    console.update(tracker, set(tracker.hosts))
    console.update(tracker, tracker.handle({"event": "runner_on_start", "event_data": {
        "host": "gpu01", "role": f"hvd_pyenv\x9b2J"}}))
    console.update(tracker, tracker.handle({"event": "runner_on_failed", "event_data": {
        "host": "gpu01", "role": "hvd_pyenv", "task": "Install torch",
        "res": {"msg": f"torch=={HOSTILE_VERSION} is not the locked version"}}}))
    finding = {"host": "gpu01", "check": "python", "severity": "fail", "found": f"torch {HOSTILE_VERSION}",
               "expected": "2.3.1", "fix": "re-run\x1b[1A up"}
    tracker.handle({"event": "playbook_on_stats", "event_data": {
        "ok": {"gpu01": 1}, "changed": {}, "failures": {"gpu01": 1}, "dark": {}, "skipped": {},
        "artifact_data": {"hvd_preflight": {"gpu01": [finding]},
                          "hvd_notices": {"gpu01": [f"installed torch {HOSTILE_VERSION}"]}}}})
    console.summary(tracker, "/log")
    text = stream.getvalue()
    ours = text.replace("\x1b[2K", "").replace("\x1b[2F", "")  # the live lines' own redraw sequences
    assert "\x1b" not in ours and "\x9b" not in ours and "\r" not in ours and "\x00" not in ours
    assert "torch==2.3.1+cu121\\x0d\\x00 is not the locked version" in text
    assert "found torch 2.3.1+cu121\\x0d\\x00; expected 2.3.1; fix: re-run up" in text
    assert "gpu01: installed torch 2.3.1+cu121\\x0d\\x00" in text
    assert "converging hvd_pyenv" in text and "gpu02" in text


def test_printable_keeps_text_tabs_and_meaningful_newlines() -> None:
    from hvdcluster.output import printable

    assert printable("café\tok\nnext") == "café\tok\nnext"
    assert printable("a\nb", newlines=False) == "a b"
    assert printable("x\x9b2Jdone\x9d") == "xdone\\x9d"  # an 8-bit CSI goes with its parameters; a lone OSC shows
    assert printable("bell\x07 del\x7f sep\u2028") == "bell\\x07 del\\x7f sep\\u2028"


def test_a_peer_down_during_a_delegated_look_does_not_take_the_node_that_asked_down() -> None:
    """node1 looked (delegate_to, ignore_unreachable) at node3, which had died: Ansible sends an unreachable event
    for node1 but its recap counts node1 ok and node3 dark. node1 is not failed; node3 is named by its own line."""
    tracker = Tracker.for_hosts(["node1", "node2", "node3"])
    lost = {"msg": "Failed to connect to the host via ssh: Connection refused", "unreachable": True}
    for event in (
        {"event": "runner_on_unreachable", "event_data": {"host": "node1", "role": "hvd_fanout", "res": lost,
                                                          "task": "Look for copies on the cluster's nodes outside"}},
        {"event": "runner_on_unreachable", "event_data": {"host": "node3", "role": "hvd_openmpi", "res": lost,
                                                          "task": "Install Open MPI"}},
        {"event": "playbook_on_stats", "event_data": {
            "processed": {"node1": 1, "node2": 1, "node3": 1}, "ok": {"node1": 30, "node2": 30, "node3": 12},
            "changed": {}, "failures": {}, "dark": {"node3": 1}, "skipped": {}, "ignored": {"node1": 1}}},
    ):
        tracker.handle(event)
    assert [tracker.hosts[n].status for n in ("node1", "node2", "node3")] == ["up-to-date", "up-to-date",
                                                                             "unreachable"]
    assert [(f.host, f.unreachable) for f in tracker.failures] == [("node3", True)]
    assert "went on without it" in tracker.notices["node1"][0]


def test_a_refused_key_of_a_pinned_node_says_the_pin_refused_it() -> None:
    banner = ("Failed to connect to the host via ssh: @@@@@@@@@@@@@@@@\n@    WARNING: REMOTE HOST IDENTIFICATION HAS "
              "CHANGED!     @\n  remove with:\n  ssh-keygen -f '/inv/ssh/known_hosts' -R '10.0.0.1'\n"
              "Host key verification failed.")
    tracker = Tracker.for_hosts(["node1", "node2"], pinned=["node1"])
    for host in ("node1", "node2"):
        tracker.handle({"event": "runner_on_unreachable", "event_data": {
            "host": host, "role": "hvd_preflight", "task": "Look", "res": {"msg": banner, "unreachable": True}}})
    pinned, learnt = tracker.failures
    assert pinned.line().startswith("node1: unreachable: hvd_preflight: Look: host key is not the one hosts.yaml pins")
    assert "ssh-keygen" not in pinned.message  # the pin is written again before every run: forgetting it is no fix
    assert learnt.message.startswith("host key changed since it was pinned") and "ssh-keygen -f" in learnt.message


def test_the_post_flight_throughput_is_listed_per_controller_in_the_summary_and_json() -> None:
    tracker = Tracker.for_hosts(["node1", "node2"])
    gloo = {"ranks": 4, "device": "cpu", "bytes": 16 << 20, "iters": 5, "seconds": 0.04, "algbw_gbs": 0.42,
            "busbw_gbs": 0.63}
    tracker.handle({"event": "playbook_on_stats", "event_data": {
        "ok": {"node1": 3, "node2": 3}, "changed": {}, "failures": {}, "dark": {}, "skipped": {},
        "artifact_data": {"hvd_throughput": {"gloo": gloo, "mpi": {}}}}})
    stream = io.StringIO()
    Console(stream, live=False).summary(tracker, "/log")
    assert ("Post-flight allreduce throughput (bus bandwidth as nccl-tests defines it):\n"
            "  gloo: 4 ranks, 16.0 MiB in host memory, busbw 0.63 GB/s (algbw 0.42)\n") in stream.getvalue()
    assert tracker.as_dict()["throughput"] == {"gloo": gloo}  # a controller that printed nothing is left out


def test_a_long_step_is_named_with_its_age_while_it_runs_and_the_summary_says_what_was_built_or_cached(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No event comes while Horovod compiles: the heartbeat names the step and its age, once per period, and the
    summary lists what was built (with its time) and what the controller cache already held."""
    from hvdcluster import progress
    from hvdcluster.progress import Console, Tracker, stack_context

    tracker = Tracker.for_hosts(["node1", "node2"])
    tracker.context = stack_context({"horovod": {"version": "0.28.1"}, "python": {"packages": ["torch==2.13.0"]}})
    build = "Build the wheel against the environment (a few minutes)"
    now = [1000.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    tracker.handle({"event": "runner_on_start", "event_data": {"host": "node1", "role": "hvd_horovod", "task": build}})
    stream = io.StringIO()
    console = Console(stream, live=False)
    now[0] += 20
    console.heartbeat(tracker)
    assert stream.getvalue() == ""  # not long yet
    now[0] += 110
    console.heartbeat(tracker)
    console.heartbeat(tracker)  # the same period: said once
    assert stream.getvalue() == "  node1: building Horovod 0.28.1 for torch 2.13.0, 2m10s\n"
    tracker.handle({"event": "runner_on_ok", "event_data": {"host": "node1", "role": "hvd_horovod", "task": build,
                                                            "duration": 193.4, "res": {"changed": True}}})
    tracker.handle({"event": "runner_on_ok", "event_data": {"host": "node1", "role": "hvd_fanout",
                                                            "task": progress.CACHE_LOOK,
                                                            "res": {"valid": True, "path": "/c/envs/env-1.tar.zst"}}})
    assert tracker.long_steps(0) == []
    console.summary(tracker, "/log")
    text = stream.getvalue()
    assert "  built: building Horovod 0.28.1 for torch 2.13.0 on node1 (3m13s)" in text
    assert "  taken from the controller cache: the env" in text
    assert tracker.as_dict()["built"] == [{"host": "node1", "what": "building Horovod 0.28.1 for torch 2.13.0",
                                           "seconds": 193.4}]
