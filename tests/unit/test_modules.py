"""hvdcluster's own Ansible modules (library/), tested through their functions and as Ansible runs them.

These run as root (as the modules do on a node: become) against real folders and real tar/zstd.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

import ansible.module_utils  # noqa: E402  the modules import their helpers as Ansible ships them

ansible.module_utils.__path__.append(str(ROOT / "module_utils"))
sys.path.insert(0, str(ROOT / "library"))
import hvd_artifact  # noqa: E402
import hvd_tree  # noqa: E402
import hvd_workdir  # noqa: E402

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="the modules run as root (become) on nodes")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


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


# ------------------------------------------------------------------------------------------ hvd_artifact


def test_published_artifact_gets_its_sha256_beside_it_and_verifies(tmp_path: Path) -> None:
    part = tmp_path / "env.tar.zst.part-1"
    part.write_bytes(b"archive" * 1000)
    final = tmp_path / "env.tar.zst"
    hvd_artifact.publish(str(part), str(final), sha(b"archive" * 1000))
    assert not part.exists() and final.read_bytes() == b"archive" * 1000
    assert (tmp_path / "env.tar.zst.sha256").read_text().split()[0] == sha(b"archive" * 1000)
    assert hvd_artifact.verify(str(final), None)["valid"]


def test_a_corrupt_download_is_never_published(tmp_path: Path) -> None:
    part = tmp_path / "w.whl.part-1"
    part.write_bytes(b"truncat")
    with pytest.raises(ValueError, match="corrupt or truncated"):
        hvd_artifact.publish(str(part), str(tmp_path / "w.whl"), sha(b"truncated"))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("damage", ["truncate", "flip", "no-sha256-file"])
def test_a_damaged_cache_entry_is_found_and_named(tmp_path: Path, damage: str) -> None:
    part, final = tmp_path / "a.part", tmp_path / "a"
    part.write_bytes(bytes(range(256)) * 64)
    hvd_artifact.publish(str(part), str(final), sha(bytes(range(256)) * 64))
    if damage == "truncate":
        final.write_bytes(final.read_bytes()[:1000])
    elif damage == "flip":
        data = bytearray(final.read_bytes())
        data[5000] ^= 1
        final.write_bytes(bytes(data))
    else:
        (tmp_path / "a.sha256").unlink()
    result = hvd_artifact.verify(str(final), None)
    assert not result["valid"] and str(final) in result["reason"]


def run_module(name: str, args: dict, check: bool = False) -> dict:
    """Run a module the way Ansible does: its file with the arguments as JSON on stdin."""
    payload = {"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": check}}
    boot = ("import sys, runpy, ansible.module_utils as u; u.__path__.append(sys.argv[1]); "
            "sys.argv = sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", boot, str(ROOT / "module_utils"), str(ROOT / "library" / f"{name}.py")],
                          input=json.dumps(payload), capture_output=True, text=True)
    return json.loads(proc.stdout)


def test_artifact_module_removes_an_invalid_file_unless_in_check_mode(tmp_path: Path) -> None:
    target = tmp_path / "env.tar.zst"
    target.write_bytes(b"x")
    (tmp_path / "env.tar.zst.sha256").write_text(sha(b"y") + "  env.tar.zst\n")
    looked = run_module("hvd_artifact", {"path": str(target)}, check=True)
    assert looked["valid"] is False and looked["changed"] and looked["removed"] and target.exists()
    result = run_module("hvd_artifact", {"path": str(target)})
    assert result["valid"] is False and result["removed"] and "corrupt or truncated" in result["reason"]
    assert run_module("hvd_artifact", {"path": str(target)})["removed"] is False  # missing: nothing to remove
    assert not target.exists() and not (tmp_path / "env.tar.zst.sha256").exists()
    failed = run_module("hvd_artifact", {"path": str(target), "sha256": sha(b"y"), "fail_invalid": True})
    assert failed["failed"] and "missing" in failed["msg"]


# ------------------------------------------------------------------------------------------ hvd_tree


def make_archive(tmp_path: Path, files: dict[str, str]) -> tuple[Path, str]:
    src = tmp_path / "src-tree"
    for name, text in files.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
    archive = tmp_path / "env.tar.zst"
    subprocess.run(["tar", "-C", str(src), "--zstd", "-cf", str(archive), "."], check=True)
    return archive, sha(archive.read_bytes())


UNPACK = {"marker": ".hvd-env-key", "owner_marker": ".hvdcluster", "check_argv": []}


def test_unpack_installs_the_tree_with_its_marker_written_last(tmp_path: Path) -> None:
    archive, digest = make_archive(tmp_path, {"bin/tool": "v1", "lib/x.py": "x"})
    prefix = tmp_path / "opt" / "env"
    assert hvd_tree.unpack(str(archive), digest, str(prefix), marker_content="k1", **UNPACK) == ""
    assert (prefix / "bin" / "tool").read_text() == "v1" and (prefix / ".hvd-env-key").read_text() == "k1\n"
    assert (prefix / ".hvdcluster").is_file()
    assert sorted(os.listdir(prefix.parent)) == ["env"]  # no sibling left behind


def test_unpack_replaces_the_old_tree_only_once_the_new_one_is_good(tmp_path: Path) -> None:
    good, good_sha = make_archive(tmp_path, {"bin/tool": "v1"})
    prefix = tmp_path / "env"
    hvd_tree.unpack(str(good), good_sha, str(prefix), marker_content="k1", **UNPACK)
    # A new archive that fails its check leaves the old tree in place, untouched.
    (tmp_path / "src-tree" / "bin" / "tool").write_text("v2")
    bad, bad_sha = make_archive(tmp_path, {})
    with pytest.raises(ValueError, match="fails its check"):
        hvd_tree.unpack(str(bad), bad_sha, str(prefix), marker_content="k2",
                        marker=".hvd-env-key", owner_marker=".hvdcluster", check_argv=["false"])
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
