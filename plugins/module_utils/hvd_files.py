"""Helpers shared by hvdcluster's modules (library/) and module_utils: a node's files read below a root, file digests
and hvd_tree's manifest."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile


def under(root: str, path: str) -> str:
    """The node's ``path`` as found below ``root``."""
    return path if root in ("", "/") else os.path.join(root, path.lstrip("/"))


def on_node(root: str, full: str) -> str:
    """The node's own path of ``full``, a path found below ``root`` (``under``'s inverse)."""
    return "/" + os.path.relpath(full, under(root, "/"))


def resolve(root: str, path: str) -> str:
    """The node's ``path`` with every symlink resolved the way the node sees it (an absolute link target is taken
    below ``root`` too); a missing part is kept as it is, like ``os.path.realpath``."""
    if root in ("", "/"):
        return os.path.realpath(path)
    parts = [part for part in path.split("/") if part]
    done, hops = "/", 0
    while parts:
        part = parts.pop(0)
        if part == ".":
            continue
        if part == "..":
            done = os.path.dirname(done)
            continue
        candidate = os.path.join(done, part)
        full = under(root, candidate)
        if os.path.islink(full) and hops < 40:
            hops += 1
            target = os.readlink(full)
            if target.startswith("/"):
                done = "/"
            parts = [p for p in target.split("/") if p] + parts
        else:
            done = candidate
    return done


def read_text(path: str, limit: int | None = None, strict: bool = False) -> str | None:
    """A file's text (undecodable bytes replaced, newlines read as open() reads them), or None when it cannot be
    read. ``limit``: the most bytes read, a larger file raises ValueError naming it; ``strict``: only a missing path
    or a folder reads as None, any other error (a file it may not read) is raised."""
    try:
        with open(path, "rb") as handle:
            data = handle.read() if limit is None else handle.read(limit + 1)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    except OSError:
        if strict:
            raise
        return None
    if limit is not None and len(data) > limit:
        raise ValueError(f"{path}: larger than {limit} bytes")
    return data.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")


READ_LIMIT = 1048576  # the most bytes hvd_read (and hvd_dist_record's read) take of one small file


def read_all(paths: list[str], limit: int = READ_LIMIT) -> dict[str, str | None]:
    """Each path's text (read_text, strict), None where there is no file to read; ValueError names a file over
    ``limit``, OSError one that cannot be read: hvd_read's answer, and hvd_dist_record's ``read``."""
    return {path: read_text(path, limit=limit, strict=True) for path in paths}


def make_folders(path: str, mode: int = 0o755) -> None:
    """Make ``path`` and its missing parents, each ``mode`` (0755) whatever the umask (os.makedirs gives its parents
    0777 minus the umask, and its mode is taken minus the umask too: under a root umask of 077 a prefix's parent would
    shut out the login user). A path already there is left as it is."""
    missing = []
    while not os.path.lexists(path):
        missing.append(path)
        path = os.path.dirname(path)
    for folder in reversed(missing):
        os.mkdir(folder)
        os.chmod(folder, mode)


def sha256_of(path: str) -> str:
    """The sha256 of a file, read in 1 MiB blocks (artifacts are several GB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def replace_file(path: str, text: str, mode: int = 0o644, suffix: str = "~") -> None:
    """``path`` replaced by ``text`` in one rename: written first under a fresh name (O_EXCL) in its own folder ending
    in ``suffix`` (apt, say, ignores a leftover ending in '~'), synced, ``mode`` set."""
    handle, part = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=f".{os.path.basename(path)}.",
                                    suffix=suffix)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(part, mode)
        os.replace(part, path)
    finally:
        if os.path.lexists(part):
            os.unlink(part)


def copy_verified(src: str, dest: str, sha256: str, between=None) -> None:
    """Copy ``src`` to ``dest`` hashing exactly the bytes written, and keep the copy only if they are ``sha256``.

    For files that crossed as another user (the login user's artifact folder) and are used as root: ``src`` is read
    once, so what is checked is what is used; swapping or rewriting ``src`` afterwards changes nothing. ``dest`` is
    written under a fresh name (0600, O_EXCL) in its own folder and renamed into place last. ``between`` (tests
    only) is called after each block is hashed and written."""
    folder, base = os.path.split(dest)
    part = os.path.join(folder or ".", f".{base}.part-{os.getpid()}-{os.urandom(4).hex()}")
    digest = hashlib.sha256()
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with open(src, "rb") as source, os.fdopen(fd, "wb") as out:
            for block in iter(lambda: source.read(1 << 20), b""):
                digest.update(block)
                out.write(block)
                if between is not None:
                    between()
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != sha256.lower():
            raise ValueError(f"{src} is not the verified file: sha256 {digest.hexdigest()}, expected {sha256.lower()}")
        os.replace(part, dest)
    finally:
        if os.path.lexists(part):
            os.unlink(part)


def add_content(digest, path: str) -> None:
    """Feed ``digest`` with a file as it stands: its path and content (a rewrite with the same bytes is the same
    file: what depends on it cannot tell the two apart); a file that cannot be read is fed as its path and ``-``
    (missing)."""
    name = os.fsencode(path)
    try:
        with open(path, "rb") as handle:
            digest.update(name + b"\0" + handle.read() + b"\0")
    except OSError:
        digest.update(name + b" -\0")


MANIFEST = ".hvd-manifest"


def walk_tree(root: str, skip: set[str] = frozenset()):
    """Every file and link below ``root`` as (relative path, lstat), ``skip`` (relative paths) left out, each folder's
    entries in name order before its subfolders'. Byte caches (``__pycache__``) are walked like any file: Python loads
    a planted one whose header matches its source, so they are part of what was installed (ARCHITECTURE.md, "exact
    envs"). A symlinked folder is one link, not followed; a folder that cannot be listed is left out.

    One ``lstat`` per entry (``os.scandir``'s, whose file type comes with the listing): a GPU env holds tens of
    thousands of files and every ``check`` walks it on every node (bench/node_state.py)."""
    def walk(folder: str, lead: str):
        try:
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except OSError:
            return
        below = []
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    below.append(entry)
                    continue
            except OSError:
                pass
            rel = lead + entry.name
            if rel in skip:
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed since its folder was listed (the tree changes under the walk): not there now
            yield rel, info
        for entry in below:
            yield from walk(entry.path, lead + entry.name + os.sep)

    yield from walk(root, "")


def read_manifest(root: str) -> dict | None:
    """A tree's manifest as hvd_tree writes it (``root/.hvd-manifest``: JSON {relative path: [size, mtime_ns,
    sha256]}, a link as ["link", target]); None when it is missing or unreadable."""
    try:
        with open(os.path.join(root, MANIFEST), encoding="utf-8") as handle:
            recorded = json.load(handle)
    except (OSError, ValueError):
        return None
    return recorded if isinstance(recorded, dict) else None


def manifest_entry_differs(full: str, want: list, deep: bool = False, info: os.stat_result | None = None) -> str:
    """hvd_tree's comparison of one manifest entry with the file at ``full``: '' when it is as recorded, else
    'missing' or 'changed' (a link by its target, a file by size and mtime, with ``deep`` also by sha256). ``info``:
    the file's lstat where a walk has just taken it."""
    if info is None:
        try:
            info = os.lstat(full)
        except OSError:
            return "missing"
    if stat.S_ISDIR(info.st_mode):
        return "missing"  # hvd_tree's walk lists files and links only
    if stat.S_ISLNK(info.st_mode):
        try:
            return "" if want == ["link", os.readlink(full)] else "changed"
        except OSError:
            return "changed"
    if not want or want[0] == "link" or len(want) < 3:
        return "changed"
    if want[0] != info.st_size or want[1] != info.st_mtime_ns:
        return "changed"
    if deep:
        try:
            return "" if sha256_of(full) == want[2] else "changed"
        except OSError:
            return "changed"
    return ""


ABSENT = "absent"  # what a reader of node state says of what is not there
LINE_KEPT = 200  # characters of a line of a node's file or tool kept in a state value


def d16(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def file_d16(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            return d16(handle.read())
    except OSError:
        return ABSENT


def read_fact(root: str, name: str) -> dict | None:
    """``/etc/ansible/facts.d/<name>.fact`` (JSON, as our roles write them); None when missing or unreadable."""
    text = read_text(under(root, f"/etc/ansible/facts.d/{name}.fact"))
    if text is None:
        return None
    try:
        fact = json.loads(text)
    except ValueError:
        return None
    return fact if isinstance(fact, dict) else None


MOST_PROBLEMS = 10  # problems a state value names before '+N more'


def describe_problems(problems: list[tuple[str, str]]) -> str:
    if not problems:
        return "ok"
    order = {"missing": 0, "changed": 1, "added": 2}
    problems = sorted(set(problems), key=lambda p: (order.get(p[0], 3), p[1]))
    text = "; ".join(f"{kind}: {path}" for kind, path in problems[:MOST_PROBLEMS])
    if len(problems) > MOST_PROBLEMS:
        text += f"; +{len(problems) - MOST_PROBLEMS} more"
    return text


def mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None
