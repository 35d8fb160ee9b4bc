"""Helpers shared by hvdcluster's modules (library/): file digests."""

from __future__ import annotations

import hashlib


def sha256_of(path: str) -> str:
    """The sha256 of a file, read in 1 MiB blocks (artifacts are several GB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
