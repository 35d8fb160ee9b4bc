"""The offline bundle's manifest, its checks and the command's refusals (no node: a bundle folder made here).

The bundle's gathering on a node and a converge from it run against containers in tests/cluster/test_bundle.py.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import pytest

from hvdcluster import bundle, cli, inventory, spec
from hvdcluster.cli.common import with_bundle
from hvdcluster.errors import HvdError
from tests.unit.bundle_fakes import make_bundle

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_bundle as LIB
from ansible_collections.hvd.cluster.plugins.module_utils import hvd_bundle_cache as CACHE

FILES = {
    "apt/zstd_1.5.4_amd64.deb": b"deb zstd " * 100,
    "apt/rsync_3.2.7_amd64.deb": b"deb rsync " * 50,
    "apt/Packages": b"Package: zstd\n\nPackage: rsync\n",
    "pypi/six-1.16.0-py2.py3-none-any.whl": b"wheel six",
    "cache/envs/env-0123456789abcdef.tar.zst": b"env archive",
}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return make_bundle(tmp_path / "bundle", FILES)


@pytest.fixture(autouse=True)
def controller_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`up --bundle`'s check writes what the controller cache lacks: never the real one here."""
    cache = tmp_path / "controller-cache"
    monkeypatch.setenv("HVDCLUSTER_CACHE", str(cache))
    return cache


def pinned(folder: Path) -> str:
    """hosts.yaml's network.bundle_sha256 for this bundle (the sha256 of its manifest.yaml)."""
    return f"network: {{bundle_sha256: '{hashlib.sha256((folder / 'manifest.yaml').read_bytes()).hexdigest()}'}}\n"


def test_a_whole_bundle_verifies(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert bundle.verify(folder) == []
    assert cli.main(["bundle", "--verify", str(folder)]) == 0
    assert "5 files checked by sha256" in capsys.readouterr().out


def test_verify_names_a_flipped_byte_and_the_role_that_needs_the_file(folder: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    deb = folder / "apt" / "zstd_1.5.4_amd64.deb"
    data = bytearray(deb.read_bytes())
    data[len(data) // 2] ^= 0xFF
    deb.write_bytes(bytes(data))  # same size: only the hash can tell
    assert cli.main(["bundle", "--verify", str(folder), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False and len(doc["problems"]) == 1
    assert str(deb) in doc["problems"][0] and "sha256" in doc["problems"][0] and "hvd_base" in doc["problems"][0]


def test_verify_names_a_missing_file_and_a_file_nobody_listed(folder: Path) -> None:
    (folder / "pypi" / "six-1.16.0-py2.py3-none-any.whl").unlink()
    (folder / "apt" / "planted_1.0_amd64.deb").write_bytes(b"x")
    problems = bundle.verify(folder)
    assert any("six-1.16.0" in p and "missing" in p and "hvd_pyenv" in p for p in problems), problems
    assert any("planted_1.0" in p and "not in the manifest" in p for p in problems), problems


@pytest.mark.parametrize("rel, why", [
    ("../../etc/passwd", "has a '..' part: it leaves the bundle folder"),
    ("/etc/passwd", "is absolute: it leaves the bundle folder"),
    ("cache//etc/x", "has an empty or '.' part"),
    ("pypi/a/../../../b", "has a '..' part"),
    ("a/../b", "has a '..' part"),
    ("./x", "has an empty or '.' part"),
    ("pypi//x", "has an empty or '.' part"),
    ("pypi/./x", "has an empty or '.' part"),
    ("pypi/", "has an empty or '.' part"),
    ("pypi\\..\\..\\x", "holds a backslash"),
    ("pypi/a\nb", "holds a backslash or a character that is not printable"),
    ("etc/passwd", "is not a file in one of the bundle's folders (apt/, pypi/"),
    ("pypi", "is not a file in one of the bundle's folders"),
    ("manifest.yaml", "is not a file in one of the bundle's folders"),
    ("", "is empty"),
])
def test_a_manifest_path_that_is_not_plain_is_refused_by_its_index_and_path(tmp_path: Path, rel: str, why: str) -> None:
    folder = make_bundle(tmp_path / "b", {"apt/Packages": b"x", "pypi/six.whl": b"y"})
    text = (folder / "manifest.yaml").read_text().replace("path: pypi/six.whl", f"path: {json.dumps(rel)}")
    (folder / "manifest.yaml").write_text(text)
    with pytest.raises(HvdError) as caught:
        bundle.load(folder)
    assert f"manifest.yaml: files[1]: path {rel!r} {why}" in str(caught.value), str(caught.value)
    assert len(str(caught.value).splitlines()) == 1


def test_a_manifest_listing_one_path_twice_or_a_sha256_that_is_no_digest_is_refused(tmp_path: Path) -> None:
    folder = make_bundle(tmp_path / "b", {"apt/Packages": b"x", "pypi/six.whl": b"y"})
    manifest = folder / "manifest.yaml"
    good = manifest.read_text()
    manifest.write_text(good.replace("path: pypi/six.whl", "path: apt/Packages"))
    with pytest.raises(HvdError, match=r"files\[1\]: path 'apt/Packages' is listed twice \(files\[0\] too\)"):
        bundle.load(folder)
    manifest.write_text(good.replace(hashlib.sha256(b"y").hexdigest(), "sha256:" + "0" * 57))
    with pytest.raises(HvdError, match=r"files\[1\]: sha256 'sha256:0+' of 'pypi/six.whl' is not a sha256 digest"):
        bundle.load(folder)


def test_up_with_a_manifest_path_into_the_root_writes_nothing_outside_the_controller_cache(
        tmp_path: Path, controller_cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`cache//ABS` once passed the check and the controller cache's join (os.path.join with an absolute second part)
    wrote ABS itself: the bundle holds the file (below cache/), the pinned manifest lists it by that path."""
    sentinel = tmp_path / "outside" / "sentinel"
    rel = f"cache/{sentinel}"  # cache//tmp/.../outside/sentinel
    assert "//" in rel
    folder = make_bundle(tmp_path / "b", {"apt/Packages": b"x"})
    planted = folder / "cache" / str(sentinel).lstrip("/")
    planted.parent.mkdir(parents=True)
    planted.write_bytes(b"written by the bundle")
    lines = (folder / "manifest.yaml").read_text()
    (folder / "manifest.yaml").write_text(lines + f"- path: {rel}\n  sha256: {hashlib.sha256(b'written by the bundle').hexdigest()}\n"
                                          "  size: 21\n  why: x\n  role: hvd_pyenv\n")
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(HOSTS + pinned(folder))
    assert cli.main(["up", str(hosts), "-o", str(tmp_path / "inv"), "--bundle", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"files[1]: path {rel!r} has an empty or '.' part" in err, err
    assert not sentinel.exists() and not sentinel.parent.exists()
    assert not (tmp_path / "inv").exists() and not controller_cache.exists()


def test_a_symlinked_folder_in_the_bundle_is_refused_by_name_and_nothing_is_written(
        tmp_path: Path, controller_cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = make_bundle(tmp_path / "b", FILES)
    elsewhere = tmp_path / "elsewhere"
    (folder / "pypi").rename(elsewhere)  # the same listed wheel, reached through a link
    (folder / "pypi").symlink_to(elsewhere)
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(HOSTS + pinned(folder))
    assert cli.main(["up", str(hosts), "-o", str(tmp_path / "inv"), "--bundle", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{folder}: holds 1 file(s) its manifest does not list" in err, err
    assert ": pypi (a symlink);" in err, err
    assert not (tmp_path / "inv").exists() and not controller_cache.exists()
    assert sorted(p.name for p in elsewhere.iterdir()) == ["six-1.16.0-py2.py3-none-any.whl"]


def test_the_apt_archive_is_the_same_bytes_for_the_same_bundle(tmp_path: Path) -> None:
    one = make_bundle(tmp_path / "one", FILES)
    two = make_bundle(tmp_path / "two", FILES)
    a, a_sha, made = CACHE.apt_archive(str(one), LIB.load(str(one)), str(tmp_path / "cache1"))
    b, b_sha, _ = CACHE.apt_archive(str(two), LIB.load(str(two)), str(tmp_path / "cache2"))
    assert made and a_sha == b_sha == hashlib.sha256(Path(a).read_bytes()).hexdigest()
    assert Path(a).read_bytes() == Path(b).read_bytes()
    with tarfile.open(a) as tar:  # the repository only, flat, owned by root
        assert sorted(tar.getnames()) == ["Packages", "rsync_3.2.7_amd64.deb", "zstd_1.5.4_amd64.deb"]
        assert {m.uid for m in tar.getmembers()} == {0}
    again = CACHE.apt_archive(str(one), LIB.load(str(one)), str(tmp_path / "cache1"))
    assert again == (a, a_sha, False)  # made once


def test_the_apt_archive_refuses_a_package_that_differs_from_the_manifest(folder: Path, tmp_path: Path) -> None:
    (folder / "apt" / "rsync_3.2.7_amd64.deb").write_bytes(b"X" * len(FILES["apt/rsync_3.2.7_amd64.deb"]))
    with pytest.raises(LIB.BundleError, match=r"rsync_3.2.7_amd64.deb: sha256 [0-9a-f]{64}, the manifest says"):
        CACHE.apt_archive(str(folder), LIB.load(str(folder)), str(tmp_path / "cache"))
    assert not list((tmp_path / "cache" / "bundles").glob("*.tar"))


def test_the_cache_entries_are_seeded_once(folder: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    copied = CACHE.seed_cache(str(folder), LIB.load(str(folder)), str(cache))
    assert copied == [str(cache / "envs" / "env-0123456789abcdef.tar.zst")]
    assert (cache / "envs" / "env-0123456789abcdef.tar.zst").read_bytes() == b"env archive"
    assert CACHE.seed_cache(str(folder), LIB.load(str(folder)), str(cache)) == []


def test_unpacking_the_resolver_files_refuses_a_member_outside_the_bundle(tmp_path: Path) -> None:
    dest = tmp_path / "b"
    dest.mkdir()
    evil = tmp_path / "evil"
    evil.write_text("x")
    with tarfile.open(dest / ".incoming.tar", "w") as tar:
        tar.add(evil, arcname="apt/../../evil")
    with pytest.raises(Exception, match="unexpected member"):
        bundle.unpack_incoming(dest)
    assert not (tmp_path.parent / "evil").exists() and not list(dest.glob("apt*"))


HOSTS = "cluster: gap\nhosts: [10.0.0.1]\n"


def test_up_with_a_file_removed_from_the_bundle_exits_2_naming_it_and_touches_nothing(
        folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(HOSTS + pinned(folder))  # 10.0.0.1 is never contacted: the check comes first
    (folder / "apt" / "rsync_3.2.7_amd64.deb").unlink()
    out = tmp_path / "inv"
    assert cli.main(["up", str(hosts), "-o", str(out), "--bundle", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "rsync_3.2.7_amd64.deb: missing from the bundle (needed by hvd_base" in err
    assert not out.exists()


def test_up_bundle_refuses_hosts_yaml_with_another_source(folder: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(HOSTS + "network: {pip_index: 'https://pypi.example.com/simple'}\n")
    assert cli.main(["up", str(hosts), "-o", str(tmp_path / "inv"), "--bundle", str(folder)]) == 2
    assert "sets network.pip_index" in capsys.readouterr().err


def test_the_inventory_hands_the_roles_the_checked_manifests_files_never_a_folder(tmp_path: Path) -> None:
    files = {**FILES, "wheelhouse/torch-2.13.0-cp311-cp311-linux_x86_64.whl": b"w",
             "conda/noarch/repodata.json": b"{}", "conda/linux-64/python-3.11.9-h0_0.conda": b"py"}
    folder = make_bundle(tmp_path / "bundle", files)
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(HOSTS + f"network: {{bundle: '{folder}', "
                             f"bundle_sha256: '{hashlib.sha256((folder / 'manifest.yaml').read_bytes()).hexdigest()}'}}\n")
    cluster = spec.load(str(hosts))
    with pytest.raises(HvdError, match="not checked in this run"):  # only a checked bundle's files are handed out
        inventory.group_vars(cluster)
    with_bundle(cluster, None)  # up's check: pinned, exactly its files, each by sha256
    net = inventory.group_vars(cluster)["network.yml"]
    assert net["hvd_base_bundle"] == str(folder)
    assert net["hvd_pyenv_wheelhouse"] == "" and net["hvd_pyenv_conda_channel"] == ""
    assert "hvd_pyenv_index_wheels" not in net
    assert net["hvd_pyenv_bundle_files"] == [
        {"src": str(folder / rel), "path": rel, "sha256": hashlib.sha256(files[rel]).hexdigest()}
        for rel in sorted(files) if rel.split("/")[0] in ("pypi", "wheelhouse", "conda")]
    assert net["hvd_base_pip_index"] == "" and net["hvd_base_apt_proxy"] == ""
    # a file added after the check is not handed out: the list is the manifest's, not the folder's
    (folder / "pypi" / "planted-1.0.tar.gz").write_bytes(b"sdist")
    assert "pypi/planted-1.0.tar.gz" not in str(inventory.group_vars(cluster)["network.yml"])


TARBALL = b"openmpi source " * 64


def test_a_source_stack_carries_its_open_mpi_tarball_checked_by_sha256(tmp_path: Path) -> None:
    src = tmp_path / "openmpi-4.1.6.tar.bz2"
    src.write_bytes(TARBALL)
    stack = {"mpi": {"impl": "openmpi", "version": "4.1.6", "source": "source", "url": str(src),
                     "sha256": hashlib.sha256(TARBALL).hexdigest()}}
    dest = tmp_path / "bundle"
    [entry] = bundle.openmpi_entries(stack, dest)
    assert entry["path"] == "openmpi/openmpi-4.1.6.tar.bz2" and (dest / entry["path"]).read_bytes() == TARBALL
    assert LIB.role_of(entry["path"]) == "hvd_openmpi"
    assert inventory.bundled_tarball(stack, str(dest)) == {"hvd_openmpi_url": str(dest / entry["path"])}
    assert bundle.openmpi_entries({"mpi": {"source": "package"}}, dest) == []
    wrong = {"mpi": {**stack["mpi"], "sha256": "0" * 64}}
    (dest / entry["path"]).unlink()
    with pytest.raises(Exception, match="sha256 .* stack.mpi.sha256 says 0000"):
        bundle.openmpi_entries(wrong, dest)
    assert not (dest / entry["path"]).exists()


def test_up_with_a_source_stack_and_a_bundle_without_its_tarball_exits_2(folder: Path, tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    src = "https://download.example.org/openmpi-4.1.6.tar.bz2"  # never contacted: the check comes first
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(HOSTS + pinned(folder) + f"stack: {{mpi: {{version: '4.1.6', source: source, url: '{src}', "
                                              f"sha256: '{hashlib.sha256(TARBALL).hexdigest()}'}}}}\n")
    assert cli.main(["up", str(hosts), "-o", str(tmp_path / "inv"), "--bundle", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "holds no Open MPI tarball" in err and "hvd_openmpi" in err, err
    assert not (tmp_path / "inv").exists()


def _conda_env_archive(tmp_path: Path, package: bytes) -> tuple[Path, Path, str]:
    """A local channel holding one package, and a packed conda env (as hvd_pyenv packs it) whose lock names it."""
    import subprocess  # noqa: PLC0415

    name = "hvd-probe-1.0.0-h0_0.conda"
    channel = tmp_path / "channel"
    (channel / "noarch").mkdir(parents=True)
    (channel / "noarch" / name).write_bytes(package)
    sha = hashlib.sha256(package).hexdigest()
    env = tmp_path / "env"
    (env / "conda-meta").mkdir(parents=True)
    (env / "hvd-conda.lock").write_text(
        f"# lock\n@EXPLICIT\nfile:///var/lib/hvdcluster/pyenv/channel/noarch/{name}#{sha}\n")
    record = {"name": "hvd-probe", "version": "1.0.0", "build": "h0_0", "build_number": 0, "depends": [],
              "subdir": "noarch", "noarch": "generic", "sha256": sha, "md5": hashlib.md5(package).hexdigest(),
              "size": len(package), "fn": name, "url": f"file:///x/noarch/{name}", "files": ["bin/hvd-probe"]}
    (env / "conda-meta" / "hvd-probe-1.0.0-h0_0.json").write_text(json.dumps(record))
    archive = tmp_path / "env-0123456789abcdef.tar.zst"
    subprocess.run(["tar", "-C", str(env), "--zstd", "-cf", str(archive), "."], check=True)
    return archive, channel, sha


def test_a_conda_envs_locked_packages_become_an_indexed_channel_in_the_bundle(tmp_path: Path) -> None:
    """bundle gathers the packages of the packed env's conda lock from the local channel, checks each by the lock's
    sha256 and indexes them from the env's conda-meta records; rattler (the solver hvd_pyenv uses) solves against
    the result. A package whose bytes differ from the lock is refused."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    archive, channel, sha = _conda_env_archive(tmp_path, b"a conda package\n")
    dest = tmp_path / "bundle"
    entries = bundle.conda_entries(archive, str(channel), dest)
    paths = sorted(e["path"] for e in entries)
    assert paths == ["conda/noarch/hvd-probe-1.0.0-h0_0.conda", "conda/noarch/repodata.json"]
    assert {e["sha256"] for e in entries if e["path"].endswith(".conda")} == {sha}
    solve = ("import asyncio, os, sys, rattler\n"
             "r = asyncio.run(rattler.solve([rattler.Channel(sys.argv[1])], ['hvd-probe'],"
             " platforms=[rattler.Platform.current(), rattler.Platform('noarch')]))\n"
             "print(*[f'{x.name.normalized} {x.version} {x.sha256.hex()}' for x in r], flush=True)\nos._exit(0)\n")
    proc = subprocess.run([sys.executable, "-c", solve, (dest / "conda").as_uri()], capture_output=True, text=True)
    assert proc.stdout.split() == ["hvd-probe", "1.0.0", sha], proc.stdout + proc.stderr
    (channel / "noarch" / "hvd-probe-1.0.0-h0_0.conda").write_bytes(b"another package\n")
    with pytest.raises(HvdError, match="sha256 .* the env's lock says"):
        bundle.conda_entries(archive, str(channel), tmp_path / "bundle2")


def test_a_venv_archive_adds_no_conda_channel_and_the_roles_get_the_conda_files_the_manifest_lists(
        tmp_path: Path) -> None:
    import subprocess  # noqa: PLC0415

    env = tmp_path / "venv"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").write_text("")
    archive = tmp_path / "env.tar.zst"
    subprocess.run(["tar", "-C", str(env), "--zstd", "-cf", str(archive), "."], check=True)
    assert bundle.conda_entries(archive, None, tmp_path / "b") == []
    listed = {"entries": [{"path": "apt/Packages", "sha256": "0" * 64}, {"path": "pypi/x.whl", "sha256": "1" * 64}]}
    handed = inventory.bundle_vars(str(tmp_path / "b"), manifest=listed)
    assert handed["hvd_pyenv_conda_channel"] == "" and [f["path"] for f in handed["hvd_pyenv_bundle_files"]] == [
        "pypi/x.whl"]
    (tmp_path / "b" / "conda" / "noarch").mkdir(parents=True)  # a folder the manifest does not list: nothing
    assert [f["path"] for f in inventory.bundle_vars(str(tmp_path / "b"), manifest=listed)[
        "hvd_pyenv_bundle_files"]] == ["pypi/x.whl"]
    listed["entries"].append({"path": "conda/noarch/repodata.json", "sha256": "2" * 64})
    assert [f["path"] for f in inventory.bundle_vars(str(tmp_path / "b"), manifest=listed)[
        "hvd_pyenv_bundle_files"]] == ["pypi/x.whl", "conda/noarch/repodata.json"]
