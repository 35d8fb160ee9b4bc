"""An offline bundle's manifest: every file a converge without egress needs, its sha256, size and why.

Shared by the ``hvdcluster`` command (``bundle``, ``bundle --verify``, ``up --bundle``'s check) and the ``hvd_bundle``
module (the controller side of hvd_base, which carries the bundle's apt repository to the nodes): one reader, so the
CLI and a hand-run ``ansible-playbook`` refuse the same bundle with the same words.

Layout of a bundle folder::

    manifest.yaml      this list (written last: a bundle cut short has none)
    manifest.yaml.sig  its OpenSSH signature (``ssh-keygen -Y sign -n hvdcluster-bundle``), when it was signed
    apt/               the node OS's packages with every dependency, and their ``Packages`` index
    pypi/              the env's locked distributions (they stand in for the index: pip --no-index)
    wheelhouse/        the wheelhouse hosts.yaml offered when the bundle was made (part of the env's key)
    cache/             controller-cache entries: the packed env and the built Horovod wheel, with .sha256
    openmpi/           the Open MPI tarball, when the stack builds it from source
    conda/             a conda env's locked packages as an indexed channel (<subdir>/repodata.json), its only channel

Trust has one root: the manifest's bytes, pinned by their sha256 or signed by a key of an OpenSSH allowed-signers
file (``authenticate``); every other file is then trusted by the sha256 the manifest gives it, and by nothing else
(a ``.sha256`` file beside an entry is a file like the others, never a reason to skip hashing one).

What a checked bundle writes into the controller cache (the apt archive, the cache entries) is
:mod:`hvd_bundle_cache`'s.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import stat
import subprocess
import traceback

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import sha256_of, walk_tree

try:
    import yaml
except ImportError:  # the hvd_bundle module fails with missing_required_lib('PyYAML'); the CLI always has it
    HAS_YAML = False
    YAML_IMPORT_ERROR = traceback.format_exc()
else:
    HAS_YAML = True
    YAML_IMPORT_ERROR = None

MANIFEST = "manifest.yaml"
SIGNATURE = MANIFEST + ".sig"
NAMESPACE = "hvdcluster-bundle"  # ssh-keygen -Y's namespace: a signature made for anything else does not count
FORMAT = 1
BLOCK = 1 << 20
# What each folder is for, and the role that needs it (named when a file is missing).
ROLES = {"apt": "hvd_base", "pypi": "hvd_pyenv", "wheelhouse": "hvd_pyenv", "openmpi": "hvd_openmpi",
         "conda": "hvd_pyenv"}
CACHE_ROLES = {"envs": "hvd_pyenv", "horovod": "hvd_horovod"}
FOLDERS = ("apt", "pypi", "wheelhouse", "cache", "openmpi", "conda")  # a manifest path lies in one of these
# `hvdcluster bundle`'s mark of a run under way, at the top of the bundle folder (removed once the manifest is
# written; bundles made before kept it): an empty file of that name is no file of the bundle (nothing reads it).
MARKER = ".hvdcluster-bundle"
SHOWN = 10  # files named in one refusal, the rest counted
HEX = re.compile(r"[0-9a-f]{64}")


class BundleError(Exception):
    """A bundle that cannot be used: the message names the file."""


def _require_yaml() -> None:
    if not HAS_YAML:
        raise BundleError("reading or writing a bundle manifest needs the Python library PyYAML, which this Python "
                          "cannot import (pip install PyYAML)")


def role_of(relpath: str) -> str:
    parts = relpath.split("/")
    if parts[0] == "cache" and len(parts) > 1:
        return CACHE_ROLES.get(parts[1], "hvdcluster")
    return ROLES.get(parts[0], "hvdcluster")


def read_manifest(folder: str) -> bytes:
    path = os.path.join(folder, MANIFEST)
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        raise BundleError(f"{path}: not found (make the bundle with `hvdcluster bundle hosts.yaml {folder}`)")
    except OSError as exc:
        raise BundleError(f"{path}: unreadable: {exc}")


def load(folder: str) -> dict:
    """The manifest of ``folder``: {'format', 'made', 'sha256', 'entries': [{path, sha256, size, why, role}]}."""
    return parse(read_manifest(folder), os.path.join(folder, MANIFEST))


def parse(data: bytes, path: str) -> dict:
    """The manifest from its bytes (those ``authenticate`` judged: read once, so what was checked is what is used)."""
    _require_yaml()
    try:
        doc = yaml.safe_load(data.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise BundleError(f"{path}: unreadable: {' '.join(str(exc).split())}")
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("files"), list):
        raise BundleError(f"{path}: not an hvdcluster bundle manifest (format {FORMAT} with a files list)")
    entries, seen = [], {}
    for index, item in enumerate(doc["files"]):
        if not (isinstance(item, dict) and isinstance(item.get("path"), str) and isinstance(item.get("sha256"), str)
                and isinstance(item.get("size"), int)):
            raise BundleError(f"{path}: files[{index}]: needs path, sha256 and size")
        rel, sha = item["path"], item["sha256"].lower()
        problem = path_problem(rel)
        if problem:
            raise BundleError(f"{path}: files[{index}]: path {rel!r} {problem}")
        if rel in seen:
            raise BundleError(f"{path}: files[{index}]: path {rel!r} is listed twice (files[{seen[rel]}] too)")
        if not HEX.fullmatch(sha):
            raise BundleError(f"{path}: files[{index}]: sha256 {item['sha256']!r} of {rel!r} is not a sha256 digest")
        seen[rel] = index
        entries.append({"path": rel, "sha256": sha, "size": item["size"],
                        "why": item.get("why", ""), "role": item.get("role") or role_of(rel)})
    return {**doc, "sha256": hashlib.sha256(data).hexdigest(), "entries": entries}


def path_problem(rel: str) -> str:
    """Why ``rel`` is not a manifest path ("" when it is one): a plain relative path ``<folder>/<name>...`` in one of
    the bundle's folders (FOLDERS), every part a name (no empty, ``.`` or ``..`` part, no leading ``/``), no backslash
    or control character. Nothing else is ever joined to a folder, so no manifest reaches outside it."""
    if not rel:
        return "is empty"
    if "\\" in rel or not rel.isprintable():
        return "holds a backslash or a character that is not printable"
    if rel.startswith("/"):
        return "is absolute: it leaves the bundle folder"
    parts = rel.split("/")
    if ".." in parts:
        return "has a '..' part: it leaves the bundle folder"
    if "" in parts or "." in parts:
        return "has an empty or '.' part (a manifest path is written plainly: folder/name)"
    if len(parts) < 2 or parts[0] not in FOLDERS:
        return f"is not a file in one of the bundle's folders ({', '.join(f + '/' for f in FOLDERS)})"
    return ""


def inside(root: str, rel: str) -> str:
    """``root/rel``, once it is certain to lie below ``root`` (os.path.commonpath of the normalised paths): every
    path joined from a manifest (in the bundle folder, in the controller cache) is taken through here before it is
    read, written or removed."""
    base = os.path.normpath(os.path.abspath(root))
    target = os.path.normpath(os.path.join(base, rel))
    if os.path.isabs(rel) or target == base or os.path.commonpath([base, target]) != base:
        raise BundleError(f"{root}: {rel!r} does not lie below it: refused")
    return target


# --------------------------------------------------------------------------------------------- trust


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def authenticate(folder: str, data: bytes, sha256: str | None = None, signers: str | None = None) -> str:
    """Judge the manifest's bytes: equal to the pinned sha256, and/or signed (``ssh-keygen -Y sign -n
    hvdcluster-bundle``) by a key the allowed-signers file ``signers`` lists. Both are checked where both are given.
    What vouched for it, in words; BundleError when nothing is given or a check fails."""
    path = os.path.join(folder, MANIFEST)
    if not sha256 and not signers:
        raise BundleError(f"{path}: neither a pinned sha256 nor allowed signers were given")
    vouched = []
    if sha256:
        found = hashlib.sha256(data).hexdigest()
        if found != sha256.lower():
            raise BundleError(f"{path}: sha256 {found}, the pinned sha256 (network.bundle_sha256) is {sha256.lower()}: "
                              "not the bundle that was pinned")
        vouched.append("its pinned sha256")
    if signers:
        vouched.append(f"the signature of {verify_signature(folder, data, signers)}")
    return " and ".join(vouched)


def verify_signature(folder: str, data: bytes, signers: str) -> str:
    """The principal of ``signers`` (an OpenSSH allowed-signers file) whose key made ``folder/manifest.yaml.sig`` over
    ``data``, checked by OpenSSH itself (``ssh-keygen -Y find-principals``, then ``-Y verify`` with the manifest's bytes
    on its standard input)."""
    sig = os.path.join(folder, SIGNATURE)
    if not os.path.isfile(sig):
        raise BundleError(f"{sig}: not found: allowed signers ({signers}) need a signed bundle "
                          "(`hvdcluster bundle hosts.yaml -o DIR --sign KEY`)")
    keygen = shutil.which("ssh-keygen")
    if not keygen:
        raise BundleError(f"{sig}: checking it needs OpenSSH's ssh-keygen, which is not on PATH")
    try:
        found = subprocess.run([keygen, "-Y", "find-principals", "-s", sig, "-f", signers],
                               capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise BundleError(f"{sig}: ssh-keygen -Y find-principals failed: {exc}")
    principals = [name.strip() for line in found.stdout.splitlines() for name in line.split(",") if name.strip()]
    if found.returncode != 0 or not principals:
        raise BundleError(f"{sig}: made by a key that {signers} does not list "
                          f"({_last_line(found.stderr) or 'no principal matched'})")
    why = ""
    for principal in principals:
        try:
            check = subprocess.run([keygen, "-Y", "verify", "-f", signers, "-I", principal, "-n", NAMESPACE,
                                    "-s", sig], input=data, capture_output=True, timeout=60, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            raise BundleError(f"{sig}: ssh-keygen -Y verify failed: {exc}")
        if check.returncode == 0:
            return principal
        why = _last_line(check.stderr.decode(errors="replace") + check.stdout.decode(errors="replace"))
    raise BundleError(f"{sig}: not a valid {NAMESPACE} signature of {MANIFEST} by {', '.join(principals)} "
                      f"({why or 'verification failed'})")


# --------------------------------------------------------------------------------------------- checks


def shown(text: str) -> str:
    """A name as it may be printed: itself when every character is printable, else its repr (a file name from a
    bundle is data: a newline or an escape sequence in it never reaches a terminal raw)."""
    return text if text.isprintable() else repr(text)


def strays(folder: str, manifest: dict) -> list[tuple[str, str]]:
    """What ``folder`` holds besides the files its manifest lists, as (relative path, what it is): a file the manifest
    does not list, a symlink anywhere (a bundle holds plain files only; a link, to a file or a folder, is never
    followed), anything else that is no plain file. manifest.yaml and manifest.yaml.sig at the top are the manifest
    itself. One lstat per entry (hvd_files.walk_tree)."""
    listed = {entry["path"] for entry in manifest["entries"]}
    found = []
    for rel, info in walk_tree(folder):
        rel = rel.replace(os.sep, "/")
        if stat.S_ISLNK(info.st_mode):
            found.append((rel, "a symlink"))
        elif not stat.S_ISREG(info.st_mode):
            found.append((rel, "not a plain file"))
        elif not (rel in listed or rel in (MANIFEST, SIGNATURE) or (rel == MARKER and info.st_size == 0)):
            found.append((rel, "not in the manifest"))
    return found


def refuse_strays(folder: str, manifest: dict) -> None:
    """BundleError naming (up to SHOWN of) the files ``folder`` holds that its manifest does not list, and every
    symlink: a bundle is exactly its manifest, and an unlisted file is an error, not an extra."""
    found = strays(folder, manifest)
    if not found:
        return
    names = [shown(rel) + ("" if what == "not in the manifest" else f" ({what})") for rel, what in found]
    more = f" (and {len(names) - SHOWN} more)" if len(names) > SHOWN else ""
    raise BundleError(f"{folder}: holds {len(names)} file(s) its manifest does not list (a bundle is exactly its "
                      f"manifest: nothing of it was used): {', '.join(names[:SHOWN])}{more}; remove them, or gather "
                      f"the bundle again (`hvdcluster bundle --verify {folder}` lists them)")


def missing(folder: str, manifest: dict) -> list[str]:
    """Quick check (names and sizes, no hashing): one line per file that is absent or has another size."""
    problems = []
    for entry in manifest["entries"]:
        path = inside(folder, entry["path"])
        try:
            size = os.stat(path).st_size
        except OSError:
            problems.append(f"{path}: missing from the bundle (needed by {entry['role']}: {entry['why']})")
            continue
        if size != entry["size"]:
            problems.append(f"{path}: {size} bytes, the manifest says {entry['size']} (needed by {entry['role']}: "
                            f"{entry['why']}); run `hvdcluster bundle --verify {folder}`")
    return problems


def differs(folder: str, entry: dict, found: str) -> str:
    return (f"{os.path.join(folder, entry['path'])}: sha256 {found}, the manifest says {entry['sha256']} "
            f"(needed by {entry['role']}: {entry['why']})")


def verify(folder: str, manifest: dict) -> list[str]:
    """Full check: every file's sha256, and what the folder holds besides them; one line per file that is absent,
    differs, is not listed or is a symlink."""
    stray = strays(folder, manifest)
    problems = [f"{shown(os.path.join(folder, rel))}: " + (
        "not in the manifest (a file nobody vouches for)" if what == "not in the manifest" else
        f"{what} (a bundle holds plain files only, each listed in its manifest)") for rel, what in stray]
    links = {rel for rel, what in stray if what != "not in the manifest"}
    problems += missing(folder, manifest)
    bad = {line.split(":", 1)[0] for line in problems}
    for entry in manifest["entries"]:
        path = inside(folder, entry["path"])
        if path in bad or entry["path"] in links:
            continue
        found = sha256_of(path)
        if found != entry["sha256"]:
            problems.append(differs(folder, entry, found))
    return problems


def dump(entries: list[dict], made: dict) -> str:
    """The manifest's text (entries sorted by path)."""
    _require_yaml()
    doc = {"format": FORMAT, "made": made,
           "files": [{"path": e["path"], "sha256": e["sha256"], "size": e["size"], "why": e["why"],
                      "role": e.get("role") or role_of(e["path"])} for e in sorted(entries, key=lambda e: e["path"])]}
    buffer = io.StringIO()
    buffer.write("# hvdcluster bundle: every file an offline converge needs. Check: hvdcluster bundle --verify DIR\n")
    yaml.safe_dump(doc, buffer, sort_keys=False, default_flow_style=False, width=120)
    return buffer.getvalue()
