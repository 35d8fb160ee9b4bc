"""hvd_tree: an env's packed tree unpacked in place of the old one only once it is good, a prefix not made by
hvdcluster never touched, the archive root reads being the one it verified; tested through its functions and as
Ansible runs it.

These run as root (as the modules do on a node: become) against real folders and real tar/zstd.

The tree's manifest and its read-only check: test_hvd_tree_verify.py.
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess
from pathlib import Path

import pytest

from ansible_collections.hvd.cluster.tests.unit.plugins.support import (
    UNPACK, make_archive, run_command, run_module, sha,
)

from ansible_collections.hvd.cluster.plugins.modules import hvd_tree


# ------------------------------------------------------------------------------------------ unpack


def test_unpack_installs_the_tree_with_its_marker_written_last(tmp_path: Path) -> None:
    archive, digest = make_archive(tmp_path, {"bin/tool": "v1", "lib/x.py": "x"})
    prefix = tmp_path / "opt" / "env"
    assert hvd_tree.unpack(str(archive), digest, str(prefix), marker_content="k1", **UNPACK) == ""
    assert (prefix / "bin" / "tool").read_text() == "v1" and (prefix / ".hvd-env-key").read_text() == "k1\n"
    assert (prefix / ".hvdcluster").is_file()
    assert sorted(os.listdir(prefix.parent)) == ["env"]  # no sibling left behind


def test_unpack_stages_in_a_private_folder_and_keeps_no_owner_or_setuid_bit_of_the_archive(tmp_path: Path) -> None:
    """An archive whose files claim another owner and setuid/setgid bits: while tar runs, the staging folder is
    0700 (no other user reaches a file before the digest is checked); installed, every file is root's (the test runs
    as root, as the module does) and no special bit is left."""
    src = tmp_path / "hostile"
    (src / "bin").mkdir(parents=True)
    (src / "bin" / "tool").write_text("#!/bin/sh\n")
    (src / "bin" / "tool").chmod(0o6755)
    (src / "shared").mkdir(mode=0o777)
    (src / "shared").chmod(0o3777)
    archive = tmp_path / "env.tar"
    subprocess.run(["tar", "-C", str(src), "--owner=4242", "--group=4242", "-cf", str(archive), "."], check=True)
    seen = []

    def watching(argv, **kwargs):
        if argv[0] == "tar":
            staging = argv[argv.index("-C") + 1]
            seen.append(stat.S_IMODE(os.stat(staging).st_mode))
        return run_command(argv, **kwargs)

    prefix = tmp_path / "env"
    hvd_tree.unpack(str(archive), sha(archive.read_bytes()), str(prefix), marker_content="k1",
                    **{**UNPACK, "run_command": watching})
    assert seen == [0o700]
    for path in (prefix / "bin" / "tool", prefix / "shared", prefix):
        info = path.lstat()
        assert info.st_uid == os.geteuid() and not info.st_mode & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX), path
    assert stat.S_IMODE((prefix / "bin" / "tool").stat().st_mode) == 0o755
    assert stat.S_IMODE(prefix.stat().st_mode) == 0o755


def test_unpack_replaces_the_old_tree_only_once_the_new_one_is_good(tmp_path: Path) -> None:
    good, good_sha = make_archive(tmp_path, {"bin/tool": "v1"})
    prefix = tmp_path / "env"
    hvd_tree.unpack(str(good), good_sha, str(prefix), marker_content="k1", **UNPACK)
    # A new archive that fails its check leaves the old tree in place, untouched.
    (tmp_path / "src-tree" / "bin" / "tool").write_text("v2")
    bad, bad_sha = make_archive(tmp_path, {})
    with pytest.raises(ValueError, match="fails its check"):
        hvd_tree.unpack(str(bad), bad_sha, str(prefix), marker_content="k2", **{**UNPACK, "check_argv": ["false"]})
    assert (prefix / "bin" / "tool").read_text() == "v1" and (prefix / ".hvd-env-key").read_text() == "k1\n"
    # A truncated archive is refused by its sha256, before anything is unpacked.
    data = bad.read_bytes()
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="corrupt or truncated"):
        hvd_tree.unpack(str(bad), bad_sha, str(prefix), marker_content="k2", **UNPACK)
    assert (prefix / ".hvd-env-key").read_text() == "k1\n"
    # A good one replaces it.
    newer, newer_sha = make_archive(tmp_path, {"bin/tool": "v2"})
    assert hvd_tree.unpack(str(newer), newer_sha, str(prefix), marker_content="k2", **UNPACK) == "k1"
    assert (prefix / "bin" / "tool").read_text() == "v2" and (prefix / ".hvd-env-key").read_text() == "k2\n"
    assert sorted(os.listdir(tmp_path)) == sorted(["env", "env.tar.zst", "src-tree"])


def test_unpack_replaces_a_tree_that_overlayfs_will_not_rename(tmp_path: Path) -> None:
    """A node that is a container started from an image holding the env: the env's folder lies in a lower layer of
    an overlayfs, which refuses to rename it (EXDEV) where unpack would move the old tree aside. A real overlayfs
    mount here (root only): the new tree still replaces the old one, its marker last, nothing left beside it, and a
    second replacement works the same way."""
    if os.geteuid() != 0:
        pytest.skip("mounting an overlayfs needs root (CI runs as root)")
    lower, upper, work, merged = (tmp_path / name for name in ("lower", "upper", "work", "merged"))
    for folder in (upper, work, merged):
        folder.mkdir()
    (tmp_path / "a").mkdir()
    first, first_sha = make_archive(tmp_path / "a", {"bin/tool": "v1", "lib/old.py": "old"})
    hvd_tree.unpack(str(first), first_sha, str(lower / "env"), marker_content="k1", **UNPACK)
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", f"lowerdir={lower},upperdir={upper},workdir={work}",
                    str(merged)], check=True)
    try:
        prefix = merged / "env"
        with pytest.raises(OSError) as refused:
            os.rename(prefix, merged / ".env.aside")
        assert refused.value.errno == errno.EXDEV
        (tmp_path / "b").mkdir()
        newer, newer_sha = make_archive(tmp_path / "b", {"bin/tool": "v2", "lib/new.py": "new"})
        assert hvd_tree.unpack(str(newer), newer_sha, str(prefix), marker_content="k2", **UNPACK) == "k1"
        assert (prefix / "bin" / "tool").read_text() == "v2" and not (prefix / "lib" / "old.py").exists()
        assert (prefix / ".hvd-env-key").read_text() == "k2\n" and (prefix / ".hvdcluster").is_file()
        assert hvd_tree.verify(str(prefix), {".hvdcluster", ".hvd-env-key"}, deep=True, exact=True) == []
        assert sorted(os.listdir(merged)) == ["env"]
        assert hvd_tree.unpack(str(first), first_sha, str(prefix), marker_content="k1", **UNPACK) == "k2"
        assert (prefix / "lib" / "old.py").read_text() == "old" and not (prefix / "lib" / "new.py").exists()
        assert hvd_tree.verify(str(prefix), {".hvdcluster", ".hvd-env-key"}, deep=True, exact=True) == []
    finally:
        subprocess.run(["umount", str(merged)], check=True)


def test_leftovers_of_an_interrupted_unpack_are_cleared_and_never_count(tmp_path: Path) -> None:
    archive, digest = make_archive(tmp_path, {"bin/tool": "v1"})
    half = tmp_path / ".env.hvd-new-deadbeef"
    (half / "bin").mkdir(parents=True)
    (half / ".hvd-env-key").write_text("k1\n")
    hvd_tree.unpack(str(archive), digest, str(tmp_path / "env"), marker_content="k1", **UNPACK)
    assert not half.exists()


@pytest.mark.parametrize("state", ["absent", "owned", "unpacked"])
def test_a_prefix_not_made_by_hvdcluster_is_never_deleted_or_replaced(tmp_path: Path, state: str) -> None:
    foreign = tmp_path / "usr"
    (foreign / "bin").mkdir(parents=True)
    (foreign / "bin" / "ls").write_text("precious")
    archive, digest = make_archive(tmp_path, {"bin/tool": "v1"})
    args = {"path": str(foreign), "state": state, "marker": ".hvd-env-key"}
    if state == "unpacked":
        args |= {"src": str(archive), "sha256": digest, "marker_content": "k1"}
    result = run_module("hvd_tree", args)
    assert result.get("failed") and "was not made by hvdcluster" in result["msg"]
    assert (foreign / "bin" / "ls").read_text() == "precious"


def test_owned_then_absent_removes_only_our_tree(tmp_path: Path) -> None:
    prefix = tmp_path / "env"
    assert run_module("hvd_tree", {"path": str(prefix), "state": "owned"})["changed"]
    assert not run_module("hvd_tree", {"path": str(prefix), "state": "owned"})["changed"]
    (prefix / "bin").mkdir()
    assert run_module("hvd_tree", {"path": str(prefix), "state": "absent"})["changed"]
    assert not prefix.exists()


def test_the_module_unpacks_through_run_command_and_a_second_run_changes_nothing(tmp_path: Path) -> None:
    """As Ansible runs it: tar reads the archive from the pipe AnsibleModule.run_command hands it (pass_fds)."""
    archive, digest = make_archive(tmp_path, {"bin/tool": "v1", "lib/x.py": "x"})
    args = {"path": str(tmp_path / "env"), "src": str(archive), "sha256": digest, "marker": ".hvd-env-key",
            "marker_content": "k1", "check_argv": ["test", "-f", "{root}/bin/tool"]}
    result = run_module("hvd_tree", args)
    assert (result.get("failed"), result["changed"], result["previous"]) == (None, True, "")
    assert (tmp_path / "env" / "bin" / "tool").read_text() == "v1"
    assert run_module("hvd_tree", args)["changed"] is False
    failed = run_module("hvd_tree", {**args, "marker_content": "k2", "check_argv": ["test", "-f", "{root}/nothing"]})
    assert failed["failed"] and "fails its check" in failed["msg"]
    assert (tmp_path / "env" / ".hvd-env-key").read_text() == "k1\n"


def test_an_uncompressed_archive_of_several_blocks_unpacks_from_the_pipe(tmp_path: Path) -> None:
    """A plain .tar read from a pipe in short reads (--read-full-records, as tar does for stdin)."""
    payload = os.urandom(5 << 20)
    (tmp_path / "src" / "lib").mkdir(parents=True)
    (tmp_path / "src" / "lib" / "blob").write_bytes(payload)
    archive = tmp_path / "env.tar"
    subprocess.run(["tar", "-C", str(tmp_path / "src"), "-cf", str(archive), "."], check=True)
    result = run_module("hvd_tree", {"path": str(tmp_path / "env"), "src": str(archive), "marker": ".hvd-env-key",
                                     "sha256": sha(archive.read_bytes()), "marker_content": "k1"})
    assert result["changed"] and not result.get("failed")
    assert (tmp_path / "env" / "lib" / "blob").read_bytes() == payload


def test_an_archive_tar_cannot_read_fails_with_tars_words_and_leaves_nothing(tmp_path: Path) -> None:
    """tar (zstd) stops at the first bytes: the rest is still hashed (a broken pipe), the digest matches, tar's
    message is the error, and no tree or sibling is left."""
    archive = tmp_path / "env.tar.zst"
    archive.write_bytes(os.urandom(3 << 20))
    with pytest.raises(ValueError, match=r"unpacking .* failed: .*\S"):
        hvd_tree.unpack(str(archive), sha(archive.read_bytes()), str(tmp_path / "env"), marker_content="k1",
                        **UNPACK)
    assert archive.exists() and sorted(os.listdir(tmp_path)) == ["env.tar.zst"]


# ------------------------------------------------------------------------------------------ root uses what it verified


def big_archive(tmp_path: Path, name: str, payload: bytes) -> tuple[Path, str]:
    """An archive of several MiB (incompressible), so it is read in more than one block."""
    src = tmp_path / f"tree-{name}"
    (src / "lib").mkdir(parents=True)
    (src / "lib" / "blob").write_bytes(payload)
    archive = tmp_path / f"{name}.tar.zst"
    subprocess.run(["tar", "-C", str(src), "--zstd", "-cf", str(archive), "."], check=True)
    return archive, sha(archive.read_bytes())


def test_an_archive_swapped_after_its_check_cannot_change_what_root_unpacks(tmp_path: Path, monkeypatch) -> None:
    """The login user's copy is replaced (rename) while root reads it: root installs the bytes it hashed."""
    good_bytes, evil_bytes = os.urandom(3 << 20), os.urandom(3 << 20)
    good, digest = big_archive(tmp_path, "good", good_bytes)
    evil, _ = big_archive(tmp_path, "evil", evil_bytes)
    swapped = []
    real = hvd_tree._extract
    monkeypatch.setattr(hvd_tree, "_extract", lambda src, new, want, run: real(
        src, new, want, run, between=lambda: swapped or swapped.append(os.replace(evil, good))))
    hvd_tree.unpack(str(good), digest, str(tmp_path / "env"), marker_content="k1", **UNPACK)
    assert swapped and (tmp_path / "env" / "lib" / "blob").read_bytes() == good_bytes


def test_an_archive_rewritten_in_place_while_root_reads_it_is_refused(tmp_path: Path, monkeypatch) -> None:
    good, digest = big_archive(tmp_path, "good", os.urandom(3 << 20))

    def rewrite() -> None:
        with open(good, "r+b") as handle:
            handle.seek(2 << 20)
            handle.write(b"\0" * 4096)

    real = hvd_tree._extract
    monkeypatch.setattr(hvd_tree, "_extract", lambda src, new, want, run: real(src, new, want, run, between=rewrite))
    with pytest.raises(ValueError, match="corrupt or truncated"):
        hvd_tree.unpack(str(good), digest, str(tmp_path / "env"), marker_content="k1", **UNPACK)
    assert not (tmp_path / "env").exists() and [p.name for p in tmp_path.iterdir() if "hvd-new" in p.name] == []
