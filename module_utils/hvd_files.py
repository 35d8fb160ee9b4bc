"""Helpers shared by hvdcluster's modules (library/): file digests."""

from __future__ import annotations

import hashlib
import os


def sha256_of(path: str) -> str:
    """The sha256 of a file, read in 1 MiB blocks (artifacts are several GB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def add_stamped(digest, path: str) -> None:
    """Feed ``digest`` with a file as it stands: its path, modification time (ns) and content, so a rewrite with
    the same bytes counts too; a file that cannot be read is fed as its path and ``-`` (missing)."""
    name = os.fsencode(path)
    try:
        with open(path, "rb") as handle:
            digest.update(b"%s %d\0" % (name, os.fstat(handle.fileno()).st_mtime_ns) + handle.read() + b"\0")
    except OSError:
        digest.update(name + b" -\0")
