"""The CLI's contract: one located line and exit code 2 for bad input, nothing written or touched."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hvdcluster import cli, launch, lock, spec
from hvdcluster.cli import stages
from hvdcluster.drift import ROLES

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


# --------------------------------------------------------------------------------------------- arguments


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


@pytest.mark.parametrize("np", ["0", "-1"])
def test_run_with_fewer_than_one_process_exits_2_before_reading_anything(np: str, tmp_path: Path, capsys) -> None:
    err = _refused(["run", str(tmp_path / "none.yaml"), "-np", np, "--print", "--", "python", "x.py"],
                   tmp_path, capsys, "-np must be at least 1")
    assert f"(got {np})" in err


@pytest.fixture
def rendered(hosts: Path, tmp_path: Path) -> Path:
    assert cli.main(["inventory", str(hosts), "-o", str(tmp_path / "inv")]) == 0
    return tmp_path / "inv"


@pytest.fixture
def no_ssh(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Fail the test on any contact with a node; returns the commands that would have run."""
    from hvdcluster import launch

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a node was contacted: {args}")

    from hvdcluster import nodestate

    monkeypatch.setattr(launch, "fabric_interface", refuse)
    monkeypatch.setattr(launch.subprocess, "run", refuse)
    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(nodestate, "read", refuse)
    return []


def test_run_print_validates_against_the_inventory_without_contacting_a_node(
    hosts: Path, rendered: Path, no_ssh: list, capsys
) -> None:
    capsys.readouterr()
    assert cli.main(["run", str(hosts), "-o", str(rendered), "-np", "3", "--print", "--", "python",
                     "t.py"]) == 0
    out = capsys.readouterr()
    assert "horovodrun -np 3 -H gpu01:2,gpu02:2" in out.out
    assert "fabric interface is read from gpu01 when the job starts" in out.err


def test_run_print_uses_the_interface_the_inventory_names(hosts: Path, rendered: Path, no_ssh: list, capsys) -> None:
    (rendered / "c1" / "group_vars" / "all" / "local.yml").write_text("hvd_fabric_interface: ib0\n")
    capsys.readouterr()
    assert cli.main(["run", str(hosts), "-o", str(rendered), "--print", "--", "./job.sh"]) == 0
    assert f"--network-interfaces ib0 {shlex.join(launch.SAME_IMPORTS)} ./job.sh" in capsys.readouterr().out


@pytest.mark.parametrize("print_only", [["--print"], []])
def test_run_with_more_processes_than_slots_exits_2_without_contacting_a_node(
    hosts: Path, rendered: Path, no_ssh: list, capsys, print_only: list[str]
) -> None:
    capsys.readouterr()
    _refused(["run", str(hosts), "-o", str(rendered), "-np", "5", *print_only, "--", "python", "t.py"],
             rendered, capsys, "-np 5 is more than the 4 slots")


def test_run_without_an_inventory_exits_2(hosts: Path, tmp_path: Path, no_ssh: list, capsys) -> None:
    _refused(["run", str(hosts), "-o", str(tmp_path / "inv"), "--print", "--", "x"], tmp_path, capsys,
             "no inventory yet")


def test_run_takes_hosts_first_like_every_command_and_the_job_after_dashes(
    hosts: Path, rendered: Path, no_ssh: list, capsys
) -> None:
    capsys.readouterr()
    argv = ["-o", str(rendered), "--print", "--", "python", "other.yaml", "--hosts", "x.yaml", "--", "-np", "9"]
    assert cli.main(["run", str(hosts), *argv]) == 0
    out = capsys.readouterr()
    assert (f"horovodrun -np 4 -H gpu01:2,gpu02:2 {shlex.join(launch.SAME_IMPORTS)} /opt/hvd/env/bin/python other.yaml "
            "--hosts x.yaml -- -np 9'") in out.out
    assert "deprecated" not in out.err
    assert cli.main(["run", "--print", "-o", str(rendered), str(hosts), "--", "python", "other.yaml"]) == 0  # anywhere
    assert f"gpu02:2 {shlex.join(launch.SAME_IMPORTS)} /opt/hvd/env/bin/python other.yaml'" in capsys.readouterr().out


def test_run_hosts_flag_is_gone_and_its_refusal_says_what_to_write(hosts: Path, rendered: Path, no_ssh: list,
                                                                   capsys) -> None:
    capsys.readouterr()
    err = _refused(["run", "--hosts", str(hosts), "-o", str(rendered), "--print", "--", "python", "t.py"],
                   rendered, capsys, "run: --hosts is not an option of run", "hosts.yaml is HOSTS",
                   "write `hvdcluster run HOSTS [options] -- python train.py --hosts`")
    assert "deprecated" not in err


def test_run_without_hosts_reads_the_hosts_yaml_here(hosts: Path, rendered: Path, no_ssh: list, capsys,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(hosts.parent)
    capsys.readouterr()
    assert cli.main(["run", "-o", str(rendered), "--print", "--", "python", "t.py"]) == 0
    out = capsys.readouterr()
    assert "horovodrun -np 4 -H gpu01:2,gpu02:2" in out.out and "deprecated" not in out.err
    monkeypatch.chdir(rendered)
    _refused(["run", "-o", str(rendered), "--print", "--", "python", "t.py"], rendered, capsys, "hosts.yaml")


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


def _fake_run(calls: list[dict]) -> object:
    from hvdcluster.runner import RunResult

    def run_playbook(root: Path, playbook: str, **kwargs: object) -> RunResult:
        calls.append({"root": root, "playbook": playbook, **kwargs})
        return RunResult(rc=0, status="successful", log=root / "runs" / "stdout", artifacts=root / "runs")

    return run_playbook


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


# --------------------------------------------------------------------------------------------- one run at a time


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


# ------------------------------------------------------------------------------------------ check and the launch gate
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


def test_run_gate_refuses_a_node_whose_env_differs_naming_it_and_no_gate_launches(
    hosts: Path, rendered: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    odd = {**SHARED, "env.dist.torch": "2.12.0 bbbb"}
    fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": odd})
    launched = fake_launches(monkeypatch)
    capsys.readouterr()
    assert cli.main(["run", str(hosts), "-o", str(rendered), "--", "python", "t.py"]) == 1
    err = capsys.readouterr().err
    assert "not launching" in err and "gpu02" in err and "env.dist.torch" in err and not launched
    assert cli.main(["run", str(hosts), "-o", str(rendered), "--no-gate", "--", "python", "t.py"]) == 0
    assert len(launched) == 3 and "horovodrun" in launched[1][-1]


def test_run_gate_lets_identical_nodes_launch(hosts: Path, rendered: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": dict(SHARED)})
    launched = fake_launches(monkeypatch)
    assert cli.main(["run", str(hosts), "-o", str(rendered), "--", "python", "t.py"]) == 0
    assert len(calls) == 1 and len(launched) == 3
    # the job lease on both nodes before the launch, and taken back after it
    (look, hosts_, put, drop), job, (look2, hosts2, put2, drop2) = launched
    assert (look, hosts_, drop) == ("look", ["gpu01", "gpu02"], []) and put.startswith("job-")
    assert "horovodrun" in job[-1] and (look2, hosts2, put2, drop2) == ("look", ["gpu01", "gpu02"], None, [put])


def test_run_takes_gpu_counts_and_the_fabric_interface_from_the_gates_read(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Slots left open in hosts.yaml are one per GPU found, and horovodrun is given the interface hvd_base found:
    both come from the node states the gate read, with no second round of SSH to the nodes."""
    from hvdcluster import launch

    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("cluster: c1\nhosts:\n  - {name: gpu01, address: 10.0.0.1}\n"
                     "  - {name: gpu02, address: 10.0.0.2, slots: 1}\n")
    assert cli.main(["inventory", str(hosts), "-o", str(tmp_path / "inv")]) == 0
    calls = fake_reading(monkeypatch, {"gpu01": {**SHARED, "gpu.count": 4, "base.fabric_interface": "ib0"},
                                       "gpu02": {**SHARED, "gpu.count": 8, "base.fabric_interface": "ib1"}})

    def no_second_read(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a node was read again: {args}")

    monkeypatch.setattr(launch, "fabric_interface", no_second_read)
    monkeypatch.setattr(launch, "gpu_counts", no_second_read)
    launched = fake_launches(monkeypatch, interface=None)
    assert cli.main(["run", str(hosts), "-o", str(tmp_path / "inv"), "--", "python", "t.py"]) == 0
    assert len(calls) == 1 and len(launched) == 3
    remote = launched[1][-1]
    assert "-np 5 -H gpu01:4,gpu02:1 " in remote and "--network-interfaces ib0 " in remote, remote


def test_check_exits_1_naming_the_drifted_node_and_0_in_sync(
    hosts: Path, rendered: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    root = rendered / "c1"
    (root / "state").mkdir()
    for node in ("gpu01", "gpu02"):
        (root / "state" / f"{node}.json").write_text(json.dumps({"state": SHARED}))
    fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": {**SHARED, "env.files": "missing: x.py"}})
    capsys.readouterr()
    assert cli.main(["check", str(hosts), "-o", str(rendered), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["in_sync"] == ["gpu01"] and [d["item"] for d in doc["drifted"]["gpu02"]] == ["env.files"]
    assert doc["drifted"]["gpu02"][0]["role"] == "hvd_pyenv"
    fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": dict(SHARED)})
    assert cli.main(["check", str(hosts), "-o", str(rendered)]) == 0
    assert "in sync" in capsys.readouterr().out


def test_check_names_an_unreachable_node_and_exits_1(hosts: Path, rendered: Path, monkeypatch, capsys) -> None:
    fake_reading(monkeypatch, {"gpu01": dict(SHARED)}, {"gpu02": "unreachable: no route"})
    capsys.readouterr()
    assert cli.main(["check", str(hosts), "-o", str(rendered)]) == 1
    assert "gpu02" in capsys.readouterr().out


def test_check_without_an_inventory_or_with_an_unknown_host_exits_2(hosts: Path, tmp_path: Path, rendered: Path,
                                                                    no_ssh: list, capsys) -> None:
    _refused(["check", str(hosts), "-o", str(tmp_path / "none")], tmp_path, capsys, "no inventory yet")
    _refused(["check", str(hosts), "-o", str(rendered), "--limit", "gpu9"], rendered, capsys, "unknown host")


# ------------------------------------------------------------------------------------------ the fast path of up


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


@pytest.fixture
def recorded(rendered: Path, monkeypatch: pytest.MonkeyPatch) -> FakeRun:
    """A cluster converged before from these very inputs, every node's desired state on record."""
    record_converged(rendered / "c1")
    fake = FakeRun()
    monkeypatch.setattr(stages, "tracked_run", fake)
    return fake


def test_up_converges_nothing_when_every_node_is_in_its_desired_state(hosts, rendered, recorded, monkeypatch,
                                                                      capsys) -> None:
    fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": dict(SHARED)})
    capsys.readouterr()
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["fast_path"]["in_sync"] == ["gpu01", "gpu02"] and recorded.calls == []


def test_up_repairs_a_drifted_node_from_the_first_role_that_owns_its_drift(hosts, rendered, recorded, monkeypatch,
                                                                          capsys) -> None:
    fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": {**SHARED, "horovod.record": "other"}})
    capsys.readouterr()
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["fast_path"] == {"in_sync": ["gpu01"], "repaired": {"gpu02": ["horovod.record"]}, "by_hand": {},
                                "read_seconds": 0.1, "deep": False}
    assert recorded.calls == [{"playbook": "site.yml", "tags": "hvd_horovod,hvd_verify,hvd_state",
                               "extravars": {"hvd_targets": "gpu02", "hvd_state_health": True}}]


def test_what_check_deep_finds_the_next_up_reads_deep_and_repairs_until_a_deep_read_finds_it_installed(
        hosts, rendered, recorded, monkeypatch, capsys) -> None:
    """A library with one byte flipped (size and time kept): only a deep read sees it. `check --deep` names it; a
    plain `up` then reads deep by itself, and its repair run judges the env (hvd_pyenv) and reads it back deep; once
    that read-back finds it installed, the next `up` reads shallow again."""
    from hvdcluster import nodestate

    root = rendered / "c1"
    flipped = {**SHARED, "env.files": "changed: lib/python3.11/site-packages/torch/lib/libtorch_cpu.so"}
    calls = fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": flipped})
    assert cli.main(["check", str(hosts), "-o", str(rendered), "--deep"]) == 1
    assert nodestate.deep_findings(root) == ["gpu02"] and calls[-1][-1] == "deep"
    recorded.after = {"gpu01": dict(SHARED), "gpu02": dict(SHARED)}
    capsys.readouterr()
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert calls[-1][-1] == "deep" and doc["fast_path"]["deep"] and doc["converged"] == ["gpu02"]
    assert recorded.calls[-1]["extravars"] == {"hvd_targets": "gpu02", "hvd_pyenv_deep": True, "hvd_state_deep": True,
                                               "hvd_state_health": True}
    assert recorded.calls[-1]["tags"].startswith("hvd_pyenv,")
    assert nodestate.deep_findings(root) == []
    fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": dict(SHARED)})
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--json"]) == 0
    assert not json.loads(capsys.readouterr().out)["fast_path"]["deep"]


def test_up_deep_reads_every_env_file_and_repairs_what_only_that_read_sees(hosts, rendered, recorded, monkeypatch,
                                                                           capsys) -> None:
    flipped = {**SHARED, "env.files": "changed: lib/python3.11/site-packages/torch/lib/libtorch_cpu.so"}
    calls = fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": flipped})
    recorded.after = {"gpu01": dict(SHARED), "gpu02": dict(SHARED)}
    capsys.readouterr()
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--deep", "--json"]) == 0
    assert len(calls) == 1 and calls[0][-1] == "deep"
    assert recorded.calls[-1]["extravars"]["hvd_pyenv_deep"] is True


def test_up_fails_naming_what_its_repair_left_and_records_only_what_is_as_it_must_be(
        hosts, rendered, recorded, monkeypatch, capsys) -> None:
    """The loop contract: the repair's own read-back still shows the drift, so `up` never reports it repaired."""
    from hvdcluster import nodestate

    root = rendered / "c1"
    drifted = {**SHARED, "env.dist.extra-pkg": "1.0 x"}
    fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": drifted})
    recorded.after = {"gpu01": dict(SHARED), "gpu02": drifted}  # the role ran, the extra distribution stayed
    capsys.readouterr()
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["not_repaired"] == ["gpu02: env.dist.extra-pkg: expected absent, found 1.0 x (hvd_pyenv did not "
                                   "repair it)"]
    assert doc["hosts"]["gpu02"]["status"] == "not-repaired" and doc["converged"] == [] and not doc["ok"]
    assert nodestate.desired(root, ["gpu02"]) == {"gpu02": SHARED}  # the drift never became the desired state
    assert nodestate.recorded_inputs(root) == ""  # the next up looks at every node again
    recorded.after = {"gpu01": dict(SHARED), "gpu02": dict(SHARED)}
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["not_repaired"] == []


def test_a_full_converge_never_records_a_nodes_deviation(hosts, rendered, recorded, monkeypatch, capsys) -> None:
    """`up --full` with the same inputs holds every node to its record; a deviation the roles left is named and
    not recorded (it was: the record took whatever the node reported)."""
    from hvdcluster import nodestate

    root = rendered / "c1"
    monkeypatch.setattr(stages, "tracked_run", recorded)
    recorded.after = {"gpu01": dict(SHARED), "gpu02": {**SHARED, "env.files": "added: sitecustomize.py"}}
    capsys.readouterr()
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--full", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["not_repaired"] == ["gpu02: env.files: expected ok, found added: sitecustomize.py (hvd_pyenv did not "
                                   "repair it)"]
    assert nodestate.desired(root, ["gpu01", "gpu02"]) == {"gpu01": SHARED, "gpu02": SHARED}


def test_what_no_role_repairs_is_named_and_not_converged(hosts, rendered, recorded, monkeypatch, capsys) -> None:
    fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": {**SHARED, "os.release": "debian 13"}})
    capsys.readouterr()
    assert cli.main(["up", str(hosts), "-o", str(rendered)]) == 1
    out = capsys.readouterr().out
    assert "not repaired: gpu02: os.release: expected debian 12, found debian 13 (no role repairs it)" in out
    assert recorded.calls == []


@pytest.mark.parametrize("why", ["inputs", "record", "unreachable", "full"])
def test_up_converges_every_node_when_the_fast_path_cannot_be_trusted(hosts, rendered, recorded, monkeypatch,
                                                                      why: str) -> None:
    from hvdcluster import nodestate

    root = rendered / "c1"
    found, unreachable, argv = {"gpu01": dict(SHARED), "gpu02": dict(SHARED)}, {}, []
    if why == "inputs":  # a variable Ansible reads by itself: every role may see it (inputs.change)
        (root / "group_vars" / "all" / "local.yml").write_text("ansible_python_interpreter: /usr/bin/python3\n")
    elif why == "record":
        (root / "state" / "gpu02.json").unlink()
    elif why == "unreachable":
        unreachable = {"gpu02": "unreachable: no route"}
    else:
        argv = ["--full"]
    fake_reading(monkeypatch, found, unreachable)
    assert cli.main(["up", str(hosts), "-o", str(rendered), *argv]) == 0
    # one run of the whole site.yml on every node: no role left out, no node left out
    assert recorded.calls == [{"playbook": "site.yml", "extravars": {"hvd_state_health": True}}]
    assert nodestate.recorded_inputs(root)  # the full converge decides about it, not the fast path


@pytest.mark.parametrize(("change", "drift", "tags"), [
    ("hvd_pyenv_packages: [torch==2.13.0, six]\n", {}, "hvd_pyenv,hvd_horovod,hvd_verify,hvd_state"),
    ("hvd_pyenv_packages: [torch==2.13.0, six]\n", {"mpi.version": "4.1.2"},
     ",".join([*ROLES[ROLES.index("hvd_openmpi"):], "hvd_state"])),  # every role from Open MPI's on
    ("hvd_fabric_interface: ib0\n", {}, "hvd_verify,hvd_state"),  # read by `run` only: the cluster proven again
])
def test_up_after_a_change_of_variables_converges_every_node_from_the_first_role_that_reads_them(
        hosts, rendered, recorded, monkeypatch, capsys, change: str, drift: dict, tags: str) -> None:
    """A package added to the env: every node runs hvd_pyenv and the roles after it (not the base, the mesh, Open
    MPI), or from an earlier role where a node's own drift needs it; the inputs are recorded once it ends well."""
    from hvdcluster import nodestate

    root = rendered / "c1"
    (root / "group_vars" / "all" / "local.yml").write_text(change)
    fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": {**SHARED, **drift}})
    recorded.after = {"gpu01": dict(SHARED), "gpu02": dict(SHARED)}
    capsys.readouterr()
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--json"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert recorded.calls == [{"playbook": "site.yml", "tags": tags,
                               "extravars": {"hvd_targets": "gpu01,gpu02", "hvd_state_health": True}}]
    assert doc["changed_inputs"] == {"variables": [change.split(":")[0]], "roles": tags.split(",")[:-1]}
    assert doc["converged"] == ["gpu01", "gpu02"] and doc["ok"]
    assert f"inputs changed since the last converge: {change.split(':')[0]}" in captured.err
    assert nodestate.recorded_inputs(root) == nodestate.inputs_digest(root)  # the next up takes the fast path


def test_an_up_of_some_roles_keeps_the_record_of_the_last_full_converge(hosts, rendered, recorded, capsys) -> None:
    """`up --tags hvd_preflight` converges no node to the inputs (it records nothing): the last full converge's
    record stays, so a later `up` or `up --rolling` still takes the fast path."""
    from hvdcluster import nodestate

    root = rendered / "c1"
    digest = nodestate.recorded_inputs(root)
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--tags", "hvd_preflight"]) == 0
    assert recorded.calls and recorded.calls[0]["tags"] == "hvd_preflight"
    assert digest and nodestate.recorded_inputs(root) == digest


def test_a_change_of_variables_that_ends_badly_is_not_recorded(hosts, rendered, recorded, monkeypatch,
                                                               capsys) -> None:
    """The nodes read back unlike each other after the converge: named, and the inputs stay unrecorded (the next
    up converges again)."""
    from hvdcluster import nodestate

    root = rendered / "c1"
    (root / "group_vars" / "all" / "local.yml").write_text("hvd_pyenv_packages: [torch==2.13.0, six]\n")
    fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": dict(SHARED)})
    recorded.after = {"gpu01": dict(SHARED), "gpu02": {**SHARED, "env.lock": "l2"}}
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["not_repaired"] and not doc["ok"]
    assert nodestate.recorded_inputs(root) == ""


@pytest.mark.parametrize("changed, kept", [(0, True), (1, False)], ids=["nothing-changed", "node1-changed"])
def test_a_run_that_changed_no_node_keeps_the_record_it_forgot_at_its_start(hosts, rendered, recorded, changed, kept,
                                                                            monkeypatch) -> None:
    """`up --full` with gpu02 unreachable (stopped, or its host key refused): when no node changed, the record made by
    the last full converge is put back as it was (the nodes are as it says: the next `up` reads them against it);
    when gpu01 changed, it stays forgotten (the next `up` converges every node)."""
    from hvdcluster import nodestate

    root = rendered / "c1"
    before = (root / "state" / nodestate.INPUTS).read_bytes()
    real_call = recorded.__call__

    def run(*a, **kw):
        tracker, result = real_call(*a, **kw)
        tracker.hosts["gpu01"].ok, tracker.hosts["gpu01"].changed = 5, changed
        tracker.hosts["gpu02"].unreachable = 1
        assert nodestate.recorded_inputs(root) == ""  # forgotten while the run runs: a run cut short never counts
        return tracker, type("Result", (), {"rc": 4, "log": root / "log", "status": "failed"})()

    recorded.after = {"gpu01": dict(SHARED)}
    monkeypatch.setattr(stages, "tracked_run", run)
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--full"]) == 1
    assert (nodestate.saved_inputs(root) == before) is kept
    assert (nodestate.recorded_inputs(root) == "") is not kept


def test_a_first_converge_that_makes_the_cluster_key_is_recorded_with_it(hosts, rendered, monkeypatch,
                                                                         capsys) -> None:
    """The cluster key is made during the first converge and is one of the inputs: the digest recorded is the one
    after the run, so the next `up` takes the fast path."""
    from hvdcluster import nodestate

    root = rendered / "c1"
    fake = FakeRun()
    fake.after = {"gpu01": dict(SHARED), "gpu02": dict(SHARED)}
    real_call = fake.__call__

    def converge(*a, **kw):
        (root / "ssh").mkdir(exist_ok=True)
        (root / "ssh" / "id_ed25519.pub").write_text("ssh-ed25519 AAAAC3Nza hvdcluster@c1\n")
        return real_call(*a, **kw)

    monkeypatch.setattr(stages, "tracked_run", converge)
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--full"]) == 0
    assert nodestate.recorded_inputs(root) == nodestate.inputs_digest(root)
    fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": dict(SHARED)})
    capsys.readouterr()
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fast_path"]["in_sync"] == ["gpu01", "gpu02"]


def test_check_deep_asks_every_node_to_hash_its_env(hosts: Path, rendered: Path, monkeypatch, capsys) -> None:
    calls = fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": dict(SHARED)})
    cli.main(["check", str(hosts), "-o", str(rendered), "--deep"])
    assert [c[2:] for c in calls] == [("deep",)]


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
