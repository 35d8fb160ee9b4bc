"""A bundle is trusted through its manifest (a pinned sha256 or an OpenSSH signature), then every file by the sha256
the manifest gives it; the controller cache takes nothing else; `bundle -o` removes only what an earlier manifest
listed. Real files in tmp_path and OpenSSH's own ssh-keygen; no node is contacted (10.0.0.1 is never reached: every
refusal here comes first)."""

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
from tests.unit.test_bundle_manifest import make_bundle

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_bundle as LIB
from ansible_collections.hvd.cluster.plugins.module_utils import hvd_bundle_cache as CACHE

ENV = "cache/envs/env-0123456789abcdef.tar.zst"
WHEEL = "cache/horovod/0123456789abcdef/horovod-0.28.1-cp311-cp311-linux_x86_64.whl"


def sidecar(rel: str, data: bytes) -> bytes:
    return f"{hashlib.sha256(data).hexdigest()}  {rel.rsplit('/', 1)[1]}\n".encode()


ENV_DATA = bytes(range(256)) * 64
WHEEL_DATA = b"horovod wheel " * 40
FILES = {
    "apt/zstd_1.5.4_amd64.deb": b"deb zstd " * 100,
    "apt/rsync_3.2.7_amd64.deb": b"deb rsync " * 50,
    "apt/Packages": b"Package: zstd\n\nPackage: rsync\n",
    "pypi/six-1.16.0-py2.py3-none-any.whl": b"wheel six",
    ENV: ENV_DATA,
    ENV + ".sha256": sidecar(ENV, ENV_DATA),
    WHEEL: WHEEL_DATA,
    WHEEL + ".sha256": sidecar(WHEEL, WHEEL_DATA),
}
HOSTS = "cluster: gap\nhosts: [10.0.0.1]\n"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under root, with a file's bytes (None for a folder)."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def flip(path: Path) -> None:
    """One byte changed, same size: only a hash can tell."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def keygen(path: Path, comment: str = "builder@lab") -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True)
    return path


def allowed_signers(path: Path, *keys: tuple[str, Path]) -> Path:
    lines = [f"{principal} {' '.join(key.with_suffix('.pub').read_text().split()[:2])}" for principal, key in keys]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The controller cache of these runs (HVDCLUSTER_CACHE), holding an earlier cluster's entry and archive."""
    root = tmp_path / "controller-cache"
    (root / "envs").mkdir(parents=True)
    (root / "envs" / "env-fedcba9876543210.tar.zst").write_bytes(b"another cluster's env")
    (root / "bundles").mkdir()
    (root / "bundles" / "apt-0000000000000000.tar").write_bytes(b"another bundle's repository")
    monkeypatch.setenv("HVDCLUSTER_CACHE", str(root))
    return root


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return make_bundle(tmp_path / "bundle", FILES)


def hosts_file(tmp_path: Path, folder: Path, network: str) -> Path:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(HOSTS + f"network: {{bundle: '{folder}'{', ' + network if network else ''}}}\n")
    return hosts


def up(hosts: Path, tmp_path: Path, *extra: str) -> int:
    return cli.main(["up", str(hosts), "-o", str(tmp_path / "inv"), *extra])


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


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
    """`up` reads hosts.yaml twice (fast path, then a full converge): the bundle is hashed once, unless a file
    changed in between."""
    time.sleep(1.1)  # older than the file system's coarse clock can blur
    opened: list[str] = []
    watching = [True]

    def hook(event: str, args: tuple) -> None:
        if watching[0] and event == "open" and isinstance(args[0], str) and args[0].startswith(str(folder)):
            opened.append(args[0])

    sys.addaudithook(hook)
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


# ------------------------------------------------------------------------------------------ exactly its manifest

UNLISTED = {  # what a bundle offers a rebuild if the roles list its folders: each would run or install as root
    "wheel": "pypi/evil-1.0-py3-none-any.whl",
    "sdist": "pypi/evil-1.0.tar.gz",  # its in-tree PEP 517 backend would run as root to resolve it
    "conda package": "conda/noarch/evil-1.0-0.conda",
    "wheelhouse wheel": "wheelhouse/evil-1.0-py3-none-any.whl",
}


def opened_in(folder: Path) -> tuple[list[str], list[bool]]:
    """The files under ``folder`` this process opens while the second item holds [True]."""
    opened: list[str] = []
    watching = [True]

    def hook(event: str, args: tuple) -> None:
        if watching[0] and event == "open" and isinstance(args[0], str) and args[0].startswith(str(folder)):
            opened.append(args[0])

    sys.addaudithook(hook)
    return opened, watching


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


# ------------------------------------------------------------------------------------------ bundle -o DIR


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
