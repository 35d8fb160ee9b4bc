"""Readers of a node's Python env for hvd_node_state (``env.*``) and hvd_dist_record: the distributions installed and
their RECORDs, each file of the env checked against its RECORD or the manifest hvdcluster wrote when it built the env
(sizes, and with ``deep`` the sha256 of each), the conda packages of a conda env.

``root`` and the item shapes are hvd_state.py's.
"""

from __future__ import annotations

import base64
import csv
import glob
import hashlib
import json
import os
import re
import stat

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import (
    ABSENT,
    MANIFEST,
    add_content,
    d16,
    describe_problems,
    file_d16,
    manifest_entry_differs,
    read_manifest,
    read_text,
    resolve,
    sha256_of,
    under,
    walk_tree,
)

# Files hvdcluster itself writes into the env beside what its manifest and Horovod's RECORD list: its markers and
# the post-flight's script (hvd_verify_dir's default). Nothing else may be added there.
ENV_MARKERS = (".hvdcluster", ".hvd-env-key", MANIFEST, ".hvd-horovod-key", ".hvd-horovod-checked",
               "libexec/hvdcluster/allreduce.py")
# Distributions installed into the env after its manifest was written (their RECORD lists their files).
ENV_LATER = ("horovod",)

_RUNS = re.compile(r"[-_.]+")


def canonical(name: str) -> str:
    """A distribution name as packaging's ``canonicalize_name`` writes it."""
    return _RUNS.sub("-", name).lower()


# ------------------------------------------------------------------------------------------ the Python env


def _metadata(info: str) -> tuple[str, str]:
    """Name and Version from a dist-info's METADATA headers (the folder's name when it has none)."""
    name = version = ""
    try:
        with open(os.path.join(info, "METADATA"), encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if not line.strip():
                    break  # the headers end at the first empty line; the long description follows
                key, dummy, value = line.partition(":")
                if key == "Name" and not name:
                    name = value.strip()
                elif key == "Version" and not version:
                    version = value.strip()
                if name and version:
                    break
    except OSError:
        pass
    if not name or not version:
        stem = os.path.basename(info)[: -len(".dist-info")]
        fallback_name, dummy, fallback_version = stem.partition("-")
        name, version = name or fallback_name, version or fallback_version or "unknown"
    return name, version


def distributions(prefix: str) -> list[tuple[str, str, str, str]]:
    """Every distribution installed in the env at ``prefix`` (a real path) as (canonical name, version,
    site-packages folder, dist-info folder), sorted."""
    found = []
    pattern = os.path.join(glob.escape(prefix), "lib", "python*", "site-packages", "*.dist-info")
    for info in sorted(glob.glob(pattern)):
        name, version = _metadata(info)
        found.append((canonical(name), version, os.path.dirname(info), info))
    return found


def records(prefix: str, name: str) -> list[str]:
    """Every RECORD of the distribution ``name`` (compared as packaging normalises it) in the env at ``prefix``."""
    want = canonical(name)
    return sorted(os.path.join(info, "RECORD") for found, dummy_version, dummy_site, info in distributions(prefix)
                  if found == want and os.path.isfile(os.path.join(info, "RECORD")))


def record_sha256(paths: list[str]) -> str:
    """sha256 of each RECORD's modification time (ns, then a space) and content: any pip install rewrites it, the
    same wheel again too; "none" without one (or when one cannot be read)."""
    digest = hashlib.sha256()
    try:
        for path in paths:
            with open(path, "rb") as handle:
                digest.update(b"%d " % os.fstat(handle.fileno()).st_mtime_ns + handle.read())
    except OSError:
        return "none"
    return digest.hexdigest() if paths else "none"


def fingerprint(prefix: str, name: str, files: list[str] | None = None) -> dict[str, str]:
    """hvd_dist_record's answer: ``record`` (the first RECORD's path), ``sha256`` (record_sha256) and, with
    ``files``, ``files_sha256``: those files, then the RECORDs, each as path and content ("no <name>" in place of a
    RECORD when the distribution is not installed). Not their modification times: a repair that puts back the bytes
    the last passing allreduce saw leaves it as it was, so the post-flight proves only what changed. A file's path may
    start with ``~user`` (the cluster user's ~/.ssh)."""
    paths = records(prefix, name)
    out = {"record": paths[0] if paths else "", "sha256": record_sha256(paths)}
    if files:
        digest = hashlib.sha256()
        for path in [*map(os.path.expanduser, files), *paths]:
            add_content(digest, path)
        if not paths:
            digest.update(b"no " + name.encode())
        out["files_sha256"] = digest.hexdigest()
    return out


def _python_version(prefix: str) -> str:
    text = read_text(os.path.join(prefix, "pyvenv.cfg"))
    if text is not None:
        fields = {}
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                fields[key.strip()] = value.strip()
        value = fields.get("version") or fields.get("version_info")
        if value:
            return ".".join(value.split(".")[:3])
    for meta in sorted(glob.glob(os.path.join(glob.escape(prefix), "conda-meta", "python-3*.json"))):
        match = re.match(r"python-(\d+\.\d+(?:\.\d+)?)-", os.path.basename(meta))
        if match:
            return match.group(1)
    libs = sorted(glob.glob(os.path.join(glob.escape(prefix), "lib", "python3.*")))
    return os.path.basename(libs[-1])[len("python"):] if libs else "unknown"


def _record_files(site: str, info: str) -> dict[str, tuple[str, int | None]]:
    """The files a dist-info's RECORD lists with a sha256: real path -> (RECORD's hash, size or None);
    ``__pycache__`` left out (pip lists byte caches without a hash; the manifest and env_problems' walk cover them)."""
    files = {}
    try:
        with open(os.path.join(info, "RECORD"), encoding="utf-8", errors="replace", newline="") as handle:
            rows = list(csv.reader(handle))
    except OSError:
        return files
    for row in rows:
        if len(row) < 2 or not row[1].startswith("sha256=") or "__pycache__" in row[0].split("/"):
            continue
        size = int(row[2]) if len(row) > 2 and row[2].isdigit() else None
        files[os.path.normpath(os.path.join(site, row[0]))] = (row[1][len("sha256="):], size)
    return files


def _record_paths(site: str, info: str) -> set[str]:
    """Every path a dist-info's RECORD lists (with a hash or not: pip lists byte caches without one), real paths."""
    try:
        with open(os.path.join(info, "RECORD"), encoding="utf-8", errors="replace", newline="") as handle:
            return {os.path.normpath(os.path.join(site, row[0])) for row in csv.reader(handle) if row and row[0]}
    except OSError:
        return set()


def _record_differs(full: str, want_hash: str, size: int | None, deep: bool) -> str:
    try:
        info = os.stat(full)
    except OSError:
        return "missing"
    if not stat.S_ISREG(info.st_mode):
        return "missing"
    if size is not None and info.st_size != size:
        return "changed"
    if deep:
        try:
            found = base64.urlsafe_b64encode(bytes.fromhex(sha256_of(full))).rstrip(b"=").decode()
        except OSError:
            return "changed"
        return "" if found == want_hash else "changed"
    return ""


def env_namer(prefix: str, dists: list[tuple[str, str, str, str]]):
    """How env.files names a path of the env: relative to the site-packages holding it, else to the prefix."""
    sites = sorted({site for dummy_name, dummy_version, site, dummy_info in dists}, key=len, reverse=True)

    def name(full: str) -> str:
        for site in sites:
            if full.startswith(site + os.sep):
                return os.path.relpath(full, site)
        return os.path.relpath(full, prefix) if full.startswith(prefix + os.sep) else full

    return name


def env_problems(prefix: str, dists: list[tuple[str, str, str, str]], deep: bool = False,
                 full_paths: bool = False) -> list[tuple[str, str]]:
    """What differs in the env at ``prefix`` from what was installed there, as (kind, name) with kind "missing",
    "changed" or "added"; a path inside site-packages is named relative to it, any other relative to the prefix
    (``full_paths``: each as its full path, the way hvd_env_prune takes an addition out).

    - Every file hvd_tree's manifest (``.hvd-manifest``) lists is checked as hvd_tree does (size and modification
      time, ``deep``: sha256); every other file the RECORD of a distribution installed later (Horovod), or of any
      distribution when there is no manifest, lists with a sha256 must exist with its size (``deep``: its hash). A
      missing manifest is itself a problem: the env was not installed by hvdcluster, or it was tampered with.
    - The env holds nothing else: a file neither the manifest, Horovod's RECORD (installed later) nor hvdcluster's
      own markers account for is "added" - an extra distribution, a stray module, a ``*.pth`` or
      ``sitecustomize.py`` (both run at every interpreter start), a planted byte cache.
    """
    name = (lambda full: full) if full_paths else env_namer(prefix, dists)  # noqa: E731 - one of two namers
    problems = []
    manifest = read_manifest(prefix)
    listed = set()
    if manifest is None:
        problems.append(("missing", MANIFEST))
    # one walk: its lstat judges each file the manifest lists (a listed path it did not find is looked up on its own:
    # a path through a link), and what it found that nothing accounts for is "added"
    found = dict(walk_tree(prefix)) if manifest is not None else {}
    for rel, want in (manifest or {}).items():
        full = os.path.normpath(os.path.join(prefix, rel))
        listed.add(full)
        kind = manifest_entry_differs(full, want, deep, found.get(rel))
        if kind:
            problems.append((kind, name(full)))
    known = set(listed) | {os.path.join(prefix, marker) for marker in ENV_MARKERS}
    for dist, dummy_version, site, info in dists:
        if dist in ENV_LATER:
            known |= _record_paths(site, info)
        elif manifest is not None:
            # what the manifest lists is judged by it; a RECORD line it does not list was never installed (a script
            # a conda package's entry points replaced, say): not a problem of this env
            continue
        for full, (want_hash, size) in _record_files(site, info).items():
            if full in listed:
                continue
            listed.add(full)
            kind = _record_differs(full, want_hash, size, deep)
            if kind:
                problems.append((kind, name(full)))
    if manifest is not None:
        for rel in found:
            full = os.path.join(prefix, rel)
            if full not in known:
                problems.append(("added", name(full)))
    return problems


def verify_env(prefix: str, dists: list[tuple[str, str, str, str]], deep: bool = False) -> str:
    """``env.files``: "ok" or what differs (:func:`env_problems`)."""
    return describe_problems(env_problems(prefix, dists, deep))


def manifest_d16(prefix: str) -> str:
    """``env.manifest``: d16 of what the env's manifest says was installed (each path with its size and sha256, a
    link with its target; modification times left out), so every node that installed the same archive has the same
    value, and a manifest edited to vouch for an added file shows."""
    manifest = read_manifest(prefix)
    if manifest is None:
        return ABSENT
    content = {rel: (want if want[:1] == ["link"] else [want[0], want[2]]) if isinstance(want, list) and len(want) >= 2
               else want for rel, want in manifest.items()}
    return d16(json.dumps(content, sort_keys=True, separators=(",", ":")).encode())


def conda_packages(prefix: str) -> list[tuple[str, str, str]]:
    """A conda env's packages as its ``conda-meta/*.json`` records say (name, version, build); [] for a venv. A
    record that cannot be read is named with version "unreadable"."""
    meta = os.path.join(prefix, "conda-meta")
    try:
        names = sorted(n for n in os.listdir(meta) if n.endswith(".json"))
    except OSError:
        return []
    out = []
    for file in names:
        try:
            with open(os.path.join(meta, file), encoding="utf-8") as handle:
                record = json.load(handle)
            out.append((str(record["name"]).lower(), str(record["version"]), str(record.get("build", ""))))
        except (OSError, ValueError, KeyError, TypeError):
            out.append((file[:-len(".json")], "unreadable", ""))
    return out


def env_state(root: str, env_prefix: str, deep: bool = False) -> dict:
    """``env.*`` (interpreter, key, lock, every distribution but Horovod, its files) and ``horovod.*``."""
    keys = ("env.python", "env.key", "env.lock", "env.files", "env.manifest", "horovod.version", "horovod.record", "horovod.key",
            "horovod.checked")
    prefix = under(root, env_prefix)
    if not os.path.isdir(prefix):
        return dict.fromkeys(keys, ABSENT)
    out = {}
    python = resolve(root, os.path.join(env_prefix, "bin", "python"))
    out["env.python"] = f"{python} {_python_version(prefix)}" if os.path.isfile(under(root, python)) else ABSENT
    for key, file in (("env.key", ".hvd-env-key"), ("horovod.key", ".hvd-horovod-key"),
                      ("horovod.checked", ".hvd-horovod-checked")):
        text = read_text(os.path.join(prefix, file))
        out[key] = text.strip() if text is not None else ABSENT
    lock = os.path.join(prefix, "hvd-requirements.lock")
    try:
        out["env.lock"] = sha256_of(lock)
    except OSError:
        out["env.lock"] = ABSENT
    dists = distributions(prefix)
    items: dict[str, list[str]] = {}
    horovod = []
    for name, version, dummy_site, info in dists:
        record = file_d16(os.path.join(info, "RECORD"))
        if name == "horovod":
            horovod.append((version, record))
        else:
            items.setdefault(f"env.dist.{name}", []).append(f"{version} {record}")
    for name, version, build in conda_packages(prefix):
        items.setdefault(f"env.conda.{name}", []).append(f"{version} {build}")
    out.update({key: ", ".join(sorted(values)) for key, values in items.items()})
    out["horovod.version"], out["horovod.record"] = horovod[0] if horovod else (ABSENT, ABSENT)
    out["env.files"] = verify_env(prefix, dists, deep)
    out["env.manifest"] = manifest_d16(prefix)
    return out
