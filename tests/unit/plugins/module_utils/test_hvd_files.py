"""hvd_files.read_text: the one reader of a node's small text files, for the node-state module (every error reads
as None: a file check cannot read is drift, not a crash) and for hvd_read (strict: only a missing file reads as None,
and a size limit). Real files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import make_folders, read_text, replace_file


def test_text_is_read_with_newlines_as_open_reads_them_and_bad_bytes_replaced(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"a\r\nb\rc\n\xff\n")
    assert read_text(str(path)) == "a\nb\nc\n\ufffd\n"
    with open(path, encoding="utf-8", errors="replace") as handle:
        assert read_text(str(path)) == handle.read()


@pytest.mark.parametrize("strict", [False, True])
def test_a_missing_file_or_a_folder_reads_as_none(tmp_path: Path, strict: bool) -> None:
    (tmp_path / "file").write_text("x")
    for path in (tmp_path / "gone", tmp_path, tmp_path / "file" / "below"):
        assert read_text(str(path), strict=strict) is None, path


def test_a_file_it_cannot_open_is_none_unless_strict(tmp_path: Path) -> None:
    """A symlink loop (ELOOP) stands for any error other than a missing file: root reads a file of mode 0000."""
    path = tmp_path / "loop"
    path.symlink_to(path)
    assert read_text(str(path)) is None
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        read_text(str(path), strict=True)


def test_a_file_over_the_limit_raises_naming_it_and_one_at_the_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "big"
    path.write_bytes("é".encode() * 6)  # 12 bytes, 6 characters: the limit counts bytes
    assert read_text(str(path), limit=12) == "é" * 6
    with pytest.raises(ValueError, match=f"^{path}: larger than 11 bytes$"):
        read_text(str(path), limit=11)


def test_folders_are_made_0755_whatever_the_umask_and_one_there_is_left_alone(tmp_path: Path) -> None:
    """hvd_tree makes an env prefix's parents with it (/opt/hvd): under a root umask of 077 os.makedirs would make
    them 0700 and shut the login user out of the env."""
    (tmp_path / "kept").mkdir(mode=0o700)
    old = os.umask(0o077)
    try:
        make_folders(str(tmp_path / "opt" / "hvd" / "env"))
        make_folders(str(tmp_path / "kept"))
    finally:
        os.umask(old)
    for folder in (tmp_path / "opt", tmp_path / "opt" / "hvd", tmp_path / "opt" / "hvd" / "env"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o755, folder
    assert stat.S_IMODE((tmp_path / "kept").stat().st_mode) == 0o700


def test_a_file_is_replaced_in_one_rename_with_its_mode_and_nothing_left_beside_it(tmp_path: Path) -> None:
    target = tmp_path / "51hvdcluster-hvd_openmpi"
    target.write_text("old")
    target.chmod(0o600)
    replace_file(str(target), "new\n")
    assert target.read_text() == "new\n" and stat.S_IMODE(target.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["51hvdcluster-hvd_openmpi"]
    (tmp_path / "a-folder").mkdir()
    with pytest.raises(OSError):  # the rename fails: the part file goes too
        replace_file(str(tmp_path / "a-folder"), "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["51hvdcluster-hvd_openmpi", "a-folder"]
