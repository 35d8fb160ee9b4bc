"""Benchmark (prints figures, asserts nothing): what checking an offline bundle by sha256 costs `up --bundle`.

Makes a synthetic bundle shaped like the CPU bundle of bench/README.md (556.5 MiB, 257 files: apt 142.3 MiB in many
packages, cache 217.0 MiB - the packed env and the Horovod wheel with their .sha256 -, wheelhouse 182.9 MiB - one
torch wheel -, pypi 14.4 MiB) in a temporary folder, then times, each with the bundle's pages dropped from the page
cache first (posix_fadvise DONTNEED after fsync: a bundle just copied in from a disk) and again with them cached:

  check          `up --bundle`'s check alone: the manifest's pin, then every file by its sha256 (each read once)
  check + seed   the same with an empty controller cache: what it lacks (the cache entries, the apt repository's
                 archive) is written there from that same read
  second check   `up`'s second reading of hosts.yaml in one run (fast path, then a full converge): nothing re-read
  module         hvd_base's controller side afterwards (hvd_bundle.ready): the folder holds exactly the manifest's
                 files, the bundle's pypi/ and wheelhouse/ files hashed, the controller cache's own copies (which
                 stand in for apt/ and cache/) hashed once each
  strays         the walk that finds a file the manifest does not list, or a symlink (lstat only, no file read)

Target: the check ≤ 5 s. Run from the checkout:  .venv/bin/python bench/bundle_hash.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from hvdcluster import bundle  # noqa: E402  (first: it puts the collection on the import path)

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_bundle as LIB  # noqa: E402
from ansible_collections.hvd.cluster.plugins.module_utils import hvd_bundle_cache as CACHE  # noqa: E402
MIB = 2**20
# (folder, number of files, total MiB): the CPU bundle's figures (bench/README.md, bundle_figures.py)
SHAPE = [("apt", 221, 142.3), ("pypi", 31, 14.4)]
BIG = [("cache/envs/env-0123456789abcdef.tar.zst", 207.5e6), ("wheelhouse/torch-2.13.0-cp311-linux_x86_64.whl",
                                                               182.9 * MIB),
       ("cache/horovod/0123456789abcdef/horovod-0.28.1-cp311-cp311-linux_x86_64.whl", 217.0 * MIB - 207.5e6 - 130)]


def sizes(count: int, total: float, rng: random.Random) -> list[int]:
    """count sizes summing to total MiB, spread like packages are (a few large, many small)."""
    weights = [rng.paretovariate(1.2) for _ in range(count)]
    scale = total * MIB / sum(weights)
    return [max(1, int(w * scale)) for w in weights]


def make(folder: Path) -> dict:
    rng = random.Random(20261124)
    block = rng.randbytes(MIB)
    plan = []
    for top, count, total in SHAPE:
        plan += [(f"{top}/pkg{i:03d}_1.0_amd64.{'deb' if top == 'apt' else 'whl'}", size)
                 for i, size in enumerate(sizes(count, total, rng))]
    plan += [(rel, int(size)) for rel, size in BIG]
    entries = []
    for index, (rel, size) in enumerate(plan):
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        with open(path, "wb") as out:
            left, salt = size, index.to_bytes(8, "little")
            while left:
                chunk = (salt + block)[: min(left, MIB)]
                out.write(chunk)
                digest.update(chunk)
                left -= len(chunk)
        entries.append({"path": rel, "sha256": digest.hexdigest(), "size": size, "why": "synthetic"})
        if rel.startswith("cache/"):
            side = f"{digest.hexdigest()}  {path.name}\n".encode()
            (folder / (rel + ".sha256")).write_bytes(side)
            entries.append({"path": rel + ".sha256", "sha256": hashlib.sha256(side).hexdigest(), "size": len(side),
                            "why": "synthetic"})
    (folder / "manifest.yaml").write_text(LIB.dump(entries, {"by": "bench/bundle_hash.py"}))
    return LIB.load(str(folder))


def drop_pages(*roots: Path) -> None:
    """Evict the files' pages from the page cache (no root needed: fsync, then POSIX_FADV_DONTNEED)."""
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file():
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)


def timed(what: str, total: int, call) -> float:
    start = time.perf_counter()
    call()
    seconds = time.perf_counter() - start
    rate = f", {total / MIB / seconds:.0f} MiB/s" if total else ""
    print(f"  {what:<58} {seconds:6.2f} s{rate}", flush=True)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", help="make the bundle in this folder and keep it (default: a temporary folder)")
    args = parser.parse_args()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="hvd-bundle-hash-"))
    try:
        folder, cache = work / "bundle", work / "controller-cache"
        start = time.perf_counter()
        manifest = make(folder)
        total = sum(e["size"] for e in manifest["entries"])
        pin = hashlib.sha256((folder / "manifest.yaml").read_bytes()).hexdigest()
        print(f"synthetic bundle: {len(manifest['entries'])} files, {total / MIB:.1f} MiB, made in "
              f"{time.perf_counter() - start:.1f} s ({os.cpu_count()} CPUs, sha256 by {hashlib.sha256().name} of "
              f"Python {sys.version.split()[0]})", flush=True)
        time.sleep(1.1)  # older than the coarse file-system clock the second check's shortcut allows for

        def check(cache_dir: Path | None = None) -> None:
            bundle._CHECKED.clear()  # a fresh `up`
            bundle.check_trusted(folder, sha256=pin, signers=None, hosts="hosts.yaml", cache_dir=cache_dir)

        for pages in ("dropped", "cached"):
            print(f"page cache {pages}:")
            if pages == "dropped":
                drop_pages(folder)
            timed("check (pin, then every file by sha256)", total, check)
            shutil.rmtree(cache, ignore_errors=True)
            if pages == "dropped":
                drop_pages(folder)
            timed("check + seed an empty controller cache (same read)", total, lambda: check(cache))
            timed("second check in the same run (nothing changed)", 0, lambda: bundle.check_trusted(
                folder, sha256=pin, signers=None, hosts="hosts.yaml", cache_dir=cache))
            if pages == "dropped":
                drop_pages(cache)
            timed("module: ready() (pypi/, wheelhouse/, the cache's copies)", total,
                  lambda: CACHE.ready(str(folder), manifest, str(cache)))
            timed("strays: unlisted files and symlinks (a walk, no file read)", 0,
                  lambda: LIB.strays(str(folder), manifest))
            timed("before: names and sizes only (missing())", 0, lambda: LIB.missing(str(folder), manifest))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
