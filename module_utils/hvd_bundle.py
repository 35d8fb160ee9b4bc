"""An offline bundle's manifest: every file a converge without egress needs, its sha256, size and why.

Shared by the ``hvdcluster`` command (``bundle``, ``bundle --verify``, ``up --bundle``'s first check) and the
``hvd_bundle`` module (the controller side of hvd_base, which carries the bundle's apt repository to the nodes):
one reader, so the CLI and a hand-run ``ansible-playbook`` refuse the same bundle with the same words.

Layout of a bundle folder::

    manifest.yaml      this list (written last: a bundle cut short has none)
    apt/               the node OS's packages with every dependency, and their ``Packages`` index
    pypi/              the env's locked distributions (they stand in for the index: pip --no-index)
    wheelhouse/        the wheelhouse hosts.yaml offered when the bundle was made (part of the env's key)
    cache/             controller-cache entries: the packed env and the built Horovod wheel, with .sha256
    openmpi/           the Open MPI tarball, when the stack builds it from source
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tarfile

import yaml

MANIFEST = "manifest.yaml"
FORMAT = 1
# What each folder is for, and the role that needs it (named when a file is missing).
ROLES = {"apt": "hvd_base", "pypi": "hvd_pyenv", "wheelhouse": "hvd_pyenv", "openmpi": "hvd_openmpi"}
CACHE_ROLES = {"envs": "hvd_pyenv", "horovod": "hvd_horovod"}


class BundleError(Exception):
    """A bundle that cannot be used: the message names the file."""


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def role_of(relpath: str) -> str:
    parts = relpath.split("/")
    if parts[0] == "cache" and len(parts) > 1:
        return CACHE_ROLES.get(parts[1], "hvdcluster")
    return ROLES.get(parts[0], "hvdcluster")


def load(folder: str) -> dict:
    """The manifest of ``folder``: {'format', 'made', 'entries': [{path, sha256, size, why, role}]}."""
    path = os.path.join(folder, MANIFEST)
    try:
        with open(path, encoding="utf-8") as handle:
            doc = yaml.safe_load(handle)
    except FileNotFoundError:
        raise BundleError(f"{path}: not found (make the bundle with `hvdcluster bundle hosts.yaml -o {folder}`)")
    except (OSError, yaml.YAMLError) as exc:
        raise BundleError(f"{path}: unreadable: {exc}")
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("files"), list):
        raise BundleError(f"{path}: not an hvdcluster bundle manifest (format {FORMAT} with a files list)")
    entries = []
    for index, item in enumerate(doc["files"]):
        if not (isinstance(item, dict) and isinstance(item.get("path"), str) and isinstance(item.get("sha256"), str)
                and isinstance(item.get("size"), int)):
            raise BundleError(f"{path}: files[{index}]: needs path, sha256 and size")
        rel = item["path"]
        if rel.startswith("/") or ".." in rel.split("/"):
            raise BundleError(f"{path}: files[{index}]: path {rel!r} leaves the bundle folder")
        entries.append({"path": rel, "sha256": item["sha256"], "size": item["size"], "why": item.get("why", ""),
                        "role": item.get("role") or role_of(rel)})
    return {**doc, "entries": entries}


def missing(folder: str, manifest: dict) -> list[str]:
    """Quick check (names and sizes, no hashing): one line per file that is absent or has another size."""
    problems = []
    for entry in manifest["entries"]:
        path = os.path.join(folder, entry["path"])
        try:
            size = os.stat(path).st_size
        except OSError:
            problems.append(f"{path}: missing from the bundle (needed by {entry['role']}: {entry['why']})")
            continue
        if size != entry["size"]:
            problems.append(f"{path}: {size} bytes, the manifest says {entry['size']} (needed by {entry['role']}: "
                            f"{entry['why']}); run `hvdcluster bundle --verify {folder}`")
    return problems


def verify(folder: str, manifest: dict) -> list[str]:
    """Full check: every file's sha256; one line per file that is absent or differs."""
    problems = missing(folder, manifest)
    bad = {line.split(":", 1)[0] for line in problems}
    for entry in manifest["entries"]:
        path = os.path.join(folder, entry["path"])
        if path in bad:
            continue
        found = sha256_of(path)
        if found != entry["sha256"]:
            problems.append(f"{path}: sha256 {found}, the manifest says {entry['sha256']} (needed by {entry['role']}: "
                            f"{entry['why']})")
    return problems


def apt_digest(manifest: dict) -> str:
    """One digest for the apt repository (every apt/ file's name and sha256)."""
    lines = sorted(f"{e['path']} {e['sha256']}" for e in manifest["entries"] if e["path"].startswith("apt/"))
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def apt_archive(folder: str, manifest: dict, cache_dir: str) -> tuple[str, str, bool]:
    """The apt repository as one uncompressed tar in ``cache_dir/bundles`` (the same bytes for the same bundle:
    sorted names, owner root, time 0), made when absent from files checked against the manifest's sha256 as they
    are read. (path, its sha256 - also in ``<path>.sha256`` -, made now)."""
    entries = sorted((e for e in manifest["entries"] if e["path"].startswith("apt/")), key=lambda e: e["path"])
    if not entries:
        raise BundleError(f"{os.path.join(folder, MANIFEST)}: lists no apt/ packages")
    target = os.path.join(cache_dir, "bundles", f"apt-{apt_digest(manifest)[:16]}.tar")
    try:
        with open(target + ".sha256", encoding="ascii") as handle:
            recorded = handle.read().split()[0]
        if os.path.isfile(target):
            return target, recorded, False
    except (OSError, IndexError):
        pass
    os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
    tmp = f"{target}.{os.getpid()}.tmp"
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for entry in entries:
            path = os.path.join(folder, entry["path"])
            with open(path, "rb") as handle:
                data = handle.read()
            if hashlib.sha256(data).hexdigest() != entry["sha256"]:
                os.unlink(tmp)
                raise BundleError(f"{path}: sha256 differs from the manifest (needed by {entry['role']}: "
                                  f"{entry['why']}); run `hvdcluster bundle --verify {folder}`")
            info = tarfile.TarInfo(entry["path"][len("apt/"):])
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    digest = sha256_of(tmp)
    with open(target + ".sha256", "w", encoding="ascii") as handle:
        handle.write(f"{digest}  {os.path.basename(target)}\n")
    os.replace(tmp, target)
    return target, digest, True


def seed_cache(folder: str, manifest: dict, cache_dir: str) -> list[str]:
    """Copy the bundle's cache/ entries (and their .sha256) into the controller cache where absent; the roles
    verify each by its sha256 before use. The paths copied."""
    copied = []
    for entry in manifest["entries"]:
        if not entry["path"].startswith("cache/"):
            continue
        target = os.path.join(cache_dir, entry["path"][len("cache/"):])
        if os.path.isfile(target) and os.stat(target).st_size == entry["size"]:
            continue
        os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
        tmp = f"{target}.{os.getpid()}.tmp"
        shutil.copyfile(os.path.join(folder, entry["path"]), tmp)
        os.replace(tmp, target)
        copied.append(target)
    return copied


def dump(entries: list[dict], made: dict) -> str:
    """The manifest's text (entries sorted by path)."""
    doc = {"format": FORMAT, "made": made,
           "files": [{"path": e["path"], "sha256": e["sha256"], "size": e["size"], "why": e["why"],
                      "role": e.get("role") or role_of(e["path"])} for e in sorted(entries, key=lambda e: e["path"])]}
    buffer = io.StringIO()
    buffer.write("# hvdcluster bundle: every file an offline converge needs. Check: hvdcluster bundle --verify DIR\n")
    yaml.safe_dump(doc, buffer, sort_keys=False, default_flow_style=False, width=120)
    return buffer.getvalue()
