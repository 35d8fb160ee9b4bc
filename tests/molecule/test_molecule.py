"""Molecule scenarios: converge, idempotence (a second converge changes nothing) and verify, in containers."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.conftest import BIN, ROOT, tool

SCENARIOS = sorted(p.name for p in (ROOT / "molecule").iterdir() if (p / "molecule.yml").is_file())
# Scenarios that need something this machine may not have, and why they are skipped without it.
NEEDS = {
    "conda": ("HVD_CONDA_INSTALLER", "no conda channel is reachable here: set HVD_CONDA_INSTALLER (Miniforge or "
              "micromamba URL/path) and HVD_CONDA_INSTALLER_SHA256 to run the conda scenario"),
}


@pytest.mark.containers
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_molecule_scenario_converges_idempotently_and_verifies(scenario: str, node_image: str) -> None:
    variable, reason = NEEDS.get(scenario, (None, ""))
    if variable and not os.environ.get(variable):
        pytest.skip(reason)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "ANSIBLE_NOCOLOR": "1",
           "NO_COLOR": "1", "PY_COLORS": "0"}
    proc = subprocess.run([tool("molecule"), "test", "-s", scenario], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-8000:]
