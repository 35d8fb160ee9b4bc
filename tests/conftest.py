"""Shared helpers. Tests marked `containers` need a Docker engine (tests/setup.sh starts one)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent  # the venv that runs the tests: ansible, molecule, linters


def tool(name: str) -> str:
    return str(BIN / name) if (BIN / name).exists() else name


@pytest.fixture(scope="session")
def node_image() -> str:
    """The bare node image (built once, cached by tag). A missing engine is a failure, not a skip."""
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode:
        pytest.fail("no Docker engine answers: run tests/setup.sh (it installs and starts one)")
    subprocess.run([str(ROOT / "tests" / "images" / "build.sh")], check=True)
    return "hvdcluster/node:debian12"
