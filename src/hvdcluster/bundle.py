"""``hvdcluster bundle``: gather an offline bundle on a connected node; ``bundle --verify``; ``up --bundle``'s check.

The manifest's reader and the bundle's layout live in ``module_utils/hvd_bundle.py``, which the controller-side
module of hvd_base uses too: the command and a hand-run playbook judge a bundle alike.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tarfile
import time
import urllib.request
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from . import paths
from .errors import HvdError

# Folders whose files the manifest lists; a file in one of them that no longer belongs is removed on a re-run.
FOLDERS = ("apt", "pypi", "wheelhouse", "cache", "openmpi")
WHEELHOUSE_PATTERNS = (".whl", ".tar.gz", ".zip")  # what hvd_pyenv offers from a wheelhouse


@cache
def manifest_lib() -> ModuleType:
    """module_utils/hvd_bundle.py, loaded as a plain module (it imports nothing of Ansible's)."""
    path = paths.ansible_home() / "module_utils" / "hvd_bundle.py"
    found = importlib.util.spec_from_file_location("hvdcluster._hvd_bundle", path)
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return module


def load(folder: str | os.PathLike[str]) -> dict:
    lib = manifest_lib()
    try:
        return lib.load(str(folder))
    except lib.BundleError as exc:
        raise HvdError(str(exc)) from None


def check_usable(folder: str | os.PathLike[str]) -> dict:
    """``up --bundle``'s first step (names and sizes, no hashing, no node touched): exit 2 naming the first missing
    file and the role that needs it."""
    manifest = load(folder)
    problems = manifest_lib().missing(str(folder), manifest)
    if problems:
        more = f" (and {len(problems) - 1} more; `hvdcluster bundle --verify {folder}` lists them)" if len(
            problems) > 1 else ""
        raise HvdError(f"bundle: {problems[0]}{more}")
    return manifest


def verify(folder: str | os.PathLike[str]) -> list[str]:
    """Every file's sha256 against the manifest, and files in the bundle's folders the manifest does not list."""
    manifest = load(folder)
    problems = manifest_lib().verify(str(folder), manifest)
    listed = {e["path"] for e in manifest["entries"]}
    for rel in _present(Path(folder)):
        if rel not in listed:
            problems.append(f"{Path(folder) / rel}: not in the manifest (a file nobody vouches for)")
    return problems


def _present(folder: Path) -> list[str]:
    found = []
    for top in FOLDERS:
        base = folder / top
        if base.is_dir():
            found += [str(p.relative_to(folder)) for p in base.rglob("*") if p.is_file() or p.is_symlink()]
    return sorted(found)


def _sha256(path: Path) -> str:
    return manifest_lib().sha256_of(str(path))


def held(folder: Path) -> dict[str, str]:
    """What the bundle folder already holds, as its manifest says, where the file is there with its size."""
    try:
        manifest = manifest_lib().load(str(folder))
    except manifest_lib().BundleError:
        return {}
    have = {}
    for entry in manifest["entries"]:
        path = folder / entry["path"]
        if path.is_file() and path.stat().st_size == entry["size"]:
            have[entry["path"]] = entry["sha256"]
    return have


def copy_if_changed(src: Path, dest: Path, sha256: str | None = None) -> bool:
    if dest.is_file() and dest.stat().st_size == src.stat().st_size and (sha256 is None or _sha256(dest) == sha256):
        return False
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dest)
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
        copy_if_changed(src, dest / "wheelhouse" / src.name, sha)
        entries.append({"path": f"wheelhouse/{src.name}", "sha256": sha, "size": src.stat().st_size,
                        "why": "the wheelhouse of hosts.yaml when the bundle was made (its names are in the env's key)"})
    return entries


def openmpi_entries(stack: dict[str, Any], dest: Path) -> list[dict[str, Any]]:
    """With ``stack.mpi.source: source``, the Open MPI tarball hvd_openmpi builds from, checked by its sha256: copied
    from the controller path, or downloaded here (where there is network) from its URL."""
    mpi = stack.get("mpi") or {}
    if mpi.get("source") != "source" or not mpi.get("url"):
        return []
    url, sha = str(mpi["url"]), str(mpi.get("sha256") or "").lower()
    target = dest / "openmpi" / os.path.basename(url.rstrip("/").split("?", 1)[0])
    if not (target.is_file() and _sha256(target) == sha):
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            if "://" in url:
                with urllib.request.urlopen(url, timeout=60) as response, open(tmp, "wb") as out:  # noqa: S310
                    shutil.copyfileobj(response, out)
            else:
                shutil.copyfile(url, tmp)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise HvdError(f"bundle: stack.mpi.url {url}: cannot get it: {exc}") from None
        found = _sha256(tmp)
        if found != sha:
            tmp.unlink()
            raise HvdError(f"bundle: stack.mpi.url {url}: sha256 {found}, stack.mpi.sha256 says {sha or '(none)'}")
        os.replace(tmp, target)
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
        sha = sidecar.read_text().split()[0]
        for item, item_why in ((path, why), (sidecar, f"the sha256 of {path.name}")):
            rel = f"cache/{item.relative_to(cache_dir)}"
            item_sha = sha if item is path else _sha256(item)
            copy_if_changed(item, dest / rel, item_sha)
            entries.append({"path": rel, "sha256": item_sha, "size": item.stat().st_size, "why": item_why})
    return entries


def unpack_incoming(dest: Path) -> list[str]:
    """The resolver's new files (dest/.incoming.tar) into apt/ and pypi/: plain files only, never outside."""
    incoming = dest / ".incoming.tar"
    names = []
    if not incoming.is_file():
        return names
    with tarfile.open(incoming) as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts
            if not member.isfile() or len(parts) != 2 or parts[0] not in ("apt", "pypi") or parts[1].startswith("."):
                raise HvdError(f"bundle: {incoming}: unexpected member {member.name!r}; nothing was unpacked")
        for member in tar.getmembers():
            target = dest / member.name
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            with tar.extractfile(member) as src, open(tmp, "wb") as out:
                shutil.copyfileobj(src, out)
            os.replace(tmp, target)
            names.append(member.name)
    incoming.unlink()
    return names


def finish(dest: Path, collected: dict[str, Any], extra: list[dict[str, Any]], resolver: str) -> dict[str, Any]:
    """Complete the entries (sizes of files already held), drop files no longer listed, write the manifest last."""
    entries = []
    for item in collected.get("files") or []:
        path = dest / item["path"]
        if not path.is_file():
            raise HvdError(f"bundle: {path}: the resolver listed it but it was not fetched; run the bundle again")
        entries.append({**item, "size": path.stat().st_size})
    entries += extra
    listed = {e["path"] for e in entries}
    removed = [rel for rel in _present(dest) if rel not in listed]
    for rel in removed:
        (dest / rel).unlink()
    made = {"by": "hvdcluster bundle", "resolver": resolver, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "keys": collected.get("keys") or {}}
    text = manifest_lib().dump(entries, made)
    tmp = dest / f".manifest.{os.getpid()}.tmp"
    tmp.write_text(text)
    os.replace(tmp, dest / "manifest.yaml")
    sizes: dict[str, int] = {}
    for entry in entries:
        top = entry["path"].split("/")[0]
        sizes[top] = sizes.get(top, 0) + entry["size"]
    return {"dir": str(dest), "files": len(entries), "bytes": sum(sizes.values()), "by_folder": sizes,
            "manifest_sha256": hashlib.sha256(text.encode()).hexdigest(), "removed": removed,
            "unavailable": collected.get("unavailable") or []}
