"""hvd_openmpi's probe of Open MPI's single-copy path (roles/hvd_openmpi/files/cma_probe.py), run as the role runs it
(the node's python3, isolated mode) in a bare node container: Docker's seccomp profile refuses process_vm_readv to a
container without CAP_SYS_PTRACE, and allows it with that capability added. What the role makes of each answer (the
parameter file every mpirun reads) is proven on a converged cluster: tests/cluster/test_train.py."""

from __future__ import annotations

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
