"""`hvdcluster bundle HOSTS DIR`: its arguments, the folder it writes into (nothing of another folder removed, no
symlink followed, fresh temporary names, no marker left) and a re-run, which removes only what the earlier
manifest listed. Real files in tmp_path and OpenSSH's own ssh-keygen; no node is contacted."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from hvdcluster import bundle, cli
from tests.unit.bundle_fakes import HOSTS, allowed_signers, digest, keygen, make_bundle, one_line

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_bundle as LIB


def test_bundle_into_a_folder_that_is_no_bundle_is_refused_and_nothing_is_removed(tmp_path: Path,
                                                                                  capsys: pytest.CaptureFixture[str]
                                                                                  ) -> None:
    home = tmp_path / "home"
    (home / "cache").mkdir(parents=True)
    (home / "cache" / "x").write_text("mine")
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(HOSTS)
    assert cli.main(["bundle", str(hosts), str(home), "-o", str(tmp_path / "inv")]) == 2
    err = one_line(capsys)
    assert f"bundle DIR {home}: not empty and holds no manifest.yaml" in err, err
    assert (home / "cache" / "x").read_text() == "mine" and sorted(p.name for p in home.iterdir()) == ["cache"]
    assert not (tmp_path / "inv").exists()


def test_bundle_into_a_folder_with_an_unreadable_manifest_is_refused(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "b"
    (dest / "apt").mkdir(parents=True)
    (dest / "manifest.yaml").write_text("just: notes\n")
    with pytest.raises(Exception, match="not an hvdcluster bundle manifest"):
        bundle.earlier_listing(dest)


def test_bundle_sign_with_a_missing_key_is_refused_before_anything_runs(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(HOSTS)
    assert cli.main(["bundle", str(hosts), str(tmp_path / "b"), "-o", str(tmp_path / "inv"),
                     "--sign", str(tmp_path / "no-key")]) == 2
    assert f"--sign: {tmp_path / 'no-key'}: not a readable file" in one_line(capsys)
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("argv", [["HOSTS", "DIR", "-o", "INV"], ["HOSTS", "DIR"]])
def test_bundle_takes_dir_positionally_and_o_for_the_inventories(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                 argv: list[str]) -> None:
    """Both spellings reach the same folders: the refusal of a missing --sign key names them before anything runs
    (the bundle folder is not made, nor the inventories folder)."""
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(HOSTS)
    words = {"HOSTS": str(hosts), "DIR": str(tmp_path / "b"), "INV": str(tmp_path / "inv")}
    assert cli.main(["bundle", *[words.get(w, w) for w in argv], "--sign", str(tmp_path / "no-key")]) == 2
    assert "--sign:" in one_line(capsys)
    assert not (tmp_path / "b").exists() and not (tmp_path / "inv").exists()


@pytest.mark.parametrize("argv, word", [(["HOSTS", "-o", "DIR"], "name the cluster's hosts.yaml and the bundle folder"),
                                        (["HOSTS", "DIR", "--out", "DIR"], "unrecognized arguments: --out"),
                                        (["HOSTS"], "name the cluster's hosts.yaml and the bundle folder")])
def test_bundle_folders_given_twice_or_not_at_all_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              argv: list[str], word: str) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(HOSTS)
    words = {"HOSTS": str(hosts), "DIR": str(tmp_path / "b"), "INV": str(tmp_path / "inv")}
    assert cli.main(["bundle", *[words.get(w, w) for w in argv]]) == 2
    assert word in one_line(capsys)
    assert not (tmp_path / "b").exists()


def test_a_rerun_removes_only_what_the_earlier_manifest_listed(tmp_path: Path) -> None:
    dest = make_bundle(tmp_path / "b", {"apt/a_1_amd64.deb": b"a", "apt/b_1_amd64.deb": b"b", "pypi/c.whl": b"c"})
    (dest / "apt" / "notes.txt").write_text("mine")  # never listed: not ours to remove
    (dest / "cache").mkdir()
    (dest / "cache" / "x").write_text("mine")
    (dest / "manifest.yaml.sig").write_text("a signature of the earlier manifest")
    earlier = bundle.earlier_listing(dest)
    assert earlier == {"apt/a_1_amd64.deb", "apt/b_1_amd64.deb", "pypi/c.whl"}
    collected = {"files": [{"path": "apt/a_1_amd64.deb", "sha256": hashlib.sha256(b"a").hexdigest(), "why": "a"}]}
    summary = bundle.finish(dest, collected, [], "node1", earlier)
    assert summary["removed"] == ["apt/b_1_amd64.deb", "pypi/c.whl"]
    assert (dest / "apt" / "a_1_amd64.deb").exists() and not (dest / "apt" / "b_1_amd64.deb").exists()
    assert (dest / "apt" / "notes.txt").read_text() == "mine" and (dest / "cache" / "x").read_text() == "mine"
    assert not (dest / "manifest.yaml.sig").exists()  # it signed the manifest that was replaced
    assert summary["manifest_sha256"] == digest(dest / "manifest.yaml")
    # with no earlier manifest, nothing is removed at all
    fresh = tmp_path / "fresh"
    (fresh / "apt").mkdir(parents=True)
    (fresh / bundle.MARKER).touch()  # a run cut short before its manifest: it may run again
    (fresh / "apt" / "left.deb").write_bytes(b"x")
    assert bundle.earlier_listing(fresh) == set()
    assert bundle.finish(fresh, {"files": []}, [], "node1", set())["removed"] == []
    assert (fresh / "apt" / "left.deb").exists()


def test_a_rerun_that_changes_nothing_keeps_the_manifest_its_pin_and_its_signature(tmp_path: Path) -> None:
    dest = tmp_path / "b"
    assert bundle.earlier_listing(dest) == set()  # a new folder
    (dest / "apt").mkdir(parents=True)
    (dest / "apt" / "a_1_amd64.deb").write_bytes(b"a")
    collected = {"files": [{"path": "apt/a_1_amd64.deb", "sha256": hashlib.sha256(b"a").hexdigest(), "why": "a"}],
                 "keys": {"env": "0123456789abcdef"}}
    first = bundle.finish(dest, collected, [], "node1", set())
    key = keygen(tmp_path / "builder")
    bundle.sign(dest, str(key))
    time.sleep(1.1)  # another second on the manifest's clock
    again = bundle.finish(dest, collected, [], "node1", bundle.earlier_listing(dest))
    assert again["manifest_sha256"] == first["manifest_sha256"] == digest(dest / "manifest.yaml")
    signers = allowed_signers(tmp_path / "allowed_signers", ("builder@lab", key))
    assert LIB.verify_signature(str(dest), (dest / "manifest.yaml").read_bytes(), str(signers)) == "builder@lab"
    changed = bundle.finish(dest, {**collected, "keys": {"env": "fedcba9876543210"}}, [], "node1", {"apt/a_1_amd64.deb"})
    assert changed["manifest_sha256"] != first["manifest_sha256"] and not (dest / "manifest.yaml.sig").exists()


@pytest.mark.parametrize("spelling", [["DIR"], ["DIR", "-o", "INV"]])
def test_bundle_into_a_folder_with_a_symlinked_subfolder_is_refused_and_its_target_is_intact(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], spelling: list[str]) -> None:
    """An earlier bundle whose apt/ was made a link elsewhere: a re-run would write and remove through it."""
    dest = make_bundle(tmp_path / "b", {"apt/a_1_amd64.deb": b"a", "pypi/c.whl": b"c"})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "a_1_amd64.deb").write_text("someone else's file of a listed name")
    (dest / "apt" / "a_1_amd64.deb").unlink()
    (dest / "apt").rmdir()
    (dest / "apt").symlink_to(elsewhere)
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(HOSTS)
    argv = [{"DIR": str(dest), "INV": str(tmp_path / "inventories")}.get(word, word) for word in spelling]
    assert cli.main(["bundle", str(hosts), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"bundle DIR {dest}: holds a symlink or something else that is no plain file: apt;" in err, err
    assert (elsewhere / "a_1_amd64.deb").read_text() == "someone else's file of a listed name"
    assert sorted(p.name for p in dest.iterdir()) == ["apt", "manifest.yaml", "pypi"]  # nothing written, no marker
    assert not (tmp_path / "inventories").exists()


def test_bundle_into_a_dir_that_is_a_symlink_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    real = make_bundle(tmp_path / "real", {"apt/a_1_amd64.deb": b"a"})
    (tmp_path / "link").symlink_to(real)
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(HOSTS)
    assert cli.main(["bundle", str(hosts), str(tmp_path / "link"), "-o", str(tmp_path / "inv")]) == 2
    assert f"bundle DIR {tmp_path / 'link'}: a symlink; name the folder itself" in one_line(capsys)
    assert sorted(p.name for p in real.iterdir()) == ["apt", "manifest.yaml"]


def test_a_rerun_removes_nothing_through_a_symlink_made_after_its_first_look(tmp_path: Path) -> None:
    dest = make_bundle(tmp_path / "b", {"apt/a_1_amd64.deb": b"a", "pypi/c.whl": b"c"})
    earlier = bundle.earlier_listing(dest)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "c.whl").write_text("not the bundle's")
    (dest / "pypi" / "c.whl").unlink()
    (dest / "pypi").rmdir()
    (dest / "pypi").symlink_to(elsewhere)
    collected = {"files": [{"path": "apt/a_1_amd64.deb", "sha256": hashlib.sha256(b"a").hexdigest(), "why": "a"}]}
    with pytest.raises(Exception, match=f"{dest / 'pypi'}: a symlink in the bundle folder: nothing is removed"):
        bundle.finish(dest, collected, [], "node1", earlier)
    assert (elsewhere / "c.whl").read_text() == "not the bundle's"


def test_files_are_written_into_the_bundle_through_fresh_temporary_names(tmp_path: Path) -> None:
    """The old temporary name (.NAME.PID.tmp) was predictable: a link planted there was written through."""
    dest = tmp_path / "b"
    (dest / "wheelhouse").mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("intact")
    (dest / "wheelhouse" / f".x.whl.{os.getpid()}.tmp").symlink_to(victim)
    src = tmp_path / "x.whl"
    src.write_bytes(b"wheel")
    assert bundle.copy_if_changed(src, dest / "wheelhouse" / "x.whl")
    assert victim.read_text() == "intact" and (dest / "wheelhouse" / "x.whl").read_bytes() == b"wheel"
    assert sorted(p.name for p in (dest / "wheelhouse").iterdir()) == [f".x.whl.{os.getpid()}.tmp", "x.whl"]


def test_a_finished_bundle_keeps_no_marker(tmp_path: Path) -> None:
    dest = tmp_path / "b"
    (dest / "apt").mkdir(parents=True)
    bundle.mark(dest)
    (dest / "apt" / "a_1_amd64.deb").write_bytes(b"a")
    collected = {"files": [{"path": "apt/a_1_amd64.deb", "sha256": hashlib.sha256(b"a").hexdigest(), "why": "a"}]}
    bundle.finish(dest, collected, [], "node1", set())
    assert sorted(p.name for p in dest.iterdir()) == ["apt", "manifest.yaml"]
    assert LIB.strays(str(dest), LIB.load(str(dest))) == []
