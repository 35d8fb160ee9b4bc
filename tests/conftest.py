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


# Full-tier scheduling (tests/run.sh runs pytest-xdist with --dist loadgroup): each container suite is one group, so
# its module-scoped cluster lives in one worker; each molecule scenario is a group of its own. Groups start longest
# first (minutes on this 2-core machine, from the per-suite times in the last closing note; used for ordering only,
# a wrong figure costs wall time, never a result). Unit and static tests are not grouped: they fill the gaps.
MINUTES = {"test_up": 15, "molecule-gpu": 9, "test_train": 9, "test_openmpi_source": 8, "test_fanout": 7,
           "test_conda": 6, "test_bundle": 6, "molecule-horovod": 4, "test_no_wheelhouse": 3, "molecule-conda": 2,
           "molecule-default": 2, "test_preflight": 1, "test_bastion": 1}


def _group(item: pytest.Item) -> str | None:
    if item.get_closest_marker("containers") is None:
        return None
    if item.get_closest_marker("xdist_group") is None:
        module = item.module.__name__.rsplit(".", 1)[-1]
        name = f"molecule-{item.callspec.params['scenario']}" if module == "test_molecule" else module
        item.add_marker(pytest.mark.xdist_group(name))
    return item.get_closest_marker("xdist_group").args[0]


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which turns the group marks into scheduling scopes
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    groups = [_group(item) for item in items]
    first: dict[str | None, int] = {}
    for n, group in enumerate(groups):
        first.setdefault(group, n)
    order = {id(item): (-MINUTES.get(group, 1) if group else 0, first[group] if group else n, n)
             for n, (item, group) in enumerate(zip(items, groups))}
    items.sort(key=lambda item: order[id(item)])
