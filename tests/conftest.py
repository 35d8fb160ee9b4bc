"""Shared helpers. Tests marked `containers` need a Docker engine (tests/setup.sh starts one)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent  # the venv that runs the tests: ansible, molecule, linters


def readme_golden_image() -> str:
    """The golden-image `stack:` line README gives for hosts.yaml, as written there."""
    [written] = re.findall(r"`(stack: \{driver: .*?without_device: true\})` in `hosts.yaml`",
                           (ROOT / "README.md").read_text())
    return written


# The GPU and fabric tool outputs the parsers are fed (our own, and the real recordings of ../shared/fixtures-gpu):
# tests/unit/plugins/support.py, which the collection's own unit tests share under ansible-test units too.


def tool(name: str) -> str:
    return str(BIN / name) if (BIN / name).exists() else name


@pytest.fixture(scope="session")
def node_image() -> str:
    """The bare node image (built once, cached by tag). A missing engine is a failure, not a skip."""
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode:
        pytest.fail("no Docker engine answers: run tests/setup.sh (it installs and starts one)")
    subprocess.run([str(ROOT / "tests" / "images" / "build.sh")], check=True)
    return "hvdcluster/node:debian12"


@pytest.fixture(scope="session")
def packaged_image(node_image: str) -> str:
    """The node image with the roles' distro packages already installed (not held), as a site's golden image has
    them (tests/lab/images.py PACKAGED_IMAGE), built once on top of the bare one and cached by label."""
    from tests.lab.images import build_packaged_image  # noqa: PLC0415 - container suites only

    return build_packaged_image()


# Full-tier scheduling (tests/run.sh runs two pytest-xdist workers): a container suite is one scheduling unit, so its
# module-scoped cluster lives in one worker; each molecule scenario is a unit of its own. Units start longest first
# (worker-minutes on this 2-core machine with both workers busy and an empty controller cache, heavy tests included,
# from the junit of the run of 2026-11-28; used for ordering only: a wrong figure costs wall time, never a result).
# Unit and static test modules fill the gaps. The golden image's figure is raised to start it beside test_up: the two
# share no build, where test_train, test_fanout, test_bundle and the demo take the CPU stack's env and Horovod wheel
# that test_up's first converge puts in the shared cache, and would wait on its lease if started beside it.
MINUTES = {"test_up": 48, "test_golden_image": 40, "test_train": 34, "test_openmpi_source": 20, "test_conda": 18,
           "test_no_wheelhouse": 12, "test_bundle": 10, "test_fanout": 9, "test_demo": 8, "molecule-conda": 3,
           "test_static": 3, "molecule-default": 2, "test_host_driver": 2, "test_preflight": 2, "test_bastion": 1}

# The heavy set: day-2 scenarios of several minutes each on this machine (nodes killed mid-run, runs cut short four
# times, a rolling change that waits for a job, real Slurm under a roll, air-gapped rebuilds, the demo). The full
# tier (tests/run.sh) leaves them out to keep it shorter; `tests/run.sh --heavy` runs them all. CI
# (.ci/run: tests/run.sh --all) runs them beside the full tier within a budget: HVD_HEAVY_BUDGET_MIN (minutes since the
# session started; .ci/run sets it) past which a heavy test not yet started is skipped, saying so and how to run it,
# so that CI ends within its limit whatever the machine's speed; a full-tier test is never skipped.
HEAVY = "heavy: a day-2 scenario of several minutes: run by tests/run.sh --heavy (and CI), not by the full tier"
STARTED = time.monotonic()  # each pytest-xdist worker imports this at the session's start


def heavy_budget_spent(now: float | None = None) -> str | None:
    """Why a heavy test is skipped now (HVD_HEAVY_BUDGET_MIN spent), or None to run it."""
    budget = os.environ.get("HVD_HEAVY_BUDGET_MIN", "").strip()
    if not budget:
        return None
    elapsed = ((time.monotonic() if now is None else now) - STARTED) / 60
    if elapsed < float(budget):
        return None
    return (f"the heavy set's time budget is spent ({elapsed:.0f} of HVD_HEAVY_BUDGET_MIN={budget} minutes): "
            "run it whole with tests/run.sh --heavy")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("heavy") is not None:
        why = heavy_budget_spent()
        if why:
            pytest.skip(why)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", HEAVY)


def scheduling_unit(nodeid: str) -> str:
    """The unit a test is scheduled in: its module, or for a molecule scenario the scenario."""
    module = nodeid.split("::", 1)[0]
    if module == "tests/molecule/test_molecule.py" and "[" in nodeid:
        return "molecule-" + nodeid.rsplit("[", 1)[1].rstrip("]")
    return module


def _minutes(unit: str) -> int:
    return MINUTES.get(unit.rsplit("/", 1)[-1].removesuffix(".py"), 0)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    units = [scheduling_unit(item.nodeid) for item in items]
    first: dict[str, int] = {}
    for n, unit in enumerate(units):
        first.setdefault(unit, n)
    order = sorted(range(len(items)), key=lambda n: (-_minutes(units[n]), first[units[n]], n))
    items[:] = [items[n] for n in order]


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    from xdist.scheduler import LoadScopeScheduling  # noqa: PLC0415 - only under tests/run.sh's workers

    class ByUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scheduling_unit(nodeid)

    return ByUnit(config, log)
