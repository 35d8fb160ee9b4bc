"""Two nodes converged with Open MPI, one PyTorch env and Horovod, then a real training job across them.

`hvdcluster up` builds the env and the Horovod wheel once (or takes them from the controller cache that
the molecule `horovod` scenario filled with the same inputs), and `hvdcluster run -np 4` trains with
hvd.DistributedOptimizer: 4 ranks, 2 per node, identical parameters at the end.
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from tests.cluster.conftest import Cli, changed_tasks, task_outcomes
from tests.lab import Lab

pytestmark = pytest.mark.containers

TRAIN = Path(__file__).with_name("train.py")
LINE = re.compile(r"train rank=(\d+) size=(\d+) local_rank=(\d+) host=(\S+) start=(\w+) params=(\w+) loss=(\S+)")


@pytest.fixture(scope="module")
def lab2(node_image: str, tmp_path_factory: pytest.TempPathFactory) -> Lab:
    stack = {"python": {"packages": ["torch==2.13.0"]}, "horovod": {"frameworks": ["pytorch"]}}
    lab = Lab("ct2", 2, tmp_path_factory.mktemp("ct2"), slots=2, stack=stack)
    lab.up()
    yield lab
    lab.down()


@pytest.fixture(scope="module")
def converged(installed: Path, lab2: Lab) -> Cli:
    cli = Cli(installed, lab2.workdir)
    proc = cli("up", "hosts.yaml")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    for i in (1, 2):  # the job's script, at the same path on every node
        assert lab2.exec(i, "mkdir", "-p", "/srv/job").returncode == 0
        subprocess.run(["docker", "cp", str(TRAIN), f"{lab2.container(i)}:/srv/job/train.py"], check=True)
    return cli


def test_run_trains_on_four_ranks_two_per_node_and_ends_with_identical_parameters(converged, lab2: Lab) -> None:
    proc = converged("run", "-np", "4", "--", "python", "/srv/job/train.py")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    ranks = [LINE.search(line).groups() for line in proc.stdout.splitlines() if LINE.search(line)]
    assert sorted(int(r[0]) for r in ranks) == [0, 1, 2, 3]
    assert {int(r[1]) for r in ranks} == {4}
    assert Counter(r[3] for r in ranks) == {"node1": 2, "node2": 2}
    assert len({r[5] for r in ranks}) == 1, "ranks ended with different parameters"
    assert {r[5] for r in ranks} != {r[4] for r in ranks}, "training did not change the parameters"
    assert len({r[6] for r in ranks}) > 1, "every rank should have seen its own data"


def test_run_print_shows_the_horovodrun_command_without_running_it(converged) -> None:
    proc = converged("run", "--print", "--gloo", "-np", "2", "--", "python", "/srv/job/train.py")
    assert proc.returncode == 0, proc.stderr
    assert "/opt/hvd/env/bin/horovodrun -np 2 -H node1:2,node2:2 --gloo" in proc.stdout
    assert "/opt/hvd/env/bin/python /srv/job/train.py" in proc.stdout
    assert "train rank=" not in proc.stdout


ALLREDUCE = "Allreduce over every slot of every node"
CHECK_BUILD = "Ask horovodrun what it was built with"


def test_second_up_builds_nothing_and_changes_nothing(converged) -> None:
    rc, doc, err = converged.up_json()
    assert rc == 0, err[-4000:]
    assert all(h["changed"] == 0 for h in doc["hosts"].values())
    # nothing the allreduce and the build gate proved has changed: the slow proofs are not repeated,
    # the cheap ones (SSH mesh, mpirun on every node) are
    tasks = task_outcomes(doc["log"])
    assert tasks[ALLREDUCE] == {"skipped"} and tasks[CHECK_BUILD] == {"skipped"}, tasks
    assert tasks["Start one process per node with mpirun and collect the hostnames"] == {"ok"}


def test_up_verify_runs_the_build_gate_and_the_allreduces_anyway(converged) -> None:
    rc, doc, err = converged.up_json("--verify")
    assert rc == 0, err[-4000:]
    assert all(h["changed"] == 0 for h in doc["hosts"].values())
    tasks = task_outcomes(doc["log"])
    assert tasks[ALLREDUCE] == {"ok"} and tasks[CHECK_BUILD] == {"ok"}, tasks
    assert tasks["Check every rank's sum"] == {"ok"}


def test_up_repairs_a_node_whose_horovod_was_removed(converged, lab2: Lab) -> None:
    gone = lab2.exec(2, "/opt/hvd/env/bin/pip", "uninstall", "-y", "-q", "horovod")
    assert gone.returncode == 0, gone.stderr
    assert lab2.exec(2, "test", "-e", "/opt/hvd/env/bin/horovodrun").returncode != 0
    rc, doc, err = converged.up_json()
    assert rc == 0, err[-4000:]
    # node2 gets the wheel again; node1 is left alone
    assert "Install the wheel into the environment" in changed_tasks(doc["log"], "node2")
    assert doc["hosts"]["node1"]["changed"] == 0, changed_tasks(doc["log"], "node1")
    tasks = task_outcomes(doc["log"])
    assert tasks[CHECK_BUILD] == {"ok", "skipped"}, tasks  # the gate again on the repaired node only
    assert tasks[ALLREDUCE] == {"ok"}, tasks  # and the cluster proven again
    check = lab2.exec(2, "/opt/hvd/env/bin/horovodrun", "--check-build")
    assert check.returncode == 0 and "[X] PyTorch" in check.stdout, check.stdout + check.stderr
