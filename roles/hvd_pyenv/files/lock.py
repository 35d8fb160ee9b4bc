"""Turn pip's installation report (``pip install --dry-run --report``) into a lock with hashes.

Usage: python -I lock.py REPORT.json LOCK.txt

Every resolved distribution becomes ``name==version --hash=sha256:...``; the env is then installed with
``pip install --require-hashes --no-deps -r LOCK.txt``, so what was resolved is exactly what is installed and the
lock (and its sha256, which the nodes compare) names every file by content. A distribution whose hash pip did not
report is hashed from its local file; one with neither is refused.
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
    return found


def main(report: str, lock: str) -> None:
    items = json.loads(Path(report).read_text())["install"]
    lines = sorted(f"{i['metadata']['name'].lower()}=={i['metadata']['version']} --hash=sha256:{digest(i)}"
                   for i in items)
    Path(lock).write_text("# hvdcluster: the environment's packages, locked with hashes\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:3])
