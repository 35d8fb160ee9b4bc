"""README's demo command, as written: `tests/demo.sh` brings up three bare Debian 12 nodes and converges them with
`hvdcluster up` (the post-flight's allreduce over every node proves them), and `tests/demo.sh down` leaves no
container or network of the demo behind.

In the heavy set: it converges three nodes more, which test_up's suite already proves on the same roles; this is the
proof that the quickstart's own script works.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.cluster.conftest import task_outcomes
from tests.conftest import ROOT
from tests.lab.images import LABEL, docker

pytestmark = [pytest.mark.containers, pytest.mark.heavy]


def _left() -> list[str]:
    """The demo's containers and networks that exist now."""
    containers = docker("ps", "-aq", "--filter", f"label={LABEL}=demo").split()
    networks = docker("network", "ls", "-q", "--filter", "name=^hvdc-demo$").split()
    return containers + networks


def test_the_demo_converges_three_nodes_proves_them_and_down_leaves_nothing(node_image: str) -> None:
    subprocess.run([str(ROOT / "tests" / "demo.sh"), "down"], check=True, capture_output=True)
    up = subprocess.run([str(ROOT / "tests" / "demo.sh"), "--json"], cwd=ROOT, capture_output=True, text=True)
    try:
        assert up.returncode == 0, up.stderr[-6000:]
        doc = json.loads(up.stdout)
        assert doc["ok"] and sorted(doc["hosts"]) == ["node1", "node2", "node3"], doc["hosts"]
        outcomes = task_outcomes(doc["log"])
        for task in ("Check that mpirun reached every node", "Allreduce over every slot of every node",
                     "Check every rank's sum"):
            assert outcomes.get(task) == {"ok"}, (task, outcomes.get(task))
        assert len(_left()) == 4  # three nodes and their network
    finally:
        down = subprocess.run([str(ROOT / "tests" / "demo.sh"), "down"], capture_output=True, text=True)
    assert down.returncode == 0, down.stderr
    assert _left() == []
