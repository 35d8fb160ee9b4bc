"""What a checked offline bundle puts in the controller cache: its apt repository as one archive (the same bytes for the
same bundle) and its cache/ entries, each file hashed against the manifest as it is read, written under temporary
names and put in place together only once every file passed (``check``: ``up --bundle``'s; ``ready``: the hvd_bundle
module's, hvd_base's controller side). The manifest, its trust and the folder's own checks are
:mod:`hvd_bundle`'s."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_bundle import (
    BLOCK,
    MANIFEST,
    BundleError,
    differs,
    inside,
    missing,
    refuse_strays,
)
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import sha256_of


def stat_key(path: str) -> tuple[int, ...]:
    """What changes whenever a file's content may have: its inode, size, mtime and ctime (ctime cannot be set back)."""
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class _Hashing:
    """A file object that hashes what passes through it: read from ``source`` or written to ``sink``."""

    def __init__(self, source=None, sink=None) -> None:
        self.digest = hashlib.sha256()
        self.source, self.sink, self.offset = source, sink, 0

    def read(self, size: int = -1) -> bytes:
        data = self.source.read(size)
        self.digest.update(data)
        self.offset += len(data)
        return data

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        self.offset += len(data)
        return self.sink.write(data)

    def tell(self) -> int:
        return self.offset

    def hexdigest(self) -> str:
        return self.digest.hexdigest()


class _Staging:
    """Controller-cache files written under temporary names and put in place together once every check passed, or
    removed together (with the folders made for them): a bundle that fails leaves the controller cache as it was."""

    def __init__(self, cache_dir: str) -> None:
        self.cache_dir, self.files, self.folders = cache_dir, [], []

    def path(self, target: str) -> str:
        parent = os.path.dirname(target)
        todo = []
        while not os.path.isdir(parent):
            todo.append(parent)
            parent = os.path.dirname(parent)
        for folder in reversed(todo):
            os.mkdir(folder, 0o700)
            self.folders.append(folder)
        tmp = os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.{os.getpid()}.tmp")
        self.files.append((tmp, target))
        return tmp

    def commit(self) -> list[str]:
        for tmp, target in self.files:
            os.replace(tmp, target)
        return [target for _tmp, target in self.files]

    def abort(self) -> None:
        for tmp, _target in self.files:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
        for folder in reversed(self.folders):
            try:
                os.rmdir(folder)
            except OSError:
                pass


def _copy_hashing(src: str, dest: str | None) -> str:
    """sha256 of ``src``, read once; with ``dest``, those same bytes written there."""
    digest = hashlib.sha256()
    with open(src, "rb") as handle, (open(dest, "wb") if dest else io.BytesIO()) as out:
        for block in iter(lambda: handle.read(BLOCK), b""):
            digest.update(block)
            if dest:
                out.write(block)
    return digest.hexdigest()


def _apt_entries(folder: str, manifest: dict) -> list[dict]:
    entries = sorted((e for e in manifest["entries"] if e["path"].startswith("apt/")), key=lambda e: e["path"])
    if not entries:
        raise BundleError(f"{os.path.join(folder, MANIFEST)}: lists no apt/ packages")
    return entries


def archive_path(manifest: dict, cache_dir: str) -> str:
    return os.path.join(cache_dir, "bundles", f"apt-{apt_digest(manifest)[:16]}.tar")


def _member(entry: dict) -> tarfile.TarInfo:
    info = tarfile.TarInfo(entry["path"][len("apt/"):])
    info.size, info.mode, info.mtime = entry["size"], 0o644, 0
    return info


def _add_checked(tar: tarfile.TarFile, folder: str, entry: dict) -> str:
    """Add one apt file to the archive, hashed as it is read (the bytes hashed are the bytes added)."""
    with open(inside(folder, entry["path"]), "rb") as handle:
        reader = _Hashing(source=handle)
        tar.addfile(_member(entry), reader)
    return reader.hexdigest()


def _refuse_missing(folder: str, manifest: dict) -> None:
    problems = missing(folder, manifest)
    if problems:
        more = f" (and {len(problems) - 1} more; `hvdcluster bundle --verify {folder}` lists them)" if len(
            problems) > 1 else ""
        raise BundleError(problems[0] + more)


def check(folder: str, manifest: dict, cache_dir: str | None = None, known: dict | None = None) -> dict:
    """`up --bundle`'s check: the folder holds exactly the manifest's files (refuse_strays: an unlisted file or a
    symlink is named before anything is read), then every listed file by its sha256, each read once; the first that
    is missing, of another size or another sha256 raises BundleError naming it and the role that needs it.
    ``known``: {path: (sha256, stat_key)} of files this process hashed before; one whose stat_key is unchanged is not
    read again. With ``cache_dir``, what the controller cache lacks (a cache/ entry, the apt repository's archive) is
    written there from the same read, and put in place only once every file passed. Returns {path: (sha256,
    stat_key)}."""
    refuse_strays(folder, manifest)
    _refuse_missing(folder, manifest)
    known = known or {}
    result, todo = {}, []
    for entry in manifest["entries"]:
        key = stat_key(inside(folder, entry["path"]))
        if known.get(entry["path"]) == (entry["sha256"], key):
            result[entry["path"]] = known[entry["path"]]
        else:
            todo.append((entry, key))
    staging = _Staging(cache_dir) if cache_dir else None
    try:
        apt = [item for item in todo if item[0]["path"].startswith("apt/")]
        target = archive_path(manifest, cache_dir) if staging and apt else ""
        if target and len(apt) == len(_apt_entries(folder, manifest)) and not os.path.isfile(target):
            with open(staging.path(target), "wb") as raw, tarfile.open(fileobj=raw, mode="w",
                                                                       format=tarfile.PAX_FORMAT) as tar:
                for entry, key in sorted(apt, key=lambda item: item[0]["path"]):
                    found = _add_checked(tar, folder, entry)
                    if found != entry["sha256"]:
                        raise BundleError(differs(folder, entry, found))
                    result[entry["path"]] = (found, key)
            todo = [item for item in todo if not item[0]["path"].startswith("apt/")]
        for entry, key in todo:
            dest = None
            if staging and entry["path"].startswith("cache/"):
                target = inside(cache_dir, entry["path"][len("cache/"):])
                dest = None if os.path.exists(target) else staging.path(target)
            found = _copy_hashing(inside(folder, entry["path"]), dest)
            if found != entry["sha256"]:
                raise BundleError(differs(folder, entry, found))
            result[entry["path"]] = (found, key)
        if staging:
            staging.commit()
    except BaseException:
        if staging:
            staging.abort()
        raise
    return result


def ready(folder: str, manifest: dict, cache_dir: str) -> tuple[list[str], tuple[str, str, bool]]:
    """The hvd_bundle module's check (hvd_base's controller side, a hand-run playbook's too), with check()'s rules:
    the folder holds exactly the manifest's files (refuse_strays), and every listed file has its sha256 - apt/ and
    cache/ through the controller cache's copies that stand in for them and that the nodes get (seed_cache,
    apt_archive: each read and hashed against the manifest, made from the bundle's file where it is missing or
    differs), every other file (pypi/, wheelhouse/, conda/, openmpi/) read in the bundle. Each listed file's bytes are
    hashed once. (the cache entries copied, apt_archive's result)."""
    refuse_strays(folder, manifest)
    _refuse_missing(folder, manifest)
    for entry in manifest["entries"]:
        if entry["path"].split("/", 1)[0] not in ("apt", "cache"):
            found = sha256_of(inside(folder, entry["path"]))
            if found != entry["sha256"]:
                raise BundleError(f"{differs(folder, entry, found)}; run `hvdcluster bundle --verify {folder}`")
    seeded = seed_cache(folder, manifest, cache_dir)
    return seeded, apt_archive(folder, manifest, cache_dir)


def apt_digest(manifest: dict) -> str:
    """One digest for the apt repository (every apt/ file's name and sha256)."""
    lines = sorted(f"{e['path']} {e['sha256']}" for e in manifest["entries"] if e["path"].startswith("apt/"))
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _archive_holds(path: str, entries: list[dict]) -> str | None:
    """The sha256 of the archive at ``path`` when it holds exactly the manifest's apt files (names, sizes, sha256,
    plain files of mode 0644 owned by root), else None: read once, each member hashed against the manifest as the
    whole is."""
    want = [(e["path"][len("apt/"):], e["size"], e["sha256"]) for e in entries]
    try:
        with open(path, "rb") as raw:
            reader = _Hashing(source=raw)
            found = []
            with tarfile.open(fileobj=reader, mode="r|") as tar:
                for member in tar:
                    if not member.isfile() or member.mode != 0o644 or member.uid or member.gid:
                        return None
                    digest = hashlib.sha256()
                    handle = tar.extractfile(member)
                    for block in iter(lambda: handle.read(BLOCK), b""):
                        digest.update(block)
                    found.append((member.name, member.size, digest.hexdigest()))
            while reader.read(BLOCK):
                pass
    except (OSError, tarfile.TarError):
        return None
    return reader.hexdigest() if found == want else None


def apt_archive(folder: str, manifest: dict, cache_dir: str) -> tuple[str, str, bool]:
    """The apt repository as one uncompressed tar in ``cache_dir/bundles`` (the same bytes for the same bundle:
    sorted names, owner root, time 0). One already there is read again and used only when it holds exactly the
    manifest's files; else it is made from the bundle's files, each checked against the manifest's sha256 as it is
    read. (path, its sha256, made now)."""
    entries = _apt_entries(folder, manifest)
    target = archive_path(manifest, cache_dir)
    if os.path.isfile(target):
        held = _archive_holds(target, entries)
        if held:
            return target, held, False
    staging = _Staging(cache_dir)
    try:
        with open(staging.path(target), "wb") as raw:
            writer = _Hashing(sink=raw)
            with tarfile.open(fileobj=writer, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for entry in entries:
                    found = _add_checked(tar, folder, entry)
                    if found != entry["sha256"]:
                        raise BundleError(f"{differs(folder, entry, found)}; run `hvdcluster bundle --verify {folder}`")
        staging.commit()
    except BaseException:
        staging.abort()
        raise
    return target, writer.hexdigest(), True


def seed_cache(folder: str, manifest: dict, cache_dir: str) -> list[str]:
    """The bundle's cache/ entries (and their .sha256) in the controller cache. An entry already there is hashed again
    and kept only when it is what the manifest says (its own .sha256 file proves nothing); else the bundle's file is
    copied, hashed as it is read, and every copy is put in place only once all matched the manifest. The paths
    copied."""
    staging = _Staging(cache_dir)
    try:
        for entry in manifest["entries"]:
            if not entry["path"].startswith("cache/"):
                continue
            target = inside(cache_dir, entry["path"][len("cache/"):])
            if os.path.isfile(target) and os.stat(target).st_size == entry["size"] and (
                    sha256_of(target) == entry["sha256"]):
                continue
            found = _copy_hashing(inside(folder, entry["path"]), staging.path(target))
            if found != entry["sha256"]:
                raise BundleError(differs(folder, entry, found))
        return staging.commit()
    except BaseException:
        staging.abort()
        raise
