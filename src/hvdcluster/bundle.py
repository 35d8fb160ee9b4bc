"""``hvdcluster bundle``: gather an offline bundle on a connected node; ``bundle --verify``; ``up --bundle``'s check.

The manifest's reader, its trust (a pinned sha256 or an OpenSSH signature) and the bundle's layout live in
``plugins/module_utils/hvd_bundle.py``, which the controller-side module of hvd_base uses too: the command and a hand-run
playbook judge a bundle alike.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import subprocess
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, BinaryIO

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_bundle, hvd_bundle_cache
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import walk_tree

from .errors import HvdError

WHEELHOUSE_PATTERNS = (".whl", ".tar.gz", ".zip")  # what hvd_pyenv offers from a wheelhouse
# Left in a bundle folder from a run's start until its manifest is written: a run cut short before its manifest may be
# run again into it.
MARKER = hvd_bundle.MARKER


def load(folder: str | os.PathLike[str]) -> dict:
    try:
        return hvd_bundle.load(str(folder))
    except hvd_bundle.BundleError as exc:
        raise HvdError(str(exc)) from None


# {bundle folder: (manifest sha256, when the check began, {path: (sha256, stat key)}, the manifest)}: the files this
# process checked, and the manifest it authenticated (trusted_manifest: what the roles are handed).
# A second check of one folder in one process (`up` itself now loads hosts.yaml once) hashes only files whose inode,
# size, mtime or ctime changed since the first (and those changed in the second before it began: a file system's
# clock is coarse, so a change that recent could leave the same times). The first check also writes what the
# controller cache lacks from that same read, so hvd_base's module (another process) does not read the bundle's apt/
# and cache/ files again: it hashes the controller cache's own copies, which stand in for them (and the files no copy
# stands in for: pypi/, wheelhouse/, conda/, openmpi/). Handing it the digests instead would make the module trust a
# value it cannot check.
_CHECKED: dict[str, tuple[str, int, dict, dict]] = {}
_RACY_NS = 1_000_000_000


def check_trusted(folder: str | os.PathLike[str], *, sha256: str | None, signers: str | None, hosts: str,
                  cache_dir: str | os.PathLike[str] | None = None) -> dict:
    """``up --bundle``'s check, before any node is contacted: the manifest must match the pinned sha256
    (network.bundle_sha256) or carry a valid OpenSSH signature by one of network.bundle_signers; then the folder must
    hold exactly the files it lists (an unlisted file or a symlink is named, before any file is read) and every one
    must have its sha256. Exit 2 naming the files the manifest does not list, else the first file that differs and
    the role that needs it. With ``cache_dir``, what the controller cache lacks is written there from that same read,
    once every file passed."""
    folder = str(folder)
    if not sha256 and not signers:
        raise HvdError(f"bundle: {Path(folder) / hvd_bundle.MANIFEST} is not pinned: set network.bundle_sha256 in {hosts} to "
                       "the manifest sha256 `hvdcluster bundle` printed where it was made, or network.bundle_signers "
                       "to an OpenSSH allowed-signers file for a bundle made with --sign KEY")
    try:
        data = hvd_bundle.read_manifest(folder)
        hvd_bundle.authenticate(folder, data, sha256, signers)
        manifest = hvd_bundle.parse(data, os.path.join(folder, hvd_bundle.MANIFEST))
        before = _CHECKED.get(folder)
        known = {rel: found for rel, found in before[2].items() if found[1][-1] < before[1] - _RACY_NS} if (
            before and before[0] == manifest["sha256"]) else None
        began = time.time_ns()
        checked = hvd_bundle_cache.check(folder, manifest, str(cache_dir) if cache_dir else None, known)
    except hvd_bundle.BundleError as exc:
        raise HvdError(f"bundle: {exc}") from None
    except OSError as exc:
        raise HvdError(f"bundle: {folder}: {exc}") from None
    _CHECKED[folder] = (manifest["sha256"], began, checked, manifest)
    return manifest


def trusted_manifest(folder: str | os.PathLike[str]) -> dict:
    """The manifest check_trusted authenticated for ``folder`` in this process, whose files it found exactly so: the
    roles are handed its entries (inventory.bundle_vars), never a folder to list."""
    found = _CHECKED.get(str(folder))
    if found is None:
        raise HvdError(f"bundle: {folder}: not checked in this run (its manifest pinned or signed, every file by "
                       "sha256): the roles are handed only a checked bundle's files")
    return found[3]


def verify(folder: str | os.PathLike[str]) -> list[str]:
    """Every file's sha256 against the manifest, and what the folder holds that the manifest does not list (a file,
    a symlink anywhere): the rules of `up --bundle`'s check, every problem named."""
    manifest = load(folder)
    return hvd_bundle.verify(str(folder), manifest)


def _sha256(path: Path) -> str:
    return hvd_bundle.sha256_of(str(path))


def held(folder: Path) -> dict[str, str]:
    """What the bundle folder already holds, as its manifest says, where the file is there with that sha256."""
    try:
        manifest = hvd_bundle.load(str(folder))
    except hvd_bundle.BundleError:
        return {}
    have = {}
    for entry in manifest["entries"]:
        path = Path(hvd_bundle.inside(str(folder), entry["path"]))
        if path.is_file() and path.stat().st_size == entry["size"] and _sha256(path) == entry["sha256"]:
            have[entry["path"]] = entry["sha256"]
    return have


def earlier_listing(dest: Path) -> set[str]:
    """``bundle HOSTS DIR``: the paths an earlier manifest of DIR listed (the only files a run may remove), before
    anything is written. A folder that is not empty and holds no manifest (nor the marker of a run cut short) is
    refused: it is not a bundle. So is a DIR that is a symlink or holds one anywhere below it (found with lstat, none
    followed): a write or a removal through it would land outside the folder."""
    if dest.is_symlink():
        raise HvdError(f"bundle DIR {dest}: a symlink; name the folder itself (nothing was changed)")
    if dest.exists() and not dest.is_dir():
        raise HvdError(f"bundle DIR {dest}: a file; name the bundle folder")
    links = [rel for rel, info in walk_tree(str(dest)) if not stat.S_ISREG(info.st_mode)] if dest.is_dir() else []
    if links:
        names = ", ".join(hvd_bundle.shown(rel) for rel in links[:hvd_bundle.SHOWN])
        more = f" (and {len(links) - hvd_bundle.SHOWN} more)" if len(links) > hvd_bundle.SHOWN else ""
        raise HvdError(f"bundle DIR {dest}: holds a symlink or something else that is no plain file: {names}{more}; "
                       "a bundle folder holds plain files only: remove them (nothing was changed)")
    if not (dest / hvd_bundle.MANIFEST).exists():
        if dest.is_dir() and any(dest.iterdir()) and not (dest / MARKER).is_file():
            raise HvdError(f"bundle DIR {dest}: not empty and holds no {hvd_bundle.MANIFEST}: not a bundle folder; name an "
                           "empty or new folder, or an earlier bundle (nothing was changed)")
        return set()
    try:
        return {entry["path"] for entry in hvd_bundle.load(str(dest))["entries"]}
    except hvd_bundle.BundleError as exc:
        raise HvdError(f"bundle DIR: {exc}; name another folder (nothing was changed)") from None


def sign(dest: Path, key: str) -> Path:
    """``bundle --sign KEY``: OpenSSH's own signature of manifest.yaml (``ssh-keygen -Y sign``), manifest.yaml.sig."""
    manifest, signature = dest / hvd_bundle.MANIFEST, dest / hvd_bundle.SIGNATURE
    signature.unlink(missing_ok=True)  # ssh-keygen would ask before replacing it (and exit 0 when told no)
    try:  # a passphrase is asked on the terminal, not on standard input
        proc = subprocess.run(["ssh-keygen", "-Y", "sign", "-f", key, "-n", hvd_bundle.NAMESPACE, str(manifest)],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise HvdError(f"--sign: cannot run ssh-keygen: {exc}") from None
    if proc.returncode != 0 or not signature.is_file():
        why = " ".join(proc.stderr.split()) or f"exit code {proc.returncode}"
        raise HvdError(f"--sign: ssh-keygen -Y sign -f {key} failed: {why}")
    return signature


def _write_new(target: Path, source: BinaryIO, sha256: str | None = None) -> str:
    """``target`` written from ``source`` through a fresh temporary file beside it (tempfile.mkstemp: O_EXCL, an
    unpredictable name, never through a link), renamed into place once whole - and, with ``sha256``, only when its
    bytes have it. The sha256 of the bytes written."""
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        digest = hashlib.sha256()
        with os.fdopen(handle, "wb") as out:
            for block in iter(lambda: source.read(hvd_bundle.BLOCK), b""):
                digest.update(block)
                out.write(block)
        if sha256 is None or digest.hexdigest() == sha256:
            os.chmod(tmp, 0o644)
            os.replace(tmp, target)
        return digest.hexdigest()
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def _target(dest: Path, rel: str) -> Path:
    """dest/rel for a file this command writes into the bundle folder: ``rel`` a manifest path (hvd_bundle.path_problem)
    whose join lies below ``dest`` (commonpath), checked before anything is written."""
    problem = hvd_bundle.path_problem(rel)
    if problem:
        raise HvdError(f"bundle: {dest}: {rel!r} {problem}; nothing was written there")
    try:
        return Path(hvd_bundle.inside(str(dest), rel))
    except hvd_bundle.BundleError as exc:
        raise HvdError(f"bundle: {exc}") from None


def mark(dest: Path) -> None:
    """The marker of a run under way (MARKER), made without following a link (O_NOFOLLOW)."""
    os.close(os.open(dest / MARKER, os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644))


def copy_if_changed(src: Path, dest: Path, sha256: str | None = None) -> bool:
    if dest.is_file() and dest.stat().st_size == src.stat().st_size and (sha256 is None or _sha256(dest) == sha256):
        return False
    with open(src, "rb") as source:
        _write_new(dest, source)
    return True


def wheelhouse_entries(wheelhouse: str | None, dest: Path) -> list[dict[str, Any]]:
    """hosts.yaml's wheelhouse, copied into the bundle as it is: its file names are part of the env's key."""
    if not wheelhouse:
        return []
    entries = []
    for src in sorted(Path(wheelhouse).iterdir()):
        if not (src.is_file() and src.name.endswith(WHEELHOUSE_PATTERNS)):
            continue
        sha = _sha256(src)
        copy_if_changed(src, _target(dest, f"wheelhouse/{src.name}"), sha)
        entries.append({"path": f"wheelhouse/{src.name}", "sha256": sha, "size": src.stat().st_size,
                        "why": "the wheelhouse of hosts.yaml when the bundle was made (its names are in the env's key)"})
    return entries


def _fetch_checked(source: Path | str | OSError, target: Path, sha: str, what: str, expected: str) -> None:
    """``target`` with the bytes whose sha256 is ``sha``: kept when it has them, else copied from a controller path
    or downloaded from a URL (``source``; an OSError: why it cannot be had) through a temporary name, checked, then
    moved in. Errors name ``what`` and, for other bytes, what was ``expected``."""
    if target.is_file() and _sha256(target) == sha:
        return
    try:
        if isinstance(source, OSError):
            raise source
        if isinstance(source, str):
            with urllib.request.urlopen(source, timeout=60) as response:  # noqa: S310
                found = _write_new(target, response, sha)
        else:
            with open(source, "rb") as handle:
                found = _write_new(target, handle, sha)
    except OSError as exc:
        raise HvdError(f"bundle: {what}: cannot get it: {exc}") from None
    if found != sha:
        raise HvdError(f"bundle: {what}: sha256 {found}, {expected}")


def openmpi_entries(stack: dict[str, Any], dest: Path) -> list[dict[str, Any]]:
    """With ``stack.mpi.source: source``, the Open MPI tarball hvd_openmpi builds from, checked by its sha256: copied
    from the controller path, or downloaded here (where there is network) from its URL."""
    mpi = stack.get("mpi") or {}
    if mpi.get("source") != "source" or not mpi.get("url"):
        return []
    url, sha = str(mpi["url"]), str(mpi.get("sha256") or "").lower()
    target = _target(dest, "openmpi/" + os.path.basename(url.rstrip("/").split("?", 1)[0]))
    _fetch_checked(url if "://" in url else Path(url), target, sha, f"stack.mpi.url {url}",
                   f"stack.mpi.sha256 says {sha or '(none)'}")
    return [{"path": f"openmpi/{target.name}", "sha256": sha, "size": target.stat().st_size,
             "why": f"Open MPI {mpi.get('version', '')}: the tarball hvd_openmpi builds from (stack.mpi.source: source)"}]


def cache_entries(keys: dict[str, str], cache_dir: Path, dest: Path) -> list[dict[str, Any]]:
    """The packed env and the Horovod wheel the resolver's converge used (by their keys), with their .sha256."""
    found: list[tuple[Path, str]] = []
    if keys.get("env"):
        found.append((cache_dir / "envs" / f"env-{keys['env']}.tar.zst", "the packed env (hvd_pyenv's cache entry)"))
    if keys.get("horovod"):
        wheels = sorted((cache_dir / "horovod" / keys["horovod"]).glob("horovod-*.whl"))
        found += [(w, "the built Horovod wheel (hvd_horovod's cache entry)") for w in wheels]
    entries = []
    for path, why in found:
        sidecar = path.with_name(path.name + ".sha256")
        if not (path.is_file() and sidecar.is_file()):
            raise HvdError(f"bundle: {path} (or its .sha256) is not in the controller cache: the resolver's converge "
                           "did not leave it there; run the bundle again")
        sha = _sha256(path)  # hashed again: a cache entry is never trusted by its own .sha256 file
        recorded = (sidecar.read_text().split() or [""])[0]
        if sha != recorded:
            raise HvdError(f"bundle: {path}: sha256 {sha}, its .sha256 says {recorded}: a damaged controller-cache "
                           "entry; remove it (and its .sha256) and run the bundle again")
        for item, item_why in ((path, why), (sidecar, f"the sha256 of {path.name}")):
            rel = f"cache/{item.relative_to(cache_dir)}"
            item_sha = sha if item is path else _sha256(item)
            copy_if_changed(item, _target(dest, rel), item_sha)
            entries.append({"path": rel, "sha256": item_sha, "size": item.stat().st_size, "why": item_why})
    return entries


# What a conda channel's repodata.json holds of each package (the env's conda-meta records hold these and more).
_REPODATA_KEYS = ("name", "version", "build", "build_number", "depends", "constrains", "license", "license_family",
                  "md5", "sha256", "size", "subdir", "timestamp", "noarch", "track_features", "features")


def _env_members(archive: Path, work: Path) -> tuple[str | None, dict[str, dict]]:
    """A packed env's conda lock (hvd-conda.lock) and conda-meta records; (None, {}) for a venv."""
    proc = subprocess.run(["tar", "--zstd", "-xf", str(archive), "-C", str(work), "--wildcards",
                           "./hvd-conda.lock", "./conda-meta/*.json"], capture_output=True, text=True)
    lock = work / "hvd-conda.lock"
    if not lock.is_file():
        if proc.returncode != 0 and "Not found in archive" not in proc.stderr:
            raise HvdError(f"bundle: {archive}: cannot read it: {proc.stderr.strip()[-300:]}")
        return None, {}
    records = {}
    for path in sorted((work / "conda-meta").glob("*.json")):
        record = json.loads(path.read_text())
        name = record.get("fn") or os.path.basename(str(record.get("url", "")))
        records[name] = record
    return lock.read_text(), records


def conda_entries(env_archive: Path, channel: str | None, dest: Path) -> list[dict[str, Any]]:
    """A conda env's locked packages as a channel inside the bundle (``conda/<subdir>/<file>`` and each subdir's
    ``repodata.json``, made from the env's own conda-meta records), which ``up --bundle`` makes the only channel. Each
    package comes from hosts.yaml's local channel folder (``network.conda_channel``), else from the lock's URL, and
    must have the lock's sha256. A venv's archive adds nothing."""
    with tempfile.TemporaryDirectory(prefix="hvd-bundle-conda-") as tmp:
        lock, records = _env_members(env_archive, Path(tmp))
    if lock is None:
        return []
    entries, repodata = [], {}
    for line in lock.splitlines():
        if not line or line.startswith(("#", "@")):
            continue
        url, _, sha = line.partition("#")
        subdir, name = url.rstrip("/").rsplit("/", 2)[-2:]
        target = _target(dest, f"conda/{subdir}/{name}")
        local = Path(channel) / subdir / name if channel and "://" not in channel else None
        if local is not None and local.is_file():
            source: Path | str = local
        elif url.startswith(("http://", "https://")):
            source = url
        else:
            source = OSError(f"not in {channel or 'a local channel'} and {url} is not a URL this machine can fetch")
        _fetch_checked(source, target, sha, f"conda package {name}", f"the env's lock says {sha}")
        record = records.get(name)
        if record is None:
            raise HvdError(f"bundle: {env_archive}: the env holds no conda-meta record for {name}")
        kind = "packages.conda" if name.endswith(".conda") else "packages"
        repodata.setdefault(subdir, {"info": {"subdir": subdir}, "packages": {}, "packages.conda": {},
                                     "repodata_version": 1})[kind][name] = {
            key: record[key] for key in _REPODATA_KEYS if key in record and record[key] not in (None, "")}
        entries.append({"path": f"conda/{subdir}/{name}", "sha256": sha, "size": target.stat().st_size,
                        "why": "a package of the conda env's lock (hvd-conda.lock), for a rebuild without egress"})
    for subdir in sorted({"noarch", *repodata}):  # a channel always has noarch/
        index = _target(dest, f"conda/{subdir}/repodata.json")
        data = repodata.get(subdir) or {"info": {"subdir": subdir}, "packages": {}, "packages.conda": {},
                                        "repodata_version": 1}
        _write_new(index, io.BytesIO((json.dumps(data, indent=1, sort_keys=True) + "\n").encode()))
        entries.append({"path": f"conda/{subdir}/repodata.json", "sha256": _sha256(index),
                        "size": index.stat().st_size, "why": "the index of the bundle's conda channel"})
    return entries


def _removable(dest: Path, rel: str) -> bool:
    """Whether dest/rel, a path an earlier manifest listed, is a plain file this run may remove: ``rel`` a manifest
    path below ``dest`` (_target), and no part of it a symlink (lstat from ``dest`` down; one is refused by name)."""
    _target(dest, rel)
    current = dest
    for part in rel.split("/"):
        current = current / part
        try:
            info = current.lstat()
        except FileNotFoundError:
            return False
        if stat.S_ISLNK(info.st_mode):
            raise HvdError(f"bundle: {current}: a symlink in the bundle folder: nothing is removed through it; remove "
                           "it and run the bundle again")
    return stat.S_ISREG(info.st_mode)


def unpack_incoming(dest: Path) -> list[str]:
    """The resolver's new files (dest/.incoming.tar) into apt/ and pypi/: plain files only, never outside."""
    incoming = dest / ".incoming.tar"
    names = []
    if not incoming.is_file():
        return names
    with tarfile.open(incoming) as tar:
        for member in tar.getmembers():
            parts = member.name.split("/")
            if (not member.isfile() or len(parts) != 2 or parts[0] not in ("apt", "pypi") or parts[1].startswith(".")
                    or hvd_bundle.path_problem(member.name)):
                raise HvdError(f"bundle: {incoming}: unexpected member {member.name!r}; nothing was unpacked")
        for member in tar.getmembers():
            with tar.extractfile(member) as src:
                _write_new(_target(dest, member.name), src)
            names.append(member.name)
    incoming.unlink()
    return names


def finish(dest: Path, collected: dict[str, Any], extra: list[dict[str, Any]], resolver: str,
           earlier: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
    """Complete the entries (sizes of files already held), remove the files an earlier manifest (``earlier``) listed
    and this one does not (nothing else is ever removed: a plain file below ``dest``, reached through no symlink),
    write the manifest last (an unchanged one is kept as it was: the same sha256, its signature still valid), then
    remove the marker of a run under way."""
    entries = []
    for item in collected.get("files") or []:
        path = _target(dest, item["path"])
        if not path.is_file():
            raise HvdError(f"bundle: {path}: the resolver listed it but it was not fetched; run the bundle again")
        entries.append({**item, "size": path.stat().st_size})
    entries += extra
    listed = {e["path"] for e in entries}
    removed = [rel for rel in sorted(earlier - listed) if _removable(dest, rel)]
    for rel in removed:
        _target(dest, rel).unlink()
    made = {"by": "hvdcluster bundle", "resolver": resolver, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "keys": collected.get("keys") or {}}
    data = hvd_bundle.dump(entries, made).encode("utf-8")
    try:  # a bundle that did not change keeps its manifest (and so its pin and its signature)
        previous = (dest / hvd_bundle.MANIFEST).read_bytes()
        at = hvd_bundle.parse(previous, str(dest / hvd_bundle.MANIFEST))["made"]["at"]
        if hvd_bundle.dump(entries, {**made, "at": at}).encode("utf-8") == previous:
            data = previous
    except (OSError, hvd_bundle.BundleError, KeyError, TypeError):
        pass
    if not (dest / hvd_bundle.MANIFEST).is_file() or data != (dest / hvd_bundle.MANIFEST).read_bytes():
        (dest / hvd_bundle.SIGNATURE).unlink(missing_ok=True)  # it signed the manifest this one replaces
        _write_new(dest / hvd_bundle.MANIFEST, io.BytesIO(data))
    (dest / MARKER).unlink(missing_ok=True)  # a bundle with its manifest: the manifest says it is one
    sizes: dict[str, int] = {}
    for entry in entries:
        top = entry["path"].split("/")[0]
        sizes[top] = sizes.get(top, 0) + entry["size"]
    return {"dir": str(dest), "files": len(entries), "bytes": sum(sizes.values()), "by_folder": sizes,
            "manifest_sha256": hashlib.sha256(data).hexdigest(), "removed": removed,
            "unavailable": collected.get("unavailable") or []}
