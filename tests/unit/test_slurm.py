"""Slurm (issue 53): hosts.yaml's scheduler, the launch through srun and sbatch (src/hvdcluster/slurm.py,
cli/scheduled.py), health's drains (the node script's drain and resume, node_records.py, with a stand-in scontrol) and
what `check` reads and names (plugins/module_utils/hvd_slurm.slurm_state with stand-in programs, drift's owners)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from hvdcluster import cli, drift, inventory, jobs, slurm, spec
from hvdcluster.errors import SpecError
from hvdcluster.launch import LaunchError
from ansible_collections.hvd.cluster.plugins.module_utils import hvd_files, hvd_slurm

HOSTS = """\
cluster: c1
hosts:
  - {name: gpu01, address: 10.0.0.1, slots: 2}
  - {name: gpu02, address: 10.0.0.2, slots: 2}
"""
SCHEDULER = "scheduler: {kind: slurm, controller: gpu02, partition: debug}\n"


# ------------------------------------------------------------------------------------------ hosts.yaml


def test_the_scheduler_loads_with_its_controller_and_partition_and_defaults_to_the_first_host() -> None:
    cluster = spec.loads(HOSTS + SCHEDULER)
    assert cluster.scheduler == spec.SchedulerSpec(kind="slurm", controller="gpu02", partition="debug")
    assert spec.loads(HOSTS + "scheduler: {kind: slurm}\n").scheduler == spec.SchedulerSpec("slurm", "gpu01", "hvd")
    assert spec.loads(HOSTS).scheduler is None


@pytest.mark.parametrize(("line", "field", "column", "words"), [
    ("scheduler: {kind: slurm, controller: gpu03}", "scheduler.controller", 38, "'gpu03' is not a host of this file"),
    ("scheduler: {kind: slurm, partition: 'gpu queue'}", "scheduler.partition", 37, "is not a partition name"),
    ("scheduler: {kind: slurm, partition: DEFAULT}", "scheduler.partition", 37, "DEFAULT is Slurm's keyword"),
    ("scheduler: {kind: slurm, nodes: 2}", "scheduler.nodes", 26, "unknown key 'nodes'"),
    ("scheduler: {kind: pbs}", "scheduler.kind", 19, "invalid choice 'pbs' (allowed: slurm)"),
    ("scheduler: {controller: gpu01}", "scheduler.kind", 12, "required key 'kind' is missing"),
])
def test_a_bad_scheduler_is_one_error_at_its_line_column_and_field(line, field, column, words) -> None:
    with pytest.raises(SpecError) as caught:
        spec.loads(HOSTS + line + "\n", "hosts.yaml")
    err = caught.value
    assert (err.line, err.column, err.field) == (5, column, field) and words in err.message, str(err)
    assert str(err).startswith(f"hosts.yaml:5:{column}: {field}: ") and err.exit_code == 2


def test_the_inventory_names_the_scheduler_and_the_roles_variables(tmp_path: Path) -> None:
    root = inventory.render(spec.loads(HOSTS + SCHEDULER), tmp_path)
    variables = inventory.read(root).vars
    assert variables["hvd_scheduler"] == {"kind": "slurm", "controller": "gpu02", "partition": "debug"}
    assert (variables["hvd_slurm_controller"], variables["hvd_slurm_partition"]) == ("gpu02", "debug")
    assert variables["hvd_openmpi_slurm"] is True
    plain = inventory.read(inventory.render(spec.loads(HOSTS.replace("c1", "c2")), tmp_path)).vars
    assert not any(name.startswith(("hvd_scheduler", "hvd_slurm", "hvd_openmpi_slurm")) for name in plain)


CONTAINERS = ("scheduler:\n  kind: slurm\n  containers: pyxis\n  enroot: {url: %s}\n"
              "  pyxis: {url: https://mirror.example/pyxis-0.24.0.tar.gz, sha256: %s}\n")


def test_container_jobs_take_both_releases_and_the_inventory_passes_them_to_hvd_pyxis(tmp_path: Path) -> None:
    tarball = tmp_path / "enroot-4.1.2.tar.gz"
    tarball.write_bytes(b"not read here")
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(HOSTS + CONTAINERS % ("./enroot-4.1.2.tar.gz", "ab" * 32))
    sched = spec.load(str(hosts)).scheduler
    assert (sched.containers, sched.enroot, sched.pyxis) == (
        "pyxis", {"url": str(tarball)}, {"url": "https://mirror.example/pyxis-0.24.0.tar.gz", "sha256": "ab" * 32})
    variables = inventory.read(inventory.render(spec.load(str(hosts)), tmp_path / "inv")).vars
    assert variables["hvd_scheduler"]["containers"] == "pyxis"
    assert (variables["hvd_pyxis_enroot_url"], variables["hvd_pyxis_url"], variables["hvd_pyxis_sha256"]) == (
        str(tarball), "https://mirror.example/pyxis-0.24.0.tar.gz", "ab" * 32)
    assert "hvd_pyxis_enroot_sha256" not in variables  # the role's pinned `git archive` digest


@pytest.mark.parametrize(("text", "line", "field", "words"), [
    (CONTAINERS % ("./missing.tar.gz", "ab" * 32), 8, "scheduler.enroot.url", "file not found"),
    (CONTAINERS % ("https://u:p@mirror.example/e.tar.gz", "ab" * 32), 8, "scheduler.enroot.url",
     "a URL with a user or a query is not taken here"),
    (CONTAINERS % ("https://mirror.example/e.tar.gz", "abc"), 9, "scheduler.pyxis.sha256", "sha256"),
    ("scheduler: {kind: slurm, containers: docker}", 5, "scheduler.containers", "invalid choice 'docker'"),
    ("scheduler: {kind: slurm, containers: pyxis, pyxis: {url: 'https://m.example/p.tgz'}}", 5, "scheduler.enroot.url",
     "enroot is published only on GitHub"),
    ("scheduler: {kind: slurm, enroot: {url: 'https://m.example/e.tgz'}}", 5, "scheduler.enroot",
     "only with scheduler.containers: pyxis"),
])
def test_bad_container_job_settings_are_one_error_at_their_line_and_field(tmp_path: Path, text, line, field,
                                                                         words) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(HOSTS + text + "\n")
    with pytest.raises(SpecError) as caught:
        spec.load(str(hosts))
    err = caught.value
    assert (err.line, err.field) == (line, field) and words in err.message, str(err)


# ------------------------------------------------------------------------------------------ srun and sbatch


def test_srun_starts_every_task_with_pmix_through_env_without_the_nodes_import_variables() -> None:
    job = slurm.shape({"n1": 2, "n2": 2}, {"n1": 0, "n2": 0}, None, None)
    assert (job.nodes, job.per_node, job.tasks, job.gpus) == (2, 2, 4, 0)
    command = slurm.task_command({"hvd_pyenv_prefix": "/opt/env"}, ["python", "/srv/job/train.py"])
    argv = slurm.srun_argv("debug", job, command, "10")
    assert argv[:8] == ["srun", "--mpi=pmix", "--partition=debug", "--nodes=2", "--ntasks-per-node=2",
                        "--kill-on-bad-exit=1", "--job-name=hvdcluster", "--time=10"]
    assert argv[8] == "env" and "-u" in argv and "PYTHONPATH" in argv and "PYTHONNOUSERSITE=1" in argv
    assert argv[-2:] == ["/opt/env/bin/python", "/srv/job/train.py"]
    shell = slurm.remote(slurm.environment({"hvd_pyenv_prefix": "/opt/env"}), argv)
    assert "export PATH=/opt/env/bin:" in shell and "; exec srun --mpi=pmix" in shell


def test_gpus_per_node_are_asked_for_where_every_node_has_as_many() -> None:
    assert slurm.shape({"a": 8, "b": 8}, {"a": 8, "b": 8}, 1, None).options() == [
        "--nodes=1", "--ntasks-per-node=8", "--gpus-per-node=8"]
    assert slurm.shape({"a": 8, "b": 8}, {"a": 8, "b": 4}, None, None).gpus == 0


@pytest.mark.parametrize(("slots", "nodes", "per_node", "words"), [
    ({"a": 2, "b": 2}, 3, None, "-N 3: the cluster has 2 nodes; write -N 1 to -N 2"),
    ({"a": 2, "b": 4}, None, None, "the nodes' slots differ (a:2, b:4); write --ntasks-per-node K"),
    ({"a": 2}, None, 0, "--ntasks-per-node must be at least 1"),
])
def test_a_job_shape_slurm_cannot_take_says_what_to_write(slots, nodes, per_node, words) -> None:
    with pytest.raises(LaunchError, match=words.replace("(", r"\(").replace(")", r"\)")):
        slurm.shape(slots, {}, nodes, per_node)


def test_the_batch_script_asks_for_the_jobs_shape_activates_the_env_and_runs_srun_with_pmix() -> None:
    job = slurm.Shape(2, 2)
    script = slurm.batch_script("debug", job, ["env", "-u", "PYTHONPATH", "/opt/env/bin/python", "a b.py"],
                                slurm.environment({"hvd_pyenv_prefix": "/opt/env"}), "20261128T101010-7", "lab", "1:00:00")
    lines = script.splitlines()
    assert lines[:7] == ["#!/bin/bash", "#SBATCH --job-name=hvdcluster-20261128T101010-7", "#SBATCH --partition=debug",
                         "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=2", "#SBATCH --time=1:00:00",
                         "#SBATCH --output=hvdcluster-%j.out"]
    assert lines[-1] == "srun --mpi=pmix --kill-on-bad-exit=1 env -u PYTHONPATH /opt/env/bin/python 'a b.py'"
    assert "set -e" in lines and any("VIRTUAL_ENV=/opt/env" in line for line in lines)
    assert slurm.job_id("Submitted...\n4242\n") == "4242" and slurm.job_id("4243;lab\n") == "4243"
    assert slurm.job_id("sbatch: error: Batch job submission failed\n") is None


@pytest.mark.parametrize("value", ["90", "30:00", "01:30:00", "1-12", "1-12:00", "1-12:00:00", "UNLIMITED"])
def test_slurm_time_limits_are_taken_as_slurm_writes_them(value: str) -> None:
    assert slurm.check_time(value) == value


def test_a_time_limit_slurm_would_not_take_says_how_to_write_one() -> None:
    with pytest.raises(LaunchError, match=r"--time '1h' is not a Slurm time limit: write minutes \(90\)"):
        slurm.check_time("1h")


@pytest.fixture
def rendered(tmp_path: Path) -> tuple[Path, Path]:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(HOSTS + SCHEDULER)
    inventory.render(spec.load(hosts), tmp_path / "inv")
    return hosts, tmp_path / "inv"


@pytest.mark.parametrize(("extra", "words"), [
    (["--slurm", "-np", "4"], "run --slurm: -np is horovodrun's: write -N NODES --ntasks-per-node K"),
    (["--slurm", "--gloo"], "run --slurm: every task is an MPI process srun starts"),
    (["--sbatch", "--limit", "gpu01"], "run --sbatch: Slurm chooses the nodes of the partition"),
    (["--sbatch", "--network-interface", "eth1"], "--network-interface is horovodrun's"),
    (["-N", "2"], "run: -N only with --slurm or --sbatch (horovodrun takes -np)"),
    (["--slurm", "--time", "2h"], "--time '2h' is not a Slurm time limit"),
])
def test_run_refuses_horovodrun_and_slurm_options_together_saying_what_to_write(rendered, capsys, extra, words) -> None:
    hosts, out = rendered
    assert cli.main(["run", str(hosts), "-o", str(out), *extra, "--", "python", "x.py"]) == 2
    assert words in capsys.readouterr().err


def test_run_slurm_without_a_scheduler_exits_2_naming_what_to_add(tmp_path: Path, capsys) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(HOSTS)
    inventory.render(spec.load(hosts), tmp_path / "inv")
    assert cli.main(["run", str(hosts), "-o", str(tmp_path / "inv"), "--slurm", "--", "python", "x.py"]) == 2
    assert "names no scheduler: add `scheduler: {kind: slurm, controller: NODE}`" in capsys.readouterr().err
    assert cli.main(["health", str(hosts), "-o", str(tmp_path / "inv"), "--drain"]) == 2
    assert "health --drain: " in capsys.readouterr().err


def test_run_slurm_print_shows_srun_on_the_controller_node_and_sbatch_print_the_script(rendered, capsys) -> None:
    hosts, out = rendered
    assert cli.main(["run", str(hosts), "-o", str(out), "--slurm", "--print", "--", "python", "t.py"]) == 0
    line = capsys.readouterr().out
    assert "@10.0.0.2" in line and "srun --mpi=pmix --partition=debug --nodes=2 --ntasks-per-node=2" in line
    assert cli.main(["run", str(hosts), "-o", str(out), "--sbatch", "-N", "1", "--print", "--", "python", "t.py"]) == 0
    script = capsys.readouterr().out
    assert "#SBATCH --nodes=1" in script and script.rstrip().endswith("t.py")


def test_sbatch_keeps_its_script_beside_the_runs_record_0700_and_prints_the_job_id(rendered, capsys, monkeypatch) -> None:
    from hvdcluster.cli import run as run_cli

    hosts, out = rendered
    monkeypatch.setattr(run_cli, "_health_gate", lambda root, nodes: False)
    monkeypatch.setattr(run_cli, "_launch_gate", lambda root, nodes: {n: {"gpu.count": 0} for n in nodes})
    sent: list = []

    def sbatch(argv, **kwargs):
        sent.append((argv, kwargs.get("input")))
        return subprocess.CompletedProcess(argv, 0, "4242\n", "")

    monkeypatch.setattr(subprocess, "run", sbatch)
    assert cli.main(["run", str(hosts), "-o", str(out), "--sbatch", "--time", "5", "--", "python", "t.py"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "4242\n" and "submitted as Slurm job 4242" in captured.err
    [(argv, script)] = sent
    assert argv[-1] == "sbatch --parsable" and "@10.0.0.2" in argv[-2] and "#SBATCH --time=5" in script
    [folder] = (out / "c1" / "runs").glob("sbatch-*")
    assert (folder / "job.sh").read_text() == script
    assert folder.stat().st_mode & 0o777 == 0o700 and (out / "c1" / "runs").stat().st_mode & 0o777 == 0o700
    assert json.loads((folder / "record.json").read_text())["job_id"] == "4242"


# ------------------------------------------------------------------------------------------ health --drain


def look(state: str = "IDLE", reason: str = "", error: str | None = None) -> jobs.Look:
    line = f"NodeName=n State={state}" + (f" Reason={reason} [root@2026-11-28T10:00:00]" if reason else "")
    return jobs.Look("n", slurm=jobs.slurm_fields(line), error=error)


def test_health_drains_a_failing_node_resumes_only_its_own_drain_and_leaves_an_operators() -> None:
    failing = {"healthy": False, "findings": [{"item": "gpu.xid.0000:91:00.0.79", "severity": "fail"},
                                              {"item": "gpu.ecc", "severity": "fail"},
                                              {"item": "kernel_log", "severity": "warn"}]}
    healthy = {"healthy": True, "findings": []}
    report = {"a": failing, "b": healthy, "c": healthy, "d": failing, "e": healthy}
    looks = {"a": look(), "b": look("IDLE+DRAIN", "hvdcluster health: gpu.ecc"), "c": look("IDLE+DRAIN", "bad fan"),
             "d": look("IDLE+DRAIN", "bad fan"), "e": look(error="unreachable")}
    drain, resume, left = slurm.drain_plan(report, looks)
    assert drain == {"a": "hvdcluster health: gpu.xid.0000:91:00.0.79 (+1 more)"}
    assert resume == ["b"]
    assert left == {"c": "out of service in Slurm by someone else (bad fan): left as it is",
                    "d": "already out of service in Slurm (bad fan)"}


FAKE_SCONTROL = """#!/bin/sh
# A node's Slurm record kept in $STATE, as scontrol would show and update it; each update is logged in $STATE.log.
case "$1" in
  -o) printf 'NodeName=%s %s\\n' "$(hostname -s)" "$(cat "$STATE")" ;;
  update) echo "$*" >> "$STATE.log"
          case "$*" in
            *state=DRAIN*) printf 'State=IDLE+DRAIN Reason=%s [root@2026-11-28T10:00:00]' "${4#reason=}" > "$STATE" ;;
            *state=RESUME*) printf 'State=IDLE' > "$STATE" ;;
          esac ;;
esac
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="the node script updates Slurm as root (else through sudo -n)")
def test_the_node_script_drains_with_healths_reason_and_resumes_only_a_drain_of_healths(tmp_path, monkeypatch) -> None:
    """A stand-in scontrol (FAKE_SCONTROL) holds the node's record; squeue lists no job."""
    bin_dir, folder = tmp_path / "bin", tmp_path / "run"
    bin_dir.mkdir()
    folder.mkdir(mode=0o700)
    for name, body in (("scontrol", FAKE_SCONTROL), ("squeue", "#!/bin/sh\nexit 0\n")):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    state = tmp_path / "state"
    state.write_text("State=IDLE")
    monkeypatch.setattr(jobs, "DIR", str(folder))

    def node(**kwargs) -> jobs.Look:
        proc = subprocess.run(["sh", "-c", jobs.script(**kwargs)], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin", "STATE": str(state)})
        return jobs.parse("n", proc.returncode, proc.stdout, proc.stderr)

    reason = "hvdcluster health: gpu.ecc"
    assert node(slurm="drain", reason=reason).drained_by == reason
    assert node(slurm="resume", resume_prefix=jobs.HEALTH_REASON).drained_by == ""
    state.write_text("State=IDLE+DRAIN Reason=bad fan [root@2026-11-28T10:00:00]")
    assert node(slurm="resume", resume_prefix=jobs.HEALTH_REASON).drained_by == "bad fan"  # an operator's: left
    assert node(slurm="drain", reason=reason).drained_by == "bad fan"  # never drained over
    assert (tmp_path / "state.log").read_text().count("update") == 2
    with pytest.raises(ValueError):
        jobs.script(slurm="resume", resume_prefix="bad fan")  # only a prefix of hvdcluster's own reasons


# ------------------------------------------------------------------------------------------ check


def programs(scontrol: tuple[int, str], munge: int = 0):
    """A stand-in for the programs the reader runs: munge and unmunge answer ``munge``, scontrol ``scontrol``."""
    def run(argv, stdin=None):
        if argv[0] == "munge":
            return munge, "MUNGE:cred:" if munge == 0 else "munge: Error: Failed to access socket"
        if argv[0] == "unmunge":
            return 0, "STATUS: Success (0)"
        assert argv == ["scontrol", "-o", "show", "node", "gpu02"]
        return scontrol
    return run


def fake_root(tmp_path: Path, daemons: list[str]) -> str:
    for n, name in enumerate(daemons, 100):
        (tmp_path / "proc" / str(n)).mkdir(parents=True)
        (tmp_path / "proc" / str(n) / "comm").write_text(name + "\n")
    (tmp_path / "etc" / "slurm").mkdir(parents=True)
    (tmp_path / "etc" / "slurm" / "slurm.conf").write_text("ClusterName=lab\n")
    return str(tmp_path)


def test_the_reader_names_slurm_files_daemons_munge_and_the_node_as_slurmctld_has_it(tmp_path: Path) -> None:
    root = fake_root(tmp_path, ["sshd", "slurmd", "munged"])
    ok = (0, "NodeName=gpu02 State=IDLE+DRAIN Partitions=debug Reason=bad fan [root@2026-11-28T10:00:00]\n")
    state = hvd_slurm.slurm_state(root, "controller", programs(ok), "gpu02")
    assert state["slurm.config.slurm.conf"] == hvd_files.d16(b"ClusterName=lab\n")
    assert state["slurm.config.gres.conf"] == "absent"
    assert (state["slurm.slurmd"], state["slurm.slurmctld"], state["slurm.munge"]) == ("running", "not running", "ok")
    assert (state["slurm.node"], state["slurm.drain"]) == ("ok", "bad fan (set by root)")
    refused = (1, "slurm_load_node error: Zero Bytes were transmitted or received\n")
    state = hvd_slurm.slurm_state(root, "node", programs(refused), "gpu02")
    assert state["slurm.munge"].startswith("the Slurm controller refuses this node's munge credentials")
    assert "slurm.slurmctld" not in state
    down = (1, "slurm_load_node error: Unable to contact slurm controller (connect failure)\n")
    assert hvd_slurm.slurm_state(root, "node", programs(down), "gpu02")["slurm.node"] == (
        "cannot reach the Slurm controller: slurm_load_node error: Unable to contact slurm controller (connect failure)")
    assert hvd_slurm.slurm_state(root, "node", programs(ok, munge=1), "gpu02")["slurm.munge"].startswith(
        "munged does not answer: munge: Error")


def test_the_reader_says_whether_slurms_pmix_plugin_can_load_pmix_and_slurmd_started_after_it(tmp_path: Path) -> None:
    """Debian's mpi/pmix plugin loads <dir>/lib/libpmix.so by the path it was built with (a string in the plugin),
    a link only libpmix-dev ships: without it, or with a slurmd started before it was there, `srun --mpi=pmix`
    cannot start ranks on the node (a 2-node lab's steps timed out launching on the node that lacked it)."""
    root = Path(fake_root(tmp_path, ["slurmd"]))
    assert hvd_slurm.pmix_state(str(root)) == "absent"  # no plugin: nothing to judge
    plugins = root / "usr/lib/x86_64-linux-gnu/slurm-wlm"
    plugins.mkdir(parents=True)
    (plugins / "mpi_pmix_v4.so").write_bytes(b"\x7fELF\x00mpi/pmix\x00/usr/lib/x86_64-linux-gnu/pmix2/lib\x00%s\x00")
    lib = root / "usr/lib/x86_64-linux-gnu/pmix2/lib"
    lib.mkdir(parents=True)
    (lib / "libpmix.so.2.6.2").write_bytes(b"\x7fELF")
    (lib / "libpmix.so.2").symlink_to("libpmix.so.2.6.2")  # libpmix2, the runtime package, alone
    said = hvd_slurm.pmix_state(str(root))
    assert said.startswith("/usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so missing") and "libpmix-dev" in said
    (lib / "libpmix.so").symlink_to("libpmix.so.2.6.2")
    assert hvd_slurm.pmix_state(str(root)) == "ok"  # /proc says nothing of when slurmd started: the link is enough
    installed = os.lstat(lib / "libpmix.so").st_ctime
    ticks = os.sysconf("SC_CLK_TCK")
    (root / "proc/stat").write_text(f"cpu  1 2 3\nbtime {int(installed) - 1000}\n")
    stat = root / "proc/100/stat"
    fields = ["S"] + ["0"] * 18  # state, then fields 4-21; field 22 is starttime
    stat.write_text(f"100 (slurmd) {' '.join(fields)} {(1000 - 60) * ticks} 0 0\n")  # 60 s before the link
    assert hvd_slurm.pmix_state(str(root)).startswith("slurmd started before /usr/lib/x86_64-linux-gnu/pmix2/lib/")
    stat.write_text(f"100 (slurmd) {' '.join(fields)} {(1000 + 60) * ticks} 0 0\n")  # started again after it
    assert hvd_slurm.pmix_state(str(root)) == "ok"
    assert hvd_slurm.slurm_state(str(root), "node", programs((0, "NodeName=gpu02 State=IDLE\n")), "gpu02")[
        "slurm.pmix"] == "ok"
    (lib / "libpmix.so").unlink()
    found = {"slurm.pmix": hvd_slurm.pmix_state(str(root))}
    [d] = drift.self_evident("gpu02", found)  # wrong whatever the record says; hvd_slurm installs it
    assert (d.item, d.expected, d.role) == ("slurm.pmix", "ok", "hvd_slurm")


def test_check_names_slurm_drifts_with_hvd_slurm_and_an_operators_drain_as_a_notice() -> None:
    record = {"slurm.config.slurm.conf": "aaaa", "slurm.slurmd": "running", "slurm.munge": "ok", "slurm.node": "ok",
              "slurm.drain": "absent", "pkg.slurmd": "22.05.8-4", "pkg.munge.hold": True}
    found = {"n1": {**record, "slurm.drain": "bad fan (set by root)"},
             "n2": {**record, "slurm.config.slurm.conf": "bbbb", "slurm.slurmd": "not running",
                    "slurm.munge": "the Slurm controller refuses this node's munge credentials: ...",
                    "slurm.node": "down: Not responding (set by slurm)", "pkg.munge.hold": False}}
    report = drift.compare({"n1": record, "n2": record}, found)
    assert report.in_sync == ["n1"]
    assert {d.item: d.role for d in report.drifted["n2"]} == {
        "slurm.config.slurm.conf": "hvd_slurm", "slurm.slurmd": "hvd_slurm", "slurm.munge": "hvd_slurm",
        "slurm.node": "hvd_slurm", "pkg.munge.hold": "hvd_slurm"}
    assert drift.notices(found) == {"n1": {"slurm.drain": "bad fan (set by root)"}}
    # `run`'s gate (horovodrun over SSH) does not go through Slurm: a Slurm problem does not refuse it
    assert drift.gate(found) == []
    assert drift.ROLES.index("hvd_slurm") == drift.ROLES.index("hvd_openmpi") + 1


def test_a_node_without_a_record_is_not_held_to_the_controllers_slurmctld_nor_its_gpus() -> None:
    """A node added to the cluster (no record yet) against the controller's record: slurmctld runs on the controller
    only, and gres.conf names each node's own GPUs; the items every node shares still count."""
    controller = {"slurm.slurmctld": "running", "slurm.slurmd": "running", "slurm.config.gres.conf": "g8",
                  "slurm.config.slurm.conf": "aaaa"}
    added = {"slurm.slurmd": "running", "slurm.config.gres.conf": "g4", "slurm.config.slurm.conf": "aaaa"}
    assert drift.compare({"n1": controller, "n2": None}, {"n1": controller, "n2": added}).in_sync == ["n1", "n2"]
    odd = drift.compare({"n1": controller, "n2": None}, {"n1": controller, "n2": {**added,
                                                                                  "slurm.config.slurm.conf": "bbbb"}})
    assert [d.item for d in odd.drifted["n2"]] == ["slurm.config.slurm.conf"]
