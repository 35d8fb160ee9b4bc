"""The pre-flight's look at the host (hvd_host): the mpirun a login shell of the cluster user finds, asked in the probe's
own run (no task of its own). Real bash and runuser on this machine; the login profile is the test's own HOME."""

from __future__ import annotations

import os
import pwd
import shutil
from pathlib import Path

import pytest

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_host


def test_a_login_shell_of_the_user_itself_finds_mpirun_its_profile_puts_on_path(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "ompi/bin").mkdir(parents=True)
    (tmp_path / "ompi/bin/mpirun").write_text("#!/bin/sh\n")
    (tmp_path / "ompi/bin/mpirun").chmod(0o755)
    (tmp_path / ".bash_profile").write_text(f"echo 'welcome'\nexport PATH={tmp_path}/ompi/bin:$PATH\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    me = pwd.getpwuid(os.geteuid()).pw_name
    assert hvd_host.login_mpirun(me) == f"{tmp_path}/ompi/bin/mpirun"  # the banner line is not taken for a path
    (tmp_path / ".bash_profile").write_text("export PATH=/nowhere\n")
    assert hvd_host.login_mpirun(me) == ""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None, reason="runuser as root (the probe's become)")
def test_another_user_is_asked_through_runuser_and_an_unknown_one_finds_nothing() -> None:
    found = hvd_host.login_mpirun("nobody")
    assert found == (shutil.which("mpirun", path="/usr/local/bin:/usr/bin:/bin") or "")
    assert hvd_host.login_mpirun("hvd-no-such-user") == ""
    assert hvd_host.login_mpirun("") == ""


def test_the_look_gives_mpi_login_only_when_asked() -> None:
    assert "login" not in hvd_host.look()["mpi"]
    assert "login" in hvd_host.look(login_user=pwd.getpwuid(os.geteuid()).pw_name)["mpi"]
