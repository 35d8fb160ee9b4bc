"""hvd_packages: what dpkg's status file says is missing or unheld, and nothing run where nothing is.

The plan is tested on status files written here; the module on this machine's own dpkg status, read-only: with
everything installed, and in check mode. A stand-in apt-get and dpkg first on PATH fail the module if it ever runs
them there, which is the property under test (a converged node runs no apt). Installing and holding for real is
proven in containers: test_up's drift rounds remove a held Open MPI package and unhold another, and `up` puts them
back through this module; every first converge installs the base packages with it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_apt_conf, hvd_dpkg
from ansible_collections.hvd.cluster.tests.unit.plugins.support import run_module

STATUS = """\
Package: libfoo1
Status: install ok installed
Architecture: amd64
Version: 1.2-3

Package: libfoo1
Status: hold ok installed
Architecture: i386
Version: 1.2-3

Package: bar
Status: hold ok installed
Architecture: all
Version: 2.0
Provides: bar-virtual (= 2.0), other-virtual

Package: gone
Status: deinstall ok config-files
Architecture: amd64
Version: 0.9

Package: unheld
Status: install ok installed
Architecture: amd64
Version: 5
"""


@pytest.fixture()
def entries(tmp_path: Path) -> list[dict]:
    (tmp_path / "var/lib/dpkg").mkdir(parents=True)
    (tmp_path / "var/lib/dpkg/status").write_text(STATUS)
    return hvd_dpkg.stanzas(str(tmp_path))


def test_the_reader_check_uses_is_the_one_the_module_plans_with(tmp_path: Path, entries: list[dict]) -> None:
    assert hvd_dpkg.dpkg_status(str(tmp_path)) == [
        ("libfoo1", "amd64", "1.2-3", True, False), ("libfoo1", "i386", "1.2-3", True, True),
        ("bar", "all", "2.0", True, True), ("gone", "amd64", "0.9", False, False), ("unheld", "amd64", "5", True, False)]
    assert entries[2]["provides"] == ["bar-virtual", "other-virtual"]


@pytest.mark.parametrize("wanted, hold, install, held", [
    (["bar", "unheld"], False, [], []),
    (["bar", "unheld"], True, [], ["unheld"]),
    (["gone", "missing"], True, ["gone", "missing"], []),  # config files left are not installed
    (["libfoo1"], True, [], ["libfoo1"]),  # one architecture unheld
    (["libfoo1:i386"], True, [], []),
    (["libfoo1:arm64"], False, ["libfoo1:arm64"], []),
    (["unheld=5", "unheld=6"], False, ["unheld=6"], []),
    (["other-virtual"], True, [], []),  # provided by an installed package: nothing to install, nothing to hold
    (["other-virtual=1"], False, ["other-virtual=1"], []),  # a version asks for the real package
])
def test_plan_installs_what_is_missing_and_holds_what_is_unheld(
        entries: list[dict], wanted: list[str], hold: bool, install: list[str], held: list[str]) -> None:
    todo = hvd_dpkg.plan(entries, wanted, hold)
    assert (todo["install"], todo["hold"]) == (install, held)


def test_plan_gives_the_installed_versions(entries: list[dict]) -> None:
    assert hvd_dpkg.plan(entries, ["libfoo1", "bar", "missing"], False)["versions"] == {
        "libfoo1": "1.2-3", "bar": "2.0", "missing": ""}


@pytest.mark.parametrize("bad", ["Foo", "foo bar", "foo;rm -rf /", "foo=1.0*", "-o", "foo:"])
def test_anything_but_a_package_name_is_refused(entries: list[dict], bad: str) -> None:
    with pytest.raises(ValueError, match="is not a package name"):
        hvd_dpkg.plan(entries, ["bar", bad], False)


# ------------------------------------------------------------------------------------------ the module, this machine


@pytest.fixture()
def no_apt(tmp_path: Path) -> dict:
    """PATH with apt-get and dpkg that fail: the module must not run either (everything installed, or check mode)."""
    spy = tmp_path / "spy"
    spy.mkdir()
    for tool in ("apt-get", "dpkg"):
        (spy / tool).write_text(f"#!/bin/sh\necho '{tool} ran' >> {tmp_path}/ran\nexit 99\n")
        (spy / tool).chmod(0o755)
    return {**os.environ, "PATH": f"{spy}:{os.environ['PATH']}", "ran": str(tmp_path / "ran")}


def installed_version(name: str) -> str:
    return subprocess.run(["dpkg-query", "-W", "-f=${Version}", name], capture_output=True, text=True,
                          check=True).stdout


def test_a_converged_node_runs_no_apt_and_reports_no_change(no_apt: dict) -> None:
    result = run_module("hvd_packages", {"name": ["dpkg", "coreutils"]}, env=no_apt)
    assert not result.get("failed") and result["changed"] is False, result
    assert result["installed"] == [] and result["held"] == [] and result["cache_updated"] is False
    assert result["versions"] == {"dpkg": installed_version("dpkg"), "coreutils": installed_version("coreutils")}
    assert not Path(no_apt["ran"]).exists()


def test_check_mode_names_what_it_would_install_and_hold_and_runs_nothing(no_apt: dict) -> None:
    before = Path("/var/lib/dpkg/status").read_bytes()
    held = set(subprocess.run(["apt-mark", "showhold"], capture_output=True, text=True).stdout.split())
    result = run_module("hvd_packages", {"name": ["coreutils", "hvd-no-such-package"], "hold": True}, check=True,
                        env=no_apt)
    assert not result.get("failed") and result["changed"] is True, result
    assert result["installed"] == ["hvd-no-such-package"]
    assert result["held"] == ([] if "coreutils" in held else ["coreutils"])
    assert not Path(no_apt["ran"]).exists() and Path("/var/lib/dpkg/status").read_bytes() == before


def test_a_bad_name_fails_naming_it_before_any_apt(no_apt: dict) -> None:
    result = run_module("hvd_packages", {"name": ["coreutils", "x; reboot"]}, env=no_apt)
    assert result.get("failed") and "'x; reboot' is not a package name" in result["msg"], result
    assert not Path(no_apt["ran"]).exists()


# ------------------------------------------------------------------------------------------ the guard file


def test_the_guard_text_covers_exactly_its_packages_as_check_reads_it(tmp_path: Path) -> None:
    path, text = hvd_apt_conf.uu_guard("hvd_openmpi", ["openmpi-bin", "libfoo1:i386", "g++-12"], ["linux-image-"])
    assert path == "/etc/apt/apt.conf.d/51hvdcluster-hvd_openmpi"
    (tmp_path / "etc/apt/apt.conf.d").mkdir(parents=True)
    (tmp_path / path.lstrip("/")).write_text(text)
    patterns = hvd_apt_conf.uu_blacklist(str(tmp_path))
    covered = {name: hvd_apt_conf.uu_blacklisted(name, patterns)
               for name in ("openmpi-bin", "libfoo1", "g++-12", "linux-image-6.1.0-28-amd64",
                            "openmpi-bin-extra", "gxx-12", "libfoo1x")}
    assert covered == {"openmpi-bin": True, "libfoo1": True, "g++-12": True, "linux-image-6.1.0-28-amd64": True,
                       "openmpi-bin-extra": False, "gxx-12": False, "libfoo1x": False}


@pytest.mark.parametrize("owner", ["", "../../cron.d/x", "Hvd", "hvd openmpi"])
def test_a_guard_owner_that_is_no_role_name_is_refused(owner: str) -> None:
    with pytest.raises(ValueError, match="is not a role name"):
        hvd_apt_conf.uu_guard(owner, ["openmpi-bin"])


def test_check_mode_names_a_missing_guard_file_and_writes_nothing(no_apt: dict) -> None:
    guard = Path("/etc/apt/apt.conf.d/51hvdcluster-hvd_unit_test")
    assert not guard.exists()
    result = run_module("hvd_packages", {"name": ["coreutils"], "hold": True, "guard": "hvd_unit_test"}, check=True,
                        env=no_apt)
    assert not result.get("failed") and result["changed"] is True and result["guard_written"] is True, result
    assert not guard.exists() and not Path(no_apt["ran"]).exists()
    # no hold, no guard
    result = run_module("hvd_packages", {"name": ["coreutils"], "guard": "hvd_unit_test"}, check=True, env=no_apt)
    assert result["changed"] is False and result["guard_written"] is False, result
