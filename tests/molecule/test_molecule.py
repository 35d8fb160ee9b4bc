"""Molecule scenarios: converge, idempotence (a second converge changes nothing) and verify, in containers."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import BIN, ROOT, tool

SCENARIOS = sorted(p.name for p in (ROOT / "molecule").iterdir() if (p / "molecule.yml").is_file())

# Scenarios whose plays the full tier runs elsewhere, on a node it has built already, instead of building one more.
# `driver` and `gpu` converge the variables README's golden image gives (tests/unit/test_inventory.py holds them
# equal); tests/cluster/test_golden_image.py runs that converge through `up`, its idempotence, `driver`'s day 2 (the
# guard, the failed DKMS build, the repair) through `up` and `check`, and `gpu`'s verify checks; the user space alone
# in a container (`gpu`'s driver mode) is tests/cluster/test_host_driver.py's. `horovod` converges the whole site.yml
# on two CPU nodes from an empty controller cache: tests/cluster/test_no_wheelhouse.py runs that converge through `up`
# (an empty cache, every role, Horovod built on a node, the post-flight's allreduce over both), and test_train.py and
# test_up.py its idempotence and verify's checks (check-build, mpirun from every node, one env everywhere). One DKMS
# build, one CUDA toolkit, one env and one Horovod build less per run. Role authors still run `molecule test -s
# horovod` (or HVD_MOLECULE_ALL=1 tests/run.sh -k molecule); here molecule only reads them.
ELSEWHERE = {"driver": ROOT / "tests" / "cluster" / "test_golden_image.py",
             "gpu": ROOT / "tests" / "cluster" / "test_golden_image.py",
             "horovod": ROOT / "tests" / "cluster" / "test_no_wheelhouse.py"}
RUN_HERE = SCENARIOS if os.environ.get("HVD_MOLECULE_ALL") == "1" else [s for s in SCENARIOS if s not in ELSEWHERE]


def _conda_channel() -> dict[str, str]:
    """The conda scenario's local channel (built offline with rattler-build, cached by its recipes' hash)."""
    from tests.conda_channel import build  # noqa: PLC0415 - only this scenario needs it

    return {"HVD_CONDA_CHANNEL": str(build())}


def _empty_cache(folder: Path) -> dict[str, str]:
    """A controller cache of this run's own, empty: the scenario builds everything it installs (the env packed, Horovod
    compiled), every run. The other suites share one cache and, on a warm machine, never build; this one proves the
    build path they all rely on."""
    folder.mkdir()
    return {"HVDCLUSTER_CACHE": str(folder)}


def _kernel_image() -> dict[str, str]:
    """The driver scenario's node image: a kernel image and its headers installed (built once, cached by label)."""
    from tests.lab.images import build_kernel_image  # noqa: PLC0415 - only this scenario needs it

    build_kernel_image()
    return {}


# What a scenario needs prepared on this machine first: variables for molecule's environment.
PREPARE = {"conda": lambda _: _conda_channel(), "horovod": lambda tmp: _empty_cache(tmp / "cache"),
           "driver": lambda _: _kernel_image()}


@pytest.mark.parametrize("scenario", sorted(ELSEWHERE))
def test_a_scenario_proven_elsewhere_is_read_by_molecule_and_named_where_it_runs(scenario: str) -> None:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "ANSIBLE_NOCOLOR": "1", "NO_COLOR": "1"}
    proc = subprocess.run([tool("molecule"), "syntax", "-s", scenario], cwd=ROOT, env=env, capture_output=True,
                          text=True)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert f"molecule/{scenario}" in ELSEWHERE[scenario].read_text()


@pytest.mark.containers
@pytest.mark.parametrize("scenario", RUN_HERE)
def test_molecule_scenario_converges_idempotently_and_verifies(scenario: str, packaged_image: str,
                                                                tmp_path: Path) -> None:
    """Each scenario names its image: the bare node, or the one with the roles' distro packages (both built here)."""
    prepared = PREPARE[scenario](tmp_path) if scenario in PREPARE else {}
    env = {**os.environ, **prepared, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "ANSIBLE_NOCOLOR": "1",
           "NO_COLOR": "1", "PY_COLORS": "0"}
    proc = subprocess.run([tool("molecule"), "test", "-s", scenario], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-8000:]
    if "HVDCLUSTER_CACHE" in prepared:  # built in this run, into the empty cache: the packed env and the wheel
        cache = Path(prepared["HVDCLUSTER_CACHE"])
        built = sorted(p.relative_to(cache).parts[0] for p in [*cache.glob("envs/env-*.tar.zst"),
                                                                *cache.glob("horovod/*/horovod-*.whl")])
        assert built == ["envs", "horovod"], sorted(str(p) for p in cache.rglob("*"))
