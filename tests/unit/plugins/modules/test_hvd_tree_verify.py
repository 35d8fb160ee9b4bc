"""hvd_tree's manifest: an installed env knows, read-only, whether it is still what was unpacked.

Real folders and real tar/zstd archives, as on a node.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ansible_collections.hvd.cluster.tests.unit.plugins.support import UNPACK, make_archive, run_module, sha

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import walk_tree
from ansible_collections.hvd.cluster.plugins.modules import hvd_tree


SKIP = {".hvdcluster", ".hvd-env-key"}


def installed(tmp_path: Path) -> Path:
    archive, digest = make_archive(tmp_path, {
        "bin/python": "#!py", "lib/site-packages/filelock/__init__.py": "lock = 1\n",
        "lib/site-packages/filelock/_api.py": "api = 2\n"})
    prefix = tmp_path / "env"
    hvd_tree.unpack(str(archive), digest, str(prefix), marker_content="k1", **UNPACK)
    os.symlink("python", prefix / "bin" / "python3")  # a link in the tree counts by its target
    hvd_tree.write_manifest(str(prefix), SKIP)
    return prefix


def test_an_unpacked_tree_carries_a_manifest_of_every_file_with_its_sha256(tmp_path: Path) -> None:
    archive, digest = make_archive(tmp_path, {"bin/tool": "v1", "lib/x.py": "x"})
    prefix = tmp_path / "env"
    hvd_tree.unpack(str(archive), digest, str(prefix), marker_content="k1", **UNPACK)
    manifest = json.loads((prefix / ".hvd-manifest").read_text())
    assert sorted(manifest) == ["bin/tool", "lib/x.py"]  # markers are not part of the tree's content
    assert manifest["bin/tool"][0] == 2 and manifest["bin/tool"][2] == sha(b"v1")
    assert hvd_tree.verify(str(prefix), SKIP) == []


def test_a_deleted_file_is_named_missing(tmp_path: Path) -> None:
    prefix = installed(tmp_path)
    (prefix / "lib/site-packages/filelock/_api.py").unlink()
    assert hvd_tree.verify(str(prefix), SKIP) == ["missing: lib/site-packages/filelock/_api.py"]


def test_an_edited_file_is_named_changed_and_deep_finds_an_edit_that_kept_size_and_time(tmp_path: Path) -> None:
    prefix = installed(tmp_path)
    target = prefix / "lib/site-packages/filelock/__init__.py"
    before = target.stat()
    target.write_text("lock = 2\n")  # same size, new time
    assert hvd_tree.verify(str(prefix), SKIP) == ["changed: lib/site-packages/filelock/__init__.py"]
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))  # time put back: only the content tells
    assert hvd_tree.verify(str(prefix), SKIP) == []
    assert hvd_tree.verify(str(prefix), SKIP, deep=True) == ["changed: lib/site-packages/filelock/__init__.py"]


def test_a_repointed_link_is_named_changed(tmp_path: Path) -> None:
    prefix = installed(tmp_path)
    (prefix / "bin" / "python3").unlink()
    os.symlink("/usr/bin/python3", prefix / "bin" / "python3")
    assert hvd_tree.verify(str(prefix), SKIP) == ["changed: bin/python3"]


def test_added_files_count_only_when_asked_for_and_byte_caches_are_files_like_any(tmp_path: Path) -> None:
    """A planted byte cache is loaded by Python when its header matches the source: it is an addition too."""
    prefix = installed(tmp_path)
    (prefix / "lib/site-packages/horovod").mkdir()
    (prefix / "lib/site-packages/horovod/__init__.py").write_text("")
    (prefix / "lib/site-packages/filelock/__pycache__").mkdir()
    (prefix / "lib/site-packages/filelock/__pycache__/_api.cpython-311.pyc").write_bytes(b"\0")
    assert hvd_tree.verify(str(prefix), SKIP) == []
    assert hvd_tree.verify(str(prefix), SKIP, exact=True) == [
        "added: lib/site-packages/filelock/__pycache__/_api.cpython-311.pyc",
        "added: lib/site-packages/horovod/__init__.py"]


def test_a_tree_without_a_manifest_is_not_taken_for_intact(tmp_path: Path) -> None:
    prefix = installed(tmp_path)
    (prefix / ".hvd-manifest").unlink()
    assert hvd_tree.verify(str(prefix), SKIP)[0].startswith("no manifest")


def test_verified_state_reads_only_and_reports_what_differs_in_check_mode(tmp_path: Path) -> None:
    prefix = installed(tmp_path)
    before = sorted((p, p.lstat().st_mtime_ns) for p in prefix.rglob("*"))
    args = {"path": str(prefix), "state": "verified", "marker": ".hvd-env-key"}
    result = run_module("hvd_tree", args, check=True)
    assert (result["changed"], result["intact"], result["differences"]) == (False, True, [])
    (prefix / "bin" / "python").write_text("#!other")
    result = run_module("hvd_tree", args, check=True)
    assert result["intact"] is False and result["differences"] == ["changed: bin/python"]
    missing = run_module("hvd_tree", {**args, "path": str(tmp_path / "nothing")}, check=True)
    assert missing["intact"] is False and "not installed" in missing["differences"][0]
    after = sorted((p, p.lstat().st_mtime_ns) for p in prefix.rglob("*") if p.name != "python")
    assert after == [item for item in before if item[0].name != "python"]


def test_a_walk_over_a_tree_that_changes_under_it_lists_what_is_there(tmp_path: Path) -> None:
    """A file removed after its folder was listed and before the walk reached it (an earlier run's step still
    swapping an env in on the node, as test_train's cut-short runs leave one): the walk goes on without it, where
    it failed the node's read ("No such file or directory") and with it the pre-flight. No mock: the walk is paused
    between two files of one folder and the second is removed for real."""
    for name in ("a.h", "b.h", "c.h"):
        (tmp_path / name).write_text(name)
    walk = walk_tree(str(tmp_path))
    first, _ = next(walk)
    assert first == "a.h"
    (tmp_path / "b.h").unlink()
    assert [rel for rel, _ in walk] == ["c.h"]


def test_the_walk_lists_files_and_links_each_folder_before_its_subfolders_and_follows_no_link(tmp_path: Path) -> None:
    """What the manifest and the env's "added" check rest on: every file and link, each with its own lstat (a link's,
    not its target's), a symlinked folder as one link never entered, a dangling link and a FIFO listed, empty
    folders not, ``skip`` left out; a folder's entries in name order before its subfolders'."""
    (tmp_path / "a" / "__pycache__").mkdir(parents=True)
    (tmp_path / "a" / "x.py").write_text("x = 1\n")
    (tmp_path / "a" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0" * 16)
    (tmp_path / "c").mkdir()
    (tmp_path / "b.txt").write_text("b")
    (tmp_path / "skipped").write_text("s")
    os.symlink("a", tmp_path / "linked")
    os.symlink("nowhere", tmp_path / "dangling")
    os.mkfifo(tmp_path / "pipe")
    walked = list(walk_tree(str(tmp_path), {"skipped"}))
    assert [rel for rel, _ in walked] == ["b.txt", "dangling", "linked", "pipe", "a/x.py",
                                          "a/__pycache__/x.cpython-311.pyc"]
    for rel, info in walked:
        assert (info.st_ino, info.st_mode) == ((tmp_path / rel).lstat().st_ino, (tmp_path / rel).lstat().st_mode)
