"""A bundle is exactly its manifest: a file or a symlink it does not list stops `up` (named, before any listed file
is read), `bundle --verify` and hvd_base's module; hvd_pyenv's lock refuses a resolved distribution whose sha256
the manifest does not list. Real files in tmp_path; no node is contacted."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hvdcluster import bundle, cli
from tests.unit.bundle_fakes import digest, flip, hosts_file, one_line, opened_in, snapshot, up
from tests.unit.bundle_fakes import cache, folder  # noqa: F401 - fixtures: the tests below ask for them by name


# ------------------------------------------------------------------------------------------ exactly its manifest

UNLISTED = {  # what a bundle offers a rebuild if the roles list its folders: each would run or install as root
    "wheel": "pypi/evil-1.0-py3-none-any.whl",
    "sdist": "pypi/evil-1.0.tar.gz",  # its in-tree PEP 517 backend would run as root to resolve it
    "conda package": "conda/noarch/evil-1.0-0.conda",
    "wheelhouse wheel": "wheelhouse/evil-1.0-py3-none-any.whl",
}


@pytest.mark.parametrize("kind", sorted(UNLISTED))
def test_an_unlisted_file_stops_up_naming_it_before_any_file_is_read(folder: Path, cache: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str],
                                                                     kind: str) -> None:
    pin = digest(folder / "manifest.yaml")
    planted = folder / UNLISTED[kind]
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_bytes(b"planted")
    before = snapshot(cache)
    opened, watching = opened_in(folder)
    try:
        assert up(hosts_file(tmp_path, folder, f"bundle_sha256: '{pin}'"), tmp_path) == 2
    finally:
        watching[0] = False
    err = one_line(capsys)
    assert f"{folder}: holds 1 file(s) its manifest does not list (a bundle is exactly its manifest" in err, err
    assert f": {UNLISTED[kind]}; remove them" in err, err
    assert opened == [str(folder / "manifest.yaml")], opened  # no listed file read, nothing packed or copied
    assert snapshot(cache) == before and not (tmp_path / "inv").exists()


def test_every_unlisted_file_and_symlink_is_named_in_one_line_and_a_long_list_is_cut(folder: Path, cache: Path,
                                                                                    tmp_path: Path,
                                                                                    capsys: pytest.CaptureFixture[str]
                                                                                    ) -> None:
    pin = digest(folder / "manifest.yaml")
    for rel in UNLISTED.values():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(b"planted")
    (folder / "apt" / "evil.deb").symlink_to(folder / "apt" / "zstd_1.5.4_amd64.deb")  # listed bytes, unlisted name
    assert up(hosts_file(tmp_path, folder, f"bundle_sha256: '{pin}'"), tmp_path) == 2
    err = one_line(capsys)
    assert "holds 5 file(s) its manifest does not list" in err, err
    assert all(rel in err for rel in UNLISTED.values()) and "apt/evil.deb (a symlink)" in err, err
    for index in range(12):
        (folder / "pypi" / f"more-{index:02}.whl").write_bytes(b"x")
    assert up(hosts_file(tmp_path, folder, f"bundle_sha256: '{pin}'"), tmp_path) == 2
    err = one_line(capsys)
    assert "holds 17 file(s)" in err and "(and 7 more); remove them" in err, err
    assert f"`hvdcluster bundle --verify {folder}` lists them" in err
    assert not (tmp_path / "inv").exists()


def test_a_listed_file_that_is_a_symlink_is_refused_even_with_the_listed_bytes(folder: Path, cache: Path,
                                                                              tmp_path: Path,
                                                                              capsys: pytest.CaptureFixture[str]
                                                                              ) -> None:
    pin = digest(folder / "manifest.yaml")
    wheel = folder / "pypi" / "six-1.16.0-py2.py3-none-any.whl"
    real = tmp_path / "elsewhere.whl"
    wheel.rename(real)
    wheel.symlink_to(real)
    before = snapshot(cache)
    assert up(hosts_file(tmp_path, folder, f"bundle_sha256: '{pin}'"), tmp_path) == 2
    assert "pypi/six-1.16.0-py2.py3-none-any.whl (a symlink)" in one_line(capsys)
    assert snapshot(cache) == before


def test_verify_names_every_unlisted_file_and_symlink(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for rel in UNLISTED.values():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(b"planted")
    (folder / "openmpi").mkdir()
    (folder / "openmpi" / "link").symlink_to("/etc")
    (folder / "notes.txt").write_text("a file beside the manifest is no file of the bundle either")
    assert cli.main(["bundle", "--verify", str(folder), "--json"]) == 1
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert sorted(problems) == sorted(
        [f"{folder / rel}: not in the manifest (a file nobody vouches for)" for rel in [*UNLISTED.values(), "notes.txt"]]
        + [f"{folder / 'openmpi' / 'link'}: a symlink (a bundle holds plain files only, each listed in its manifest)"])


def run_bundle_module(folder: Path, cache_dir: Path) -> dict:
    """hvd_bundle (hvd_base's controller side, a hand-run playbook's check) run as Ansible runs it."""
    root = Path(__file__).resolve().parents[2]
    boot = ("import sys, runpy; sys.path.insert(0, sys.argv[1]); "
            "sys.argv = sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')")
    args = {"ANSIBLE_MODULE_ARGS": {"path": str(folder), "cache_dir": str(cache_dir),
                                    "manifest_sha256": digest(folder / "manifest.yaml")}}
    proc = subprocess.run([sys.executable, "-c", boot, str(root / "collections"),
                           str(root / "plugins" / "modules" / "hvd_bundle.py")], input=json.dumps(args),
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""})
    return json.loads(proc.stdout)


def test_the_module_refuses_an_unlisted_file_a_symlink_and_a_changed_wheel_of_the_same_size(folder: Path,
                                                                                             tmp_path: Path) -> None:
    cache_dir = tmp_path / "module-cache"
    assert not run_bundle_module(folder, cache_dir).get("failed")
    (folder / UNLISTED["sdist"]).write_bytes(b"planted")
    result = run_bundle_module(folder, cache_dir)
    assert result["failed"] and "holds 1 file(s) its manifest does not list" in result["msg"], result
    assert UNLISTED["sdist"] in result["msg"]
    (folder / UNLISTED["sdist"]).unlink()
    (folder / "cache" / "link").symlink_to(cache_dir)
    result = run_bundle_module(folder, cache_dir)
    assert result["failed"] and "cache/link (a symlink)" in result["msg"], result
    (folder / "cache" / "link").unlink()
    wheel = folder / "pypi" / "six-1.16.0-py2.py3-none-any.whl"
    flip(wheel)  # its size unchanged: sizes alone passed it before
    result = run_bundle_module(folder, cache_dir)
    assert result["failed"] and f"{wheel}: sha256 {digest(wheel)}, the manifest says" in result["msg"], result
    assert "(needed by hvd_pyenv" in result["msg"]


def test_a_bundle_made_before_the_marker_was_removed_still_passes_with_its_empty_marker(folder: Path, cache: Path,
                                                                                        tmp_path: Path) -> None:
    (folder / bundle.MARKER).touch()
    pin = digest(folder / "manifest.yaml")
    assert bundle.check_trusted(folder, sha256=pin, signers=None, hosts="h.yaml", cache_dir=cache)
    (folder / bundle.MARKER).write_text("not empty: a file like any other")
    with pytest.raises(Exception, match=r"holds 1 file\(s\) its manifest does not list .*: \.hvdcluster-bundle;"):
        bundle.check_trusted(folder, sha256=pin, signers=None, hosts="h.yaml", cache_dir=cache)


# ------------------------------------------------------------------------------------------ hvd_pyenv's lock


LOCK = Path(__file__).resolve().parents[2] / "roles" / "hvd_pyenv" / "files" / "lock.py"


def pip_report(tmp_path: Path, **wheels: bytes) -> Path:
    """pip's --report of an install from local files (file:// URLs, as --find-links gives them)."""
    items = []
    for name, data in wheels.items():
        path = tmp_path / f"{name}-1.0-py3-none-any.whl"
        path.write_bytes(data)
        items.append({"metadata": {"name": name, "version": "1.0"},
                      "download_info": {"url": path.as_uri(), "archive_info": {}}})
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"install": items}))
    return report


def run_lock(*argv: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-I", str(LOCK), *map(str, argv)], capture_output=True, text=True)


def test_the_lock_refuses_a_resolved_file_whose_sha256_the_manifest_does_not_list(tmp_path: Path) -> None:
    report = pip_report(tmp_path, six=b"six wheel", evil=b"evil wheel")
    allowed = tmp_path / "allowed-sha256.txt"
    allowed.write_text(hashlib.sha256(b"six wheel").hexdigest() + "\n")
    lock = tmp_path / "hvd-requirements.lock"
    proc = run_lock(report, lock, allowed)
    assert proc.returncode == 1 and not lock.exists(), proc
    assert "1 resolved distribution(s) the bundle's manifest does not list" in proc.stderr, proc.stderr
    assert f"evil==1.0 from {(tmp_path / 'evil-1.0-py3-none-any.whl').as_uri()} " \
           f"(sha256 {hashlib.sha256(b'evil wheel').hexdigest()})" in proc.stderr and "six==" not in proc.stderr
    allowed.write_text(f"{hashlib.sha256(b'six wheel').hexdigest()}\n{hashlib.sha256(b'evil wheel').hexdigest()}\n")
    assert run_lock(report, lock, allowed).returncode == 0
    assert f"evil==1.0 --hash=sha256:{hashlib.sha256(b'evil wheel').hexdigest()}" in lock.read_text()
    lock.unlink()
    assert run_lock(report, lock).returncode == 0 and lock.read_text().count("--hash=sha256:") == 2  # no bundle
