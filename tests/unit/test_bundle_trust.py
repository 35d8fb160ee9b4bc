"""A bundle is trusted through its manifest (a pinned sha256 or an OpenSSH signature), then every file by the sha256
the manifest gives it; the controller cache takes nothing else. Real files in tmp_path and OpenSSH's own
ssh-keygen; no node is contacted (10.0.0.1 is never reached: every refusal here comes first).

A bundle holding anything its manifest does not list: test_bundle_unlisted.py; what `hvdcluster bundle HOSTS DIR`
writes and removes: test_bundle_dir.py; what they share: bundle_fakes.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from hvdcluster import bundle, cli
from tests.unit.bundle_fakes import (
    ENV,
    ENV_DATA,
    FILES,
    HOSTS,
    WHEEL,
    WHEEL_DATA,
    allowed_signers,
    digest,
    flip,
    opened_in,
    hosts_file,
    keygen,
    one_line,
    sidecar,
    snapshot,
    up,
)
from tests.unit.bundle_fakes import cache, folder  # noqa: F401 - fixtures: the tests below ask for them by name

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_bundle as LIB
from ansible_collections.hvd.cluster.plugins.module_utils import hvd_bundle_cache as CACHE


# ------------------------------------------------------------------------------------------ the manifest's trust


def test_an_unpinned_bundle_is_refused_saying_how_to_pin_it(folder: Path, cache: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(cache)
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(HOSTS)
    assert up(hosts, tmp_path, "--bundle", str(folder)) == 2
    err = one_line(capsys)
    assert f"{folder / 'manifest.yaml'} is not pinned" in err
    assert f"network.bundle_sha256 in {hosts}" in err and "network.bundle_signers" in err and "--sign KEY" in err
    assert not (tmp_path / "inv").exists() and snapshot(cache) == before
    # the same through network.bundle
    assert up(hosts_file(tmp_path, folder, ""), tmp_path) == 2
    assert "is not pinned" in one_line(capsys)


def test_a_pin_of_another_manifest_is_refused_naming_both_digests(folder: Path, cache: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(cache)
    assert up(hosts_file(tmp_path, folder, f"bundle_sha256: '{'ab' * 32}'"), tmp_path) == 2
    err = one_line(capsys)
    assert f"sha256 {digest(folder / 'manifest.yaml')}" in err and "ab" * 32 in err, err
    assert not (tmp_path / "inv").exists() and snapshot(cache) == before


def test_a_pinned_bundle_is_checked_and_fills_what_the_controller_cache_lacks(folder: Path, cache: Path,
                                                                              tmp_path: Path) -> None:
    before = snapshot(cache)
    hosts = hosts_file(tmp_path, folder, f"bundle_sha256: '{digest(folder / 'manifest.yaml').upper()}'")
    # `inventory` reads hosts.yaml as `up` does (the bundle's check included) and contacts no node
    assert cli.main(["inventory", str(hosts), "-o", str(tmp_path / "inv")]) == 0
    assert (cache / "envs" / "env-0123456789abcdef.tar.zst").read_bytes() == ENV_DATA
    assert (cache / "envs" / "env-0123456789abcdef.tar.zst.sha256").read_bytes() == FILES[ENV + ".sha256"]
    assert (cache / WHEEL.removeprefix("cache/")).read_bytes() == WHEEL_DATA
    manifest = LIB.load(str(folder))
    archive = Path(CACHE.archive_path(manifest, str(cache)))
    # the archive written from the check's own read is the one the module would make: same bytes
    other = tmp_path / "other-cache"
    made, sha, _ = CACHE.apt_archive(str(folder), manifest, str(other))
    assert archive.read_bytes() == Path(made).read_bytes() and digest(archive) == sha
    for name, data in before.items():  # what was there is untouched
        assert snapshot(cache)[name] == data
    # hvd_base's module then copies nothing: it hashes the controller cache's copies and finds them right
    assert CACHE.seed_cache(str(folder), manifest, str(cache)) == []
    assert CACHE.apt_archive(str(folder), manifest, str(cache)) == (str(archive), sha, False)


def test_a_signed_bundle_is_accepted_from_a_listed_signer(folder: Path, cache: Path, tmp_path: Path) -> None:
    key, other = keygen(tmp_path / "builder"), keygen(tmp_path / "other")
    signers = allowed_signers(tmp_path / "allowed_signers", ("builder@lab", key))
    bundle.sign(folder, str(other))
    assert bundle.sign(folder, str(key)) == folder / "manifest.yaml.sig"  # signed again: the earlier one replaced
    assert (folder / "manifest.yaml.sig").read_text().startswith("-----BEGIN SSH SIGNATURE-----")
    assert LIB.authenticate(str(folder), (folder / "manifest.yaml").read_bytes(), signers=str(signers)) == (
        "the signature of builder@lab")
    hosts = hosts_file(tmp_path, folder, f"bundle_signers: {signers.name}")  # relative to hosts.yaml
    assert cli.main(["inventory", str(hosts), "-o", str(tmp_path / "inv")]) == 0
    assert (cache / "envs" / "env-0123456789abcdef.tar.zst").is_file()


def test_a_signature_by_a_key_the_signers_file_does_not_list_is_refused(folder: Path, cache: Path, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    trusted, stranger = keygen(tmp_path / "builder"), keygen(tmp_path / "stranger", "mallory@lab")
    signers = allowed_signers(tmp_path / "allowed_signers", ("builder@lab", trusted))
    bundle.sign(folder, str(stranger))
    before = snapshot(cache)
    assert up(hosts_file(tmp_path, folder, f"bundle_signers: '{signers}'"), tmp_path) == 2
    err = one_line(capsys)
    assert f"{folder / 'manifest.yaml.sig'}: made by a key that {signers} does not list" in err, err
    assert not (tmp_path / "inv").exists() and snapshot(cache) == before


def test_a_manifest_changed_after_it_was_signed_is_refused(folder: Path, cache: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    key = keygen(tmp_path / "builder")
    signers = allowed_signers(tmp_path / "allowed_signers", ("builder@lab", key))
    bundle.sign(folder, str(key))
    # a planted package: the file and a manifest that lists it, the signature kept
    (folder / "apt" / "planted_1.0_amd64.deb").write_bytes(b"evil")
    text = (folder / "manifest.yaml").read_text()
    text += (f"- path: apt/planted_1.0_amd64.deb\n  sha256: {hashlib.sha256(b'evil').hexdigest()}\n  size: 4\n"
             "  why: x\n  role: hvd_base\n")
    (folder / "manifest.yaml").write_text(text)
    assert LIB.load(str(folder))["entries"][-1]["path"] == "apt/planted_1.0_amd64.deb"
    before = snapshot(cache)
    assert up(hosts_file(tmp_path, folder, f"bundle_signers: '{signers}'"), tmp_path) == 2
    err = one_line(capsys)
    assert "manifest.yaml.sig: not a valid hvdcluster-bundle signature of manifest.yaml by builder@lab" in err, err
    assert snapshot(cache) == before


def test_a_signature_made_for_another_namespace_is_refused(folder: Path, tmp_path: Path) -> None:
    key = keygen(tmp_path / "builder")
    signers = allowed_signers(tmp_path / "allowed_signers", ("builder@lab", key))
    subprocess.run(["ssh-keygen", "-Y", "sign", "-f", str(key), "-n", "file", str(folder / "manifest.yaml")],
                   check=True, capture_output=True)
    with pytest.raises(LIB.BundleError, match="not a valid hvdcluster-bundle signature"):
        LIB.authenticate(str(folder), (folder / "manifest.yaml").read_bytes(), signers=str(signers))


def test_signers_without_a_signature_are_refused(folder: Path, cache: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    signers = allowed_signers(tmp_path / "allowed_signers", ("builder@lab", keygen(tmp_path / "builder")))
    assert up(hosts_file(tmp_path, folder, f"bundle_signers: '{signers}'"), tmp_path) == 2
    err = one_line(capsys)
    assert f"{folder / 'manifest.yaml.sig'}: not found" in err and "--sign KEY" in err, err


def test_a_pin_and_signers_together_must_both_hold(folder: Path, tmp_path: Path) -> None:
    key = keygen(tmp_path / "builder")
    signers = allowed_signers(tmp_path / "allowed_signers", ("builder@lab", key))
    bundle.sign(folder, str(key))
    data = (folder / "manifest.yaml").read_bytes()
    assert LIB.authenticate(str(folder), data, digest(folder / "manifest.yaml"), str(signers)) == (
        "its pinned sha256 and the signature of builder@lab")
    with pytest.raises(LIB.BundleError, match="not the bundle that was pinned"):
        LIB.authenticate(str(folder), data, "0" * 64, str(signers))


def test_verify_prints_the_manifest_sha256(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bundle", "--verify", str(folder)]) == 0
    assert f"manifest sha256 {digest(folder / 'manifest.yaml')}" in capsys.readouterr().out
    assert cli.main(["bundle", "--verify", str(folder), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["manifest_sha256"] == digest(folder / "manifest.yaml")


def test_the_module_checks_a_pin_or_signers_when_given(folder: Path, tmp_path: Path) -> None:
    """hvd_bundle (hvd_base's controller side) run as Ansible runs it: a pin that does not match fails it."""
    root = Path(__file__).resolve().parents[2]
    boot = ("import sys, runpy; sys.path.insert(0, sys.argv[1]); "
            "sys.argv = sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')")
    args = tmp_path / "args.json"
    for pin, ok in (("0" * 64, False), (digest(folder / "manifest.yaml"), True)):
        args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"path": str(folder), "cache_dir": str(tmp_path / "c"),
                                                            "manifest_sha256": pin}}))
        proc = subprocess.run([sys.executable, "-c", boot, str(root / "collections"),
                               str(root / "plugins" / "modules" / "hvd_bundle.py"), str(args)], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": ""})
        result = json.loads(proc.stdout)
        assert bool(result.get("failed")) is not ok, result
        if not ok:
            assert "not the bundle that was pinned" in result["msg"]


# ------------------------------------------------------------------------------------------ every file, by sha256


def test_a_poisoned_env_archive_with_its_sha256_file_regenerated_is_refused_and_the_cache_is_unchanged(
        folder: Path, cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pin = digest(folder / "manifest.yaml")
    env = folder / ENV
    flip(env)
    (folder / (ENV + ".sha256")).write_bytes(sidecar(ENV, env.read_bytes()))  # the same size as before
    assert LIB.missing(str(folder), LIB.load(str(folder))) == []  # names and sizes alone would pass it
    before = snapshot(cache)
    assert up(hosts_file(tmp_path, folder, f"bundle_sha256: '{pin}'"), tmp_path) == 2
    err = one_line(capsys)
    assert f"{env}: sha256 {digest(env)}, the manifest says {hashlib.sha256(ENV_DATA).hexdigest()}" in err, err
    assert "(needed by hvd_pyenv" in err
    assert not (tmp_path / "inv").exists()
    assert snapshot(cache) == before  # not one file written, not even the apt archive checked before it
    # hvd_base's module, run by hand on the same bundle, refuses it too and leaves the cache as it was
    with pytest.raises(LIB.BundleError, match=f"{ENV}: sha256 "):
        CACHE.seed_cache(str(folder), LIB.load(str(folder)), str(cache))
    assert snapshot(cache) == before


def test_a_flipped_byte_in_a_package_is_refused_before_anything_is_packed(folder: Path, cache: Path, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    pin = digest(folder / "manifest.yaml")
    flip(folder / "apt" / "zstd_1.5.4_amd64.deb")
    before = snapshot(cache)
    assert up(hosts_file(tmp_path, folder, f"bundle_sha256: '{pin}'"), tmp_path) == 2
    err = one_line(capsys)
    assert "zstd_1.5.4_amd64.deb: sha256 " in err and "(needed by hvd_base" in err, err
    assert snapshot(cache) == before
    with pytest.raises(LIB.BundleError, match="zstd_1.5.4_amd64.deb: sha256 "):
        CACHE.apt_archive(str(folder), LIB.load(str(folder)), str(cache))
    assert snapshot(cache) == before


def test_a_cache_entry_is_hashed_again_when_read_never_trusted_by_its_sha256_file(folder: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    manifest = LIB.load(str(folder))
    assert sorted(CACHE.seed_cache(str(folder), manifest, str(cache))) == sorted(
        str(cache / rel.removeprefix("cache/")) for rel in FILES if rel.startswith("cache/"))
    entry = cache / "envs" / "env-0123456789abcdef.tar.zst"
    flip(entry)  # damaged in the cache, with a .sha256 that agrees
    (cache / "envs" / "env-0123456789abcdef.tar.zst.sha256").write_bytes(sidecar(ENV, entry.read_bytes()))
    copied = CACHE.seed_cache(str(folder), manifest, str(cache))
    assert sorted(copied) == [str(entry), str(entry) + ".sha256"]
    assert entry.read_bytes() == ENV_DATA and Path(str(entry) + ".sha256").read_bytes() == FILES[ENV + ".sha256"]
    assert CACHE.seed_cache(str(folder), manifest, str(cache)) == []


def test_an_apt_archive_already_in_the_cache_is_hashed_again_before_use(folder: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    manifest = LIB.load(str(folder))
    archive, sha, made = CACHE.apt_archive(str(folder), manifest, str(cache))
    good = Path(archive).read_bytes()
    assert made and CACHE.apt_archive(str(folder), manifest, str(cache)) == (archive, sha, False)
    # a package inside it changed (same size), whatever a file beside it says
    Path(archive).write_bytes(good.replace(b"deb zstd deb zstd", b"deb zstd DEB zstd", 1))
    Path(archive + ".sha256").write_text(f"{digest(Path(archive))}  {Path(archive).name}\n")
    assert CACHE.apt_archive(str(folder), manifest, str(cache)) == (archive, sha, True)
    assert Path(archive).read_bytes() == good
    Path(archive).write_bytes(good[:512 + 10])  # cut short in its first package
    assert CACHE.apt_archive(str(folder), manifest, str(cache)) == (archive, sha, True)
    planted = tmp_path / "planted_1.0_amd64.deb"
    planted.write_bytes(b"evil")
    with tarfile.open(archive, "a") as tar:  # one more package than the manifest lists
        tar.add(planted, arcname=planted.name)
    assert CACHE.apt_archive(str(folder), manifest, str(cache)) == (archive, sha, True)
    assert Path(archive).read_bytes() == good


def test_a_second_check_in_one_run_reads_only_files_that_changed(folder: Path, cache: Path, tmp_path: Path) -> None:
    """A second check of one bundle in one process (a caller that loads hosts.yaml again): the bundle is hashed once,
    unless a file changed in between."""
    time.sleep(1.1)  # older than the file system's coarse clock can blur
    opened, watching = opened_in(folder)
    try:
        pin = digest(folder / "manifest.yaml")
        bundle.check_trusted(folder, sha256=pin, signers=None, hosts="h.yaml", cache_dir=cache)
        assert {str(folder / rel) for rel in FILES} <= set(opened)
        opened.clear()
        bundle.check_trusted(folder, sha256=pin, signers=None, hosts="h.yaml", cache_dir=cache)
        assert opened == [str(folder / "manifest.yaml")], opened
        flip(folder / "pypi" / "six-1.16.0-py2.py3-none-any.whl")
        opened.clear()
        with pytest.raises(Exception, match="six-1.16.0-py2.py3-none-any.whl: sha256 "):
            bundle.check_trusted(folder, sha256=pin, signers=None, hosts="h.yaml", cache_dir=cache)
        assert str(folder / "pypi" / "six-1.16.0-py2.py3-none-any.whl") in opened
    finally:
        watching[0] = False
