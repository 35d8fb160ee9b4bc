"""hvd_workdir: the private work folder a build runs in, tested through its function.

These run as root (as the modules do on a node: become) against real folders and real tar/zstd.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ansible_collections.hvd.cluster.tests.unit.plugins.support import root_only

from ansible_collections.hvd.cluster.plugins.modules import hvd_workdir


# ------------------------------------------------------------------------------------------ hvd_workdir


@root_only
def test_workdir_is_made_root_owned_0700_and_a_second_call_changes_nothing(tmp_path: Path) -> None:
    state = tmp_path / "state"
    path, changed = hvd_workdir.workdir(str(state), "pyenv", clean=False)
    assert changed and path == str(state / "pyenv")
    for folder in (state, state / "pyenv"):
        info = folder.stat()
        assert info.st_uid == 0 and oct(info.st_mode & 0o777) == "0o700"
    assert hvd_workdir.workdir(str(state), "pyenv", clean=False) == (path, False)


@root_only
@pytest.mark.parametrize("mode, owner", [(0o755, 0), (0o700, 1000), (0o1777, 0)])
def test_workdir_made_by_someone_else_or_too_open_is_refused(tmp_path: Path, mode: int, owner: int) -> None:
    state = tmp_path / "state"
    state.mkdir()
    os.chown(state, owner, owner)
    os.chmod(state, mode)
    with pytest.raises(ValueError, match="refusing to use it"):
        hvd_workdir.workdir(str(state), "pyenv", clean=False)


@root_only
def test_workdir_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / "state").symlink_to(elsewhere)
    with pytest.raises(ValueError, match="symlink"):
        hvd_workdir.workdir(str(tmp_path / "state"), "pyenv", clean=False)


@root_only
def test_clean_workdir_starts_empty(tmp_path: Path) -> None:
    path, _ = hvd_workdir.workdir(str(tmp_path / "state"), "openmpi-4.1.6", clean=False)
    (Path(path) / "Makefile").write_text("all:\n\ttouch /tmp/pwned\n")
    path, changed = hvd_workdir.workdir(str(tmp_path / "state"), "openmpi-4.1.6", clean=True)
    assert changed and os.listdir(path) == []


def test_workdir_names_are_plain() -> None:
    with pytest.raises(ValueError, match="invalid work folder name"):
        hvd_workdir.workdir("/var/lib/hvdcluster", "../etc", clean=False)
