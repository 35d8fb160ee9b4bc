"""Shared helpers. Tests marked `containers` need a Docker engine (tests/setup.sh starts one)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent  # the venv that runs the tests: ansible, molecule, linters


# Real recorded GPU and fabric tool outputs (no GPU is reachable here): ../shared/fixtures-gpu next to the checkout,
# read in place, never copied into this repository (its SOURCES.md names where each came from).
GPU_FIXTURES = (ROOT / ".." / "shared" / "fixtures-gpu").resolve()


def gpu_fixture(name: str) -> Path:
    """A recorded output's path; a missing one fails the test (it has nothing else to read)."""
    path = GPU_FIXTURES / name
    if not path.is_file():
        pytest.fail(f"{path} is missing: these tests read ../shared/fixtures-gpu next to the checkout, in place")
    return path


def tool(name: str) -> str:
    return str(BIN / name) if (BIN / name).exists() else name


@pytest.fixture(scope="session")
def node_image() -> str:
    """The bare node image (built once, cached by tag). A missing engine is a failure, not a skip."""
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode:
        pytest.fail("no Docker engine answers: run tests/setup.sh (it installs and starts one)")
    subprocess.run([str(ROOT / "tests" / "images" / "build.sh")], check=True)
    return "hvdcluster/node:debian12"
