"""hvd_artifact: a cache entry published with its sha256 and verified, a folder held to exactly its listed files, a
file copied as verified; tested through its functions and as Ansible runs it.

These run as root (as the modules do on a node: become) against real folders and real tar/zstd.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ansible_collections.hvd.cluster.tests.unit.plugins.support import root_only, run_module, sha

from ansible_collections.hvd.cluster.plugins.modules import hvd_artifact


# ------------------------------------------------------------------------------------------ hvd_artifact


def test_published_artifact_gets_its_sha256_beside_it_and_verifies(tmp_path: Path) -> None:
    part = tmp_path / "env.tar.zst.part-1"
    part.write_bytes(b"archive" * 1000)
    final = tmp_path / "env.tar.zst"
    hvd_artifact.publish(str(part), str(final), sha(b"archive" * 1000))
    assert not part.exists() and final.read_bytes() == b"archive" * 1000
    assert (tmp_path / "env.tar.zst.sha256").read_text().split()[0] == sha(b"archive" * 1000)
    verified = hvd_artifact.verify(str(final), None)
    assert verified["valid"] and verified["size"] == 7000  # hvd_fanout sizes its copies by it, with no second look


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


def offered_folder(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A work folder holding exactly what an offline bundle offers a build, and its list (path -> sha256)."""
    work = tmp_path / "work"
    files = {"wheels/six-1.16.0-py2.py3-none-any.whl": b"six", "channel/noarch/repodata.json": b"{}",
             "channel/linux-64/python-3.11.9-h0_0.conda": b"python"}
    for rel, data in files.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_bytes(data)
    return work, {rel: sha(data) for rel, data in files.items()}


def test_listed_passes_a_folder_holding_exactly_its_files_in_check_mode_too(tmp_path: Path) -> None:
    work, files = offered_folder(tmp_path)
    assert hvd_artifact.listed(str(work), files) == []
    for check in (False, True):
        result = run_module("hvd_artifact", {"state": "listed", "path": str(work), "files": files}, check=check)
        assert not result.get("failed") and result["changed"] is False, result


def test_listed_names_an_extra_file_a_changed_file_a_missing_file_and_symlinks(tmp_path: Path) -> None:
    work, files = offered_folder(tmp_path)
    (work / "wheels" / "evil-1.0.tar.gz").write_bytes(b"sdist")  # an extra file
    (work / "wheels" / "six-1.16.0-py2.py3-none-any.whl").write_bytes(b"SIX")  # changed, same size
    (work / "channel" / "noarch" / "repodata.json").unlink()
    (work / "channel" / "noarch" / "repodata.json").symlink_to(tmp_path / "elsewhere.json")  # a link at a listed name
    (tmp_path / "elsewhere.json").write_bytes(b"{}")  # with the listed bytes: a link is never followed
    (work / "channel" / "linux-64" / "python-3.11.9-h0_0.conda").unlink()
    (work / "channel" / "osx-64").symlink_to(tmp_path)  # a symlinked folder
    result = run_module("hvd_artifact", {"state": "listed", "path": str(work), "files": files})
    assert result["failed"] and result["msg"].startswith(f"{work}: not exactly the listed files"), result
    assert sorted(result["problems"]) == sorted([
        f"{work}/wheels/evil-1.0.tar.gz: not listed",
        f"{work}/wheels/six-1.16.0-py2.py3-none-any.whl: sha256 {sha(b'SIX')}, expected {sha(b'six')}",
        f"{work}/channel/noarch/repodata.json: a symlink (not followed)",
        f"{work}/channel/linux-64/python-3.11.9-h0_0.conda: missing",
        f"{work}/channel/osx-64: a symlink (not followed)",
    ]), result["problems"]


def test_listed_refuses_a_listed_path_that_leaves_the_folder(tmp_path: Path) -> None:
    work, files = offered_folder(tmp_path)
    problems = hvd_artifact.listed(str(work), {**files, "../outside": sha(b"x"), "wheels/./six": "0" * 64})
    assert "'../outside': not a plain relative path below" in problems[0] and "'wheels/./six'" in problems[1]


# ------------------------------------------------------------------------------------------ root uses what it verified


def test_a_wheel_swapped_between_the_check_and_the_install_is_copied_as_verified(tmp_path: Path) -> None:
    """hvd_artifact state=copied: root copies the login user's wheel into its own folder hashing what it writes;
    the wheel swapped mid-copy changes nothing, a wheel rewritten in place is refused and leaves no file."""
    from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import copy_verified

    good_bytes = os.urandom(3 << 20)
    wheel = tmp_path / "horovod-0.28.1-cp311-linux_x86_64.whl"
    wheel.write_bytes(good_bytes)
    (tmp_path / "evil.whl").write_bytes(os.urandom(3 << 20))
    root_dir = tmp_path / "root"
    root_dir.mkdir(mode=0o700)
    swapped: list = []
    copy_verified(str(wheel), str(root_dir / wheel.name), sha(good_bytes),
                  between=lambda: swapped or swapped.append(os.replace(tmp_path / "evil.whl", wheel)))
    assert swapped and (root_dir / wheel.name).read_bytes() == good_bytes
    assert oct((root_dir / wheel.name).stat().st_mode & 0o777) == "0o600"
    wheel.write_bytes(good_bytes)

    def rewrite() -> None:
        with open(wheel, "r+b") as handle:
            handle.seek(2 << 20)
            handle.write(b"\0" * 4096)

    (root_dir / wheel.name).unlink()
    with pytest.raises(ValueError, match="not the verified file"):
        copy_verified(str(wheel), str(root_dir / wheel.name), sha(good_bytes), between=rewrite)
    assert list(root_dir.iterdir()) == []
    result = run_module("hvd_artifact", {"state": "copied", "src": str(wheel),
                                         "path": str(root_dir / "w.whl"), "sha256": sha(good_bytes)})
    assert result["failed"] and "not the verified file" in result["msg"] and list(root_dir.iterdir()) == []


@root_only
def test_copied_into_a_workdir_makes_the_private_folder_clean_in_the_same_run(tmp_path: Path) -> None:
    """hvd_horovod's one module run for root's folder and the copy: the folder made root-owned 0700 and emptied of
    an earlier run's leftovers, the copy in it; a folder someone else made is refused, with nothing copied; a path
    that is more than a name is refused."""
    data = os.urandom(1 << 16)
    wheel = tmp_path / "horovod.whl"
    wheel.write_bytes(data)
    state = tmp_path / "state"
    args = {"state": "copied", "src": str(wheel), "path": "w.whl", "sha256": sha(data), "workdir": "horovod-install",
            "workdir_root": str(state)}
    looked = run_module("hvd_artifact", args, check=True)
    assert looked["changed"] and looked["path"] == str(state / "horovod-install" / "w.whl") and not state.exists()
    done = run_module("hvd_artifact", args)
    folder = state / "horovod-install"
    assert done["changed"] and done["path"] == str(folder / "w.whl") and (folder / "w.whl").read_bytes() == data
    assert all(oct(f.stat().st_mode & 0o777) == "0o700" and f.stat().st_uid == 0 for f in (state, folder))
    (folder / "leftover").write_text("from a run cut short")
    again = run_module("hvd_artifact", {**args, "path": "x.whl"})
    assert sorted(p.name for p in folder.iterdir()) == ["x.whl"] and again["path"] == str(folder / "x.whl")
    folder.chmod(0o777)
    refused = run_module("hvd_artifact", args)
    assert refused["failed"] and "not 0700" in refused["msg"] and sorted(p.name for p in folder.iterdir()) == ["x.whl"]
    named = run_module("hvd_artifact", {**args, "path": "../w.whl"})
    assert named["failed"] and "the file's name only" in named["msg"]


def test_held_makes_the_folder_private_and_holds_nothing_there_yet(tmp_path: Path) -> None:
    copy = tmp_path / "cache" / "artifacts" / "horovod-0.28.1-cp311-cp311-linux_x86_64.whl"
    looked = run_module("hvd_artifact", {"state": "held", "path": str(copy), "size": 3}, check=True)
    assert looked["changed"] and not looked["holds"] and not copy.parent.parent.exists()
    made = run_module("hvd_artifact", {"state": "held", "path": str(copy), "size": 3})
    assert made["changed"] and not made["holds"] and made["path"] == str(copy)
    # the folder and the parents it had to make, 0700 whatever the umask
    assert (copy.parent.stat().st_mode & 0o777) == 0o700 and (copy.parent.parent.stat().st_mode & 0o777) == 0o700
    copy.parent.chmod(0o755)  # opened up by someone: closed again
    again = run_module("hvd_artifact", {"state": "held", "path": str(copy), "size": 3})
    assert again["changed"] and (copy.parent.stat().st_mode & 0o777) == 0o700


def test_held_judges_the_copy_by_size_and_by_sha256_only_where_given(tmp_path: Path) -> None:
    folder = tmp_path / "artifacts"
    folder.mkdir(mode=0o700)
    copy = folder / "horovod.whl"
    copy.write_bytes(b"abc")
    by_size = run_module("hvd_artifact", {"state": "held", "path": str(copy), "size": 3})
    assert by_size["holds"] and not by_size["changed"]
    assert not run_module("hvd_artifact", {"state": "held", "path": str(copy), "size": 4})["holds"]
    assert not run_module("hvd_artifact", {"state": "held", "path": str(copy)})["holds"]  # size unknown
    good = run_module("hvd_artifact", {"state": "held", "path": str(copy), "size": 3, "sha256": sha(b"abc")})
    assert good["holds"] and not good["changed"] and copy.exists()
    looked = run_module("hvd_artifact", {"state": "held", "path": str(copy), "size": 3, "sha256": sha(b"abd")},
                        check=True)
    assert not looked["holds"] and looked["changed"] and copy.exists()  # check mode removes nothing
    rotten = run_module("hvd_artifact", {"state": "held", "path": str(copy), "size": 3, "sha256": sha(b"abd")})
    assert not rotten["holds"] and rotten["removed"] and "corrupt or truncated" in rotten["reason"]
    assert not copy.exists()
    os.symlink(tmp_path / "elsewhere", copy)  # a link is no copy of its own
    (tmp_path / "elsewhere").write_bytes(b"abc")
    assert not run_module("hvd_artifact", {"state": "held", "path": str(copy), "size": 3})["holds"]


def test_held_removes_older_copies_only_and_refuses_a_linked_folder(tmp_path: Path) -> None:
    folder = tmp_path / "artifacts"
    folder.mkdir(mode=0o700)
    current = folder / "horovod-0.28.1-b.whl"
    current.write_bytes(b"new")
    (folder / "horovod-0.28.1-a.whl").write_bytes(b"old")
    (folder / "env-1.tar.zst").write_bytes(b"env")  # another label's copy: not this prune's
    (folder / "horovod-link.whl").symlink_to(folder / "env-1.tar.zst")  # links are not removed through
    result = run_module("hvd_artifact", {"state": "held", "path": str(current), "size": 3,
                                         "prune": ["horovod-*.whl"]})
    assert result["holds"] and result["changed"] and result["pruned"] == [str(folder / "horovod-0.28.1-a.whl")]
    assert sorted(p.name for p in folder.iterdir()) == ["env-1.tar.zst", "horovod-0.28.1-b.whl", "horovod-link.whl"]
    linked = tmp_path / "linked"
    linked.symlink_to(folder)
    refused = run_module("hvd_artifact", {"state": "held", "path": str(linked / "x.whl"), "size": 3})
    assert refused["failed"] and "not a folder of its own" in refused["msg"]


def test_verified_with_a_pattern_finds_and_judges_the_file_in_a_cache_entry_in_one_run(tmp_path: Path) -> None:
    entry = tmp_path / "horovod" / "0123456789abcdef"
    missing = run_module("hvd_artifact", {"path": str(entry), "pattern": "horovod-*.whl"})
    assert missing["valid"] is False and not missing["removed"] and "missing" in missing["reason"]
    entry.mkdir(parents=True)
    wheel = entry / "horovod-0.28.1-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"wheel")
    (entry / (wheel.name + ".sha256")).write_text(sha(b"wheel") + "  " + wheel.name + "\n")
    (entry / (wheel.name + ".part-20261129-1")).write_bytes(b"half")  # another run's fetch in flight: no match
    found = run_module("hvd_artifact", {"path": str(entry), "pattern": "horovod-*.whl"})
    assert found["valid"] and found["path"] == str(wheel) and found["sha256"] == sha(b"wheel")
    wheel.write_bytes(b"wheeL")
    rotten = run_module("hvd_artifact", {"path": str(entry), "pattern": "horovod-*.whl"})
    assert rotten["valid"] is False and rotten["removed"] and rotten["path"] == str(wheel) and not wheel.exists()
