"""Turn pip's installation report (``pip install --dry-run --report``) into a lock with hashes.

Usage: python -I lock.py REPORT.json LOCK.txt [ALLOWED.txt]

Every resolved distribution becomes ``name==version --hash=sha256:...``; the env is then installed with
``pip install --require-hashes --no-deps -r LOCK.txt``, so what was resolved is exactly what is installed and the
lock (and its sha256, which the nodes compare) names every file by content. A distribution whose hash pip did not
report is hashed from its local file; one with neither is refused.

With ALLOWED (an offline bundle: the sha256 of every file its manifest lists, one a line), a distribution whose sha256
is none of them is refused, naming it: the lock takes only files the bundle's manifest vouches for, so hashes
required at install time mean the manifest's hashes.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit


def digest(item: dict) -> str:
    info = item.get("download_info") or {}
    archive = info.get("archive_info") or {}
    found = (archive.get("hashes") or {}).get("sha256")
    if not found and str(archive.get("hash", "")).startswith("sha256="):
        found = archive["hash"].split("=", 1)[1]
    url = urlsplit(info.get("url", ""))
    if not found and url.scheme == "file" and Path(unquote(url.path)).is_file():
        found = hashlib.sha256(Path(unquote(url.path)).read_bytes()).hexdigest()
    if not found:
        name = item["metadata"]["name"]
        raise SystemExit(f"lock: no sha256 for {name} ({info.get('url', 'unknown source')}): cannot lock it")
    return found.lower()


def main(report: str, lock: str, allowed: str | None = None) -> None:
    items = json.loads(Path(report).read_text())["install"]
    locked = [(i["metadata"]["name"].lower(), i["metadata"]["version"], digest(i), i) for i in items]
    if allowed is not None:
        listed = set(Path(allowed).read_text().split())
        strays = [f"{name}=={version} from {(item.get('download_info') or {}).get('url', 'an unknown source')} "
                  f"(sha256 {sha})" for name, version, sha, item in locked if sha not in listed]
        if strays:
            raise SystemExit(f"lock: {len(strays)} resolved distribution(s) the bundle's manifest does not list (their "
                             f"sha256 is none of its files'; nothing was installed): {'; '.join(sorted(strays))}")
    lines = sorted(f"{name}=={version} --hash=sha256:{sha}" for name, version, sha, _item in locked)
    Path(lock).write_text("# hvdcluster: the environment's packages, locked with hashes\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:4])
