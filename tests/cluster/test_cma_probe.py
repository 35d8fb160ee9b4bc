"""hvd_openmpi's probe of Open MPI's single-copy path (roles/hvd_openmpi/files/cma_probe.py), run as the role runs it
(the node's python3, isolated mode) in a bare node container: Docker's seccomp profile refuses process_vm_readv to a
container without CAP_SYS_PTRACE, and allows it with that capability added. What the role makes of each answer (the
parameter file every mpirun reads) is proven on a converged cluster: tests/cluster/test_train.py."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.containers

PROBE = ROOT / "roles" / "hvd_openmpi" / "files" / "cma_probe.py"


def _probe(image: str, *options: str) -> str:
    proc = subprocess.run(["docker", "run", "--rm", "--network", "none", "--user", "nobody", "--entrypoint",
                           "python3", *options, image, "-I", "-c", PROBE.read_text()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip()


def test_a_container_without_ptrace_refuses_the_single_copy_path_and_one_with_it_allows_it(node_image: str) -> None:
    assert _probe(node_image) == "refused: EPERM"
    assert _probe(node_image, "--cap-add", "SYS_PTRACE") == "cma"


LOOK = ROOT / "roles" / "hvd_openmpi" / "files" / "look.py"


def test_the_roles_one_look_reports_each_part_on_a_node_without_open_mpi(node_image: str) -> None:
    """files/look.py as hvd_openmpi runs it (one command for which mpirun, ompi_info and the probe): on a bare node
    nothing is found and ompi_info cannot start (each named by its exit status, the look itself exits 0), and the
    probe's answer is the one it gives alone."""
    proc = subprocess.run(["docker", "run", "--rm", "--network", "none", "--user", "nobody", "--entrypoint",
                           "python3", node_image, "-I", "-c", LOOK.read_text(), PROBE.read_text()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout)
    assert found["which"]["rc"] != 0 and found["which"]["stdout"] == "", found
    assert found["info"]["rc"] == 127 and found["info"]["stdout"] == "", found
    assert found["cma"] == {"rc": 0, "stdout": "refused: EPERM\n", "stderr": ""}, found
