"""Rolling changes and job leases without nodes: the order of a roll, its arguments, the node-side script run by a
real shell on a folder of this machine, and the rule that tells a live holder from one killed with SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from hvdcluster import jobs, launch
from hvdcluster.cli import main
from hvdcluster.repair import batches

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_holder import process

NAMES = ["n1", "n2", "n3", "n4", "n5"]


@pytest.mark.parametrize(("batch", "canary", "order"), [
    ("1", None, [["n1"], ["n2"], ["n3"], ["n4"], ["n5"]]),
    ("2", "n3", [["n3"], ["n1", "n2"], ["n4", "n5"]]),
    ("40%", None, [["n1", "n2"], ["n3", "n4"], ["n5"]]),
    ("1%", "n5", [["n5"], ["n1"], ["n2"], ["n3"], ["n4"]]),
    ("100%", "n1", [["n1"], ["n2", "n3", "n4", "n5"]]),
    ("9", None, [NAMES]),
])
def test_a_roll_takes_the_canary_alone_then_batches_in_hosts_order(batch, canary, order) -> None:
    assert batches(NAMES, batch, canary) == order


@pytest.mark.parametrize(("argv", "message"), [
    (["--batch", "2"], "--batch: only with --rolling"),
    (["--canary", "ip-10-0-0-1", "--max-wait", "5"], "--canary, --max-wait: only with --rolling"),
    (["--rolling", "--canary", "ip-10-0-0-9"], "--canary: 'ip-10-0-0-9' is not a host of"),
    (["--rolling", "--batch", "0"], "--batch: '0': give a number of nodes (1 or more) or a percentage"),
    (["--rolling", "--batch", "150%"], "--batch: '150%'"),
    (["--rolling", "--batch", "two"], "--batch: 'two'"),
    (["--rolling", "--tags", "hvd_base"], "--rolling: not with --tags"),
    (["--rolling", "--check"], "--rolling: not with --check"),
    (["--rolling", "--poll", "0"], "--max-wait must be 0 or more and --poll more than 0 seconds"),
])
def test_bad_rolling_arguments_are_one_line_and_exit_2_before_anything_is_written(
        tmp_path: Path, capsys, argv, message) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("cluster: lab\nhosts: [10.0.0.1, 10.0.0.2]\n")
    rc = main(["up", str(hosts), "-o", str(tmp_path / "inv"), *argv])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "inv").exists()


def test_ranks_run_on_the_first_nodes_whose_slots_hold_them() -> None:
    slots = {"a": 2, "b": 2, "c": 2}
    assert launch.ranked_hosts(slots, 1) == ("a",)
    assert launch.ranked_hosts(slots, 3) == ("a", "b")
    assert launch.ranked_hosts(slots, 6) == ("a", "b", "c")


def _node(folder: Path, monkeypatch, path: str = "/usr/bin:/bin", **kwargs) -> jobs.Look:
    """The node-side script, run by a real sh against ``folder`` in place of /run/hvdcluster (``path``: its PATH;
    by default no nvidia-smi, no scontrol)."""
    monkeypatch.setattr(jobs, "DIR", str(folder))
    proc = subprocess.run(["sh", "-c", jobs.script(**kwargs)], capture_output=True, text=True, check=False,
                          env={**os.environ, "PATH": path})
    return jobs.parse("n1", proc.returncode, proc.stdout, proc.stderr)


def test_the_node_script_writes_lists_and_removes_leases_and_never_overwrites_one(tmp_path, monkeypatch) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    record = jobs.mine(jobs.JOB, "20261126T001901-1", hosts=["n1"], command=["python", "train.py"])
    lease = "job-20261126T001901-1.json"
    look = _node(run_dir, monkeypatch, put=record)
    assert look.error is None and look.holders == {lease: record}, look
    assert jobs.busy(look) == [f"running {jobs.describe(record)}"] and jobs.busy(look, ours=lease) == []
    assert "job 20261126T001901-1 of" in jobs.describe(record) and ": python train.py" in jobs.describe(record)
    assert (run_dir / lease).stat().st_mode & 0o777 == 0o600  # the job's argv: the login user's to read
    again = _node(run_dir, monkeypatch, put={**record, "user": "someone else"})  # O_EXCL: never over a file
    assert again.error and "cannot write" in again.error
    assert json.loads((run_dir / lease).read_text()) == record
    (run_dir / "roll-20261126T001901-2.json").write_text("{not json\n")
    seen = _node(run_dir, monkeypatch, drop=[lease])
    assert seen.holders == {"roll-20261126T001901-2.json": None} and not (run_dir / lease).exists()
    assert jobs.busy(seen) == ["being changed by an unreadable record"]  # unreadable counts: never guessed away
    assert _node(tmp_path / "absent", monkeypatch).error.startswith(f"{tmp_path / 'absent'} is missing")


def test_gpu_compute_processes_count_as_running_work() -> None:
    """nvidia-smi's --query-compute-apps, as the node script answers them (no GPU here: the answer is typed)."""
    look = jobs.parse("g1", 0, jobs.PREFIX + json.dumps({"gpu_apps": ["4242, python"]}) + "\n")
    assert jobs.busy(look) == ["GPU compute process 4242, python"]


def test_the_lease_of_a_job_killed_with_sigkill_no_longer_counts() -> None:
    live = jobs.mine(jobs.JOB, "j-live")
    assert jobs.staleness(live) is None  # this very process holds it
    child = subprocess.Popen(["sleep", "60"])
    try:
        info = process(child.pid)
        killed = {**live, "run_id": "j-killed", "pid": child.pid, "pid_start": info["start"]}
        assert jobs.staleness(killed) is None
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert jobs.staleness(killed) == f"its pid {child.pid} is gone"
    reused = {**live, "pid_start": "1"}  # the pid alive, but another process than the one that took the lease
    assert jobs.staleness(reused) == f"its pid {os.getpid()} is another process now"


def test_a_holder_on_another_controller_counts_until_its_age_says_otherwise() -> None:
    other = {**jobs.mine(jobs.JOB, "j-far"), "host": "another-controller"}
    assert jobs.staleness(other) is None
    old = time.time() - jobs.STALE_AFTER[jobs.JOB] - 60
    assert "older than" in jobs.staleness({**other, "started_epoch": old})
    roll = {**jobs.mine(jobs.ROLL, "r-far"), "host": "another-controller", "started_epoch": time.time() - 2 * 86400}
    assert "older than" in jobs.staleness(roll)


def test_a_rolls_read_back_holds_the_changed_nodes_against_each_other_not_against_the_ones_left(tmp_path) -> None:
    """After the inputs changed (a package added), node1 is the only one changed: held against node2 and node3 still
    on the old env it would be the odd one out and the roll would stop on a healthy node. The roll reads back only
    the nodes done so far, and records only those."""
    from hvdcluster import nodestate, spec
    from hvdcluster.cli import stages
    from hvdcluster.progress import Tracker

    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("cluster: c1\nhosts: [{name: node1, address: 10.0.0.1}, {name: node2, address: 10.0.0.2},"
                     " {name: node3, address: 10.0.0.3}]\n")
    cluster = spec.load(str(hosts))
    old = {"env.key": "k-old", "env.dist.six": "absent", "os.release": "debian 12"}
    new = {"env.key": "k-new", "env.dist.six": "1.16.0 abcd", "os.release": "debian 12"}
    events = [{"event": "runner_on_ok", "event_data": {"host": h, "task": nodestate.STATE_TASK, "res": {"state": s}}}
              for h, s in (("node1", new), ("node2", old), ("node3", old))]
    root = tmp_path / "inv"
    (root / "state").mkdir(parents=True)

    def loop(among):
        tracker = Tracker.for_hosts(["node1", "node2", "node3"])
        lines = stages.close_loop(root, cluster, tracker, events, {}, converged=["node1"], records_current=False,
                                among=among)
        return lines, tracker

    lines, tracker = loop(None)  # every node held against its peers: node1 named, wrongly
    assert any(line.startswith("node1: env.key") for line in lines) and tracker.hosts["node1"].unrepaired
    for path in (root / "state").iterdir():
        path.unlink()
    lines, tracker = loop(["node1"])
    assert lines == [] and not tracker.hosts["node1"].unrepaired
    assert sorted(p.name for p in (root / "state").iterdir()) == ["node1.json"]


def test_a_roll_changes_only_what_the_fast_path_would_repair_and_skips_the_preflight_after_its_first_batch() -> None:
    """The scope of a roll, from one read of every node: the drifted nodes some role repairs, with the fast path's
    roles (node2 in sync is proven with the first batch, never changed; node4's OS release is the operator's). With
    no read (inputs changed, or --full) every node and every role; the pre-flight runs with the first batch only
    (its play looks at every node), never again."""
    from hvdcluster import drift
    from hvdcluster import repair
    from hvdcluster.repair import scope

    names = ["n1", "n2", "n3", "n4"]
    want = {n: {"pkg.openmpi-bin": "4.1.4-3+b1", "os.release": "debian 12"} for n in names}
    found = {n: dict(state) for n, state in want.items()}
    found["n1"]["pkg.openmpi-bin"] = found["n3"]["pkg.openmpi-bin"] = "4.1.5-1"
    found["n4"]["os.release"] = "debian 13"
    todo = scope(names, repair.plan(drift.compare(want, found, []), names))
    assert todo.nodes == ["n1", "n3"] and todo.in_sync == ["n2"] and todo.by_hand == {"n4": ["os.release"]}
    assert todo.tags == "hvd_openmpi,hvd_nccl_tests,hvd_horovod,hvd_verify,hvd_state"  # and what is built on it
    assert "hvd_targets" not in todo.extravars and todo.batch_tags(2) == todo.tags
    every = scope(names, None)
    assert every.nodes == names and every.in_sync == [] and every.batch_tags(1) is None
    later = every.batch_tags(2).split(",")
    assert "hvd_preflight" not in later and later == [*drift.ROLES[1:], "hvd_state"]


def test_a_roll_after_a_change_of_variables_changes_every_node_from_the_first_role_that_reads_them() -> None:
    """A package added to the env (inputs.change: from hvd_pyenv on): every node, in batches, each batch with the
    same roles (no pre-flight, no base); a node whose own drift needs an earlier role moves the start for all."""
    from hvdcluster import drift
    from hvdcluster import repair
    from hvdcluster.repair import scope

    names = ["n1", "n2", "n3"]
    want = {n: {"pkg.openmpi-bin.hold": "held", "env.lock": "l1"} for n in names}
    found = {n: dict(state) for n, state in want.items()}
    todo = scope(names, repair.after_change(drift.compare(want, found, []), names, "hvd_pyenv"))
    assert todo.nodes == names and todo.in_sync == [] and "hvd_targets" not in todo.extravars
    assert todo.batch_tags(1) == todo.batch_tags(3) == "hvd_pyenv,hvd_horovod,hvd_verify,hvd_state"
    found["n2"]["pkg.openmpi-bin.hold"] = "not held"
    todo = scope(names, repair.after_change(drift.compare(want, found, []), names, "hvd_pyenv"))
    assert todo.nodes == names and todo.batch_tags(2) == ",".join(
        [*drift.ROLES[drift.ROLES.index("hvd_openmpi"):], "hvd_state"])


LINE = ("NodeName=node3 Arch=x86_64 CoresPerSocket=1  CPUAlloc=1 CPUEfctv=1 CPUTot=1 CPULoad=1.94 "
        "AvailableFeatures=(null) NodeAddr=node3 NodeHostName=node3 Version=22.05.8 OS=Linux 6.18.44 #1 SMP "
        "PREEMPT_DYNAMIC @0  RealMemory=1 State={state} ThreadsPerCore=1 Partitions=lab  CfgTRES=cpu=1 CapWatts=n/a"
        "{reason}")


def _slurm_node(tmp_path: Path, monkeypatch, state: str, drained: str, **kwargs) -> tuple[jobs.Look, list[str]]:
    """The node script against stand-ins for scontrol/squeue/hostname that print what Slurm 22.05 printed for a
    node (the line above, recorded from Debian's slurmctld in a lab container) and log each call. Real Slurm runs in
    tests/cluster/test_up.py; here only the script's branches are held to it, with no daemon."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir(parents=True, exist_ok=True)
    line = LINE.format(state=state, reason=f" Reason={drained} [root@2026-11-26T00:19:01]" if drained else "")
    for name, body in {"hostname": "echo node3", "scontrol": f"echo \"scontrol $*\" >> {log}; "
                       f"[ \"$1\" = -o ] && echo '{line}'; exit 0",
                       "squeue": "case \"$*\" in *%j*) echo '41 alice train' ;; *) echo 41 ;; esac", "sudo": f"echo \"sudo $*\" >> {log}; exit 0"}.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    look = _node(run_dir, monkeypatch, path=f"{bin_dir}:/usr/bin:/bin", **kwargs)
    return look, (log.read_text().splitlines() if log.exists() else [])


def test_a_roll_drains_a_slurm_node_only_when_nobody_did_and_resumes_only_its_own_drain(tmp_path, monkeypatch) -> None:
    ours = "hvdcluster roll 20261126T001901-42"
    look, calls = _slurm_node(tmp_path, monkeypatch, "ALLOCATED", "", slurm="drain", reason=ours)
    update = [c for c in calls if "update" in c]
    assert len(update) == 1 and f"state=DRAIN reason={ours}" in update[0], calls
    assert look.slurm["State"] == "ALLOCATED" and jobs.busy(look) == ["Slurm job 41 alice train"]
    look, calls = _slurm_node(tmp_path / "b", monkeypatch, "IDLE+DRAIN", "bad fan", slurm="drain", reason=ours)
    assert not [c for c in calls if "update" in c] and look.drained_by == "bad fan"  # the operator's drain: left
    look, calls = _slurm_node(tmp_path / "c", monkeypatch, "IDLE+DRAIN", "bad fan", slurm="resume", reason=ours)
    assert not [c for c in calls if "update" in c]  # never resumed by the roll
    look, calls = _slurm_node(tmp_path / "d", monkeypatch, "MIXED+DRAIN", ours, slurm="resume", reason=ours)
    assert [c.split()[-1] for c in calls if "update" in c] == ["state=RESUME"], calls
    look, calls = _slurm_node(tmp_path / "e", monkeypatch, "IDLE+DRAIN", ours + "0", slurm="resume", reason=ours)
    assert not [c for c in calls if "update" in c]  # another roll's reason that starts like ours
    assert jobs.slurm_fields(LINE.format(state="IDLE+DRAIN", reason=" Reason=a b c [slurm@2026-01-01T00:00:00]")) \
        ["Reason"] == "a b c"


def test_a_drain_left_by_a_killed_roll_is_taken_back_and_no_other_drain_is(tmp_path, monkeypatch) -> None:
    """A roll killed outright leaves its nodes drained with its reason; the next roll resumes those (jobs.orphaned_drain
    finds them, the node script's resume takes that roll's id as `adopt`) and no drain of anyone else."""
    gone, ours = "20261126T001901-42", "hvdcluster roll 20261126T020000-7"

    def node(state: str, reason: str, holders: dict | None = None) -> jobs.Look:
        return jobs.Look("n1", holders=holders or {}, slurm={"State": state, "Reason": reason})

    assert jobs.orphaned_drain(node("IDLE+DRAIN", jobs.ROLL_REASON + gone), ours) == gone  # no mark left
    live = jobs.mine(jobs.ROLL, gone)  # a roll of this very process: it runs
    assert jobs.orphaned_drain(node("IDLE+DRAIN", jobs.ROLL_REASON + gone, {f"roll-{gone}.json": live}), ours) is None
    dead = {**live, "pid": 2 ** 22 + 12345, "start": "1"}
    assert jobs.staleness(dead) is not None
    assert jobs.orphaned_drain(node("MIXED+DRAIN", jobs.ROLL_REASON + gone, {f"roll-{gone}.json": dead}), ours) == gone
    for state, reason in (("IDLE+DRAIN", ours), ("IDLE+DRAIN", "bad fan"), ("DOWN+DRAIN", jobs.ROLL_REASON + gone),
                          ("IDLE", ""), ("IDLE+DRAIN", jobs.ROLL_REASON + "*"), ("IDLE+DRAIN", jobs.ROLL_REASON)):
        assert jobs.orphaned_drain(node(state, reason), ours) is None, (state, reason)
    look, calls = _slurm_node(tmp_path / "a", monkeypatch, "IDLE+DRAIN", jobs.ROLL_REASON + gone, slurm="resume",
                              reason=ours, adopt=[gone])
    assert [c.split()[-1] for c in calls if "update" in c] == ["state=RESUME"], calls
    look, calls = _slurm_node(tmp_path / "b", monkeypatch, "IDLE+DRAIN", jobs.ROLL_REASON + gone + "1",
                              slurm="resume", reason=ours, adopt=[gone])
    assert not [c for c in calls if "update" in c], calls  # another roll's drain whose id starts like the gone one's
    with pytest.raises(ValueError):
        jobs.script(slurm="resume", reason=ours, adopt=["*"])  # a reason's text never becomes a shell pattern
