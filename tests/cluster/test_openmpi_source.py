"""Open MPI built from source, for real: Debian's unchanged upstream tarball (tests/debsrc.py) fed to hvd_openmpi as
a controller path with its sha256, built once on one node, cached on the controller, carried node to node and
installed on both nodes of a 2-node cluster (a non-root sudo user); Horovod built against it, a 4-rank allreduce
under `horovodrun --mpi`, a second `up` that changes nothing, and a removed `mpirun` link named by `check` and
repaired by `up`.

The packed build is cached in the controller cache (HVDCLUSTER_CACHE, by default ~/.cache/hvdcluster), keyed by
what affects it: a rerun builds nothing and takes only the install. The cold build time and the up times are
written to the lab's folder (timings.json) and printed (pytest -s).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import sha256_of

from tests.cluster.conftest import SUDO_USER, Cli, changed_tasks, run_events, share_the_cores, task_outcomes
from tests.debsrc import orig_tarball
from tests.lab import Lab

pytestmark = pytest.mark.containers

NAME = "oms"
VERSION = "4.1.4"
PREFIX = f"/opt/hvd/openmpi-{VERSION}"
COMPILE = "Compile (several minutes)"
UNPACK = "Check its sha256, unpack it beside the prefix, mark it with the build key, then swap it in"
CACHED = "Verify the cached artifact (a corrupt or truncated one is removed and built again)"  # hvd_fanout's
TIMES: dict[str, float] = {}


@pytest.fixture(scope="module")
def lab(node_image: str, tmp_path_factory: pytest.TempPathFactory) -> Lab:
    tarball = Path(orig_tarball("openmpi"))
    assert tarball.name == f"openmpi_{VERSION}.orig.tar.xz", tarball
    stack = {"python": {"packages": ["torch==2.13.0"]}, "horovod": {"frameworks": ["pytorch"]},
             "mpi": {"source": "source", "version": VERSION, "url": str(tarball), "sha256": sha256_of(tarball)}}
    lab = Lab(NAME, 2, tmp_path_factory.mktemp(NAME), slots=2, stack=stack, user=SUDO_USER)
    lab.up()
    share_the_cores(lab)
    yield lab
    (lab.workdir / "timings.json").write_text(json.dumps(TIMES, indent=1) + "\n")
    print(f"\nopenmpi-from-source timings: {json.dumps(TIMES)}")
    lab.down()


def _timed_up(cli: Cli, label: str, *args: str) -> tuple[int, dict, str]:
    start = time.monotonic()
    out = cli.up_json(*args)
    TIMES[label] = round(time.monotonic() - start, 1)
    return out


def _task_seconds(log: str, task: str) -> float:
    """Wall seconds of a task's runs in the run whose log `up --json` names (0 where it did not run)."""
    total = 0.0
    for event in run_events(log):
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and data.get("task") == task and data.get("duration"):
            total += float(data["duration"])
    return total


@pytest.fixture(scope="module")
def converged(installed: Path, lab: Lab) -> tuple[Cli, dict]:
    cli = Cli(installed, lab.workdir)
    rc, doc, err = _timed_up(cli, "first_up_s")
    assert rc == 0, err[-6000:]
    TIMES["compile_s"] = round(_task_seconds(doc["log"], COMPILE), 1)
    return cli, doc


def _hosts_ok(log: str, task: str) -> set[str]:
    return {e["event_data"]["host"] for e in run_events(log)
            if e.get("event") == "runner_on_ok" and e["event_data"].get("task") == task}


def test_open_mpi_is_built_at_most_once_and_installed_from_the_same_archive_on_every_node(converged) -> None:
    _, doc = converged
    log = doc["log"]
    cache_hit = [e["event_data"]["res"].get("valid") for e in run_events(log)
                 if e.get("event") == "runner_on_ok" and e["event_data"].get("task") == CACHED
                 and "/openmpi/" in str(e["event_data"]["res"].get("path"))]
    assert len(cache_hit) == 1, cache_hit  # run once, on the controller
    built_on = _hosts_ok(log, COMPILE)
    # a cold cache: exactly one node compiled; a warm one: none did
    assert built_on == (set() if cache_hit[0] else {"node1"}), (cache_hit, built_on)
    assert all(UNPACK in changed_tasks(log, node) for node in ("node1", "node2"))


def test_a_non_interactive_ssh_command_finds_the_built_mpirun_on_every_node(converged, lab: Lab) -> None:
    probe = ("command -v mpirun && readlink -f \"$(command -v mpirun)\" && command -v orted && "
             "ompi_info --parsable | grep -E '^(ompi:version:full|path:prefix):'")
    for target in ("node1", "node2"):  # as mpirun reaches its peers: the login user, over the mesh, no login shell
        proc = lab.exec(1, "ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", target, probe,
                        user=SUDO_USER)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        lines = proc.stdout.split()
        assert lines[0] == "/usr/local/bin/mpirun" and lines[1].startswith(f"{PREFIX}/bin/"), lines
        assert f"ompi:version:full:{VERSION}" in lines and f"path:prefix:{PREFIX}" in lines, lines
    # no distro Open MPI underneath
    for i in (1, 2):
        assert lab.exec(i, "sh", "-c", "dpkg -l 'openmpi-bin' 2>/dev/null | grep -q '^ii'").returncode != 0


def test_horovods_check_build_lists_mpi(converged, lab: Lab) -> None:
    for i in (1, 2):
        check = lab.exec(i, "/opt/hvd/env/bin/horovodrun", "--check-build")
        assert check.returncode == 0, check.stdout + check.stderr
        assert re.search(r"\[X\] MPI", check.stdout), check.stdout
        linked = lab.exec(i, "sh", "-c", "ldd /opt/hvd/env/lib/python3.11/site-packages/horovod/torch/mpi_lib_v2*.so "
                                         "| grep libmpi.so")
        assert PREFIX in linked.stdout, linked.stdout + linked.stderr


ALLREDUCE = ("import torch, horovod.torch as hvd; hvd.init(); "
             "s = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum); "
             "print(f'allreduce rank={hvd.rank()} size={hvd.size()} mpi={hvd.mpi_enabled()} sum={s.item():.0f}')")


def test_four_ranks_allreduce_under_horovodrun_mpi(converged, lab: Lab) -> None:
    cli, _ = converged
    proc = cli("run", "hosts.yaml", "--mpi", "-np", "4", "--", "python", "-c", ALLREDUCE)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    printed = cli("run", "hosts.yaml", "--print", "--mpi", "-np", "4", "--", "python", "-c", "pass")
    assert "-np 4 -H node1:2,node2:2 --mpi" in printed.stdout, printed.stdout
    seen = re.findall(r"allreduce rank=(\d) size=(\d) mpi=(\w+) sum=(\d+)", proc.stdout)
    assert sorted(s[0] for s in seen) == ["0", "1", "2", "3"], proc.stdout
    assert {s[1:] for s in seen} == {("4", "True", "10")}, seen


def test_a_second_up_changes_nothing(converged) -> None:
    cli, _ = converged
    rc, doc, err = _timed_up(cli, "second_up_s")
    assert rc == 0, err[-4000:]
    assert all(h["changed"] == 0 for h in doc["hosts"].values()), doc["hosts"]
    rc, doc, err = _timed_up(cli, "second_full_up_s", "--full")
    assert rc == 0, err[-4000:]
    assert all(h["changed"] == 0 for h in doc["hosts"].values()), {
        n: changed_tasks(doc["log"], n) for n in doc["hosts"]}
    assert task_outcomes(doc["log"]).get(COMPILE, {"skipped"}) == {"skipped"}


def test_check_mode_on_the_converged_cluster_changes_nothing(converged) -> None:
    cli, _ = converged
    rc, doc, err = _timed_up(cli, "check_mode_up_s", "--check")
    assert rc == 0, err[-4000:]
    assert all(h["changed"] == 0 for h in doc["hosts"].values()), doc["hosts"]


def test_a_removed_mpirun_link_is_named_by_check_and_repaired_by_up(converged, lab: Lab) -> None:
    cli, _ = converged
    assert lab.exec(2, "rm", "/usr/local/bin/mpirun").returncode == 0
    proc = cli("check", "hosts.yaml", "--json")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1 and list(doc["drifted"]) == ["node2"], doc
    named = {d["item"]: d for d in doc["drifted"]["node2"]}
    assert "mpi.path" in named and named["mpi.path"]["role"] == "hvd_openmpi", doc["drifted"]["node2"]
    rc, up, err = _timed_up(cli, "repair_up_s")
    assert rc == 0, err[-4000:]
    assert up["converged"] == ["node2"] and up["hosts"]["node1"]["changed"] == 0, up.get("fast_path")
    assert lab.exec(2, "test", "-L", "/usr/local/bin/mpirun").returncode == 0
    proc = cli("check", "hosts.yaml", "--json")
    assert proc.returncode == 0, proc.stdout[-3000:]
