"""Molecule scenarios: converge, idempotence (a second converge changes nothing) and verify, in containers."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.conftest import BIN, ROOT, tool

SCENARIOS = sorted(p.name for p in (ROOT / "molecule").iterdir() if (p / "molecule.yml").is_file())


def _conda_channel() -> dict[str, str]:
    """The conda scenario's local channel (built offline with rattler-build, cached by its recipes' hash)."""
    from tests.conda_channel import build  # noqa: PLC0415 - only this scenario needs it

    return {"HVD_CONDA_CHANNEL": str(build())}


# What a scenario needs prepared on this machine first: variables for molecule's environment.
PREPARE = {"conda": _conda_channel}


@pytest.mark.containers
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_molecule_scenario_converges_idempotently_and_verifies(scenario: str, packaged_image: str) -> None:
    """Each scenario names its image: the bare node, or the one with the roles' distro packages (both built here)."""
    prepared = PREPARE[scenario]() if scenario in PREPARE else {}
    env = {**os.environ, **prepared, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "ANSIBLE_NOCOLOR": "1",
           "NO_COLOR": "1", "PY_COLORS": "0"}
    proc = subprocess.run([tool("molecule"), "test", "-s", scenario], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-8000:]
