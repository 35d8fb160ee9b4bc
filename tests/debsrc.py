"""Debian source packages for the tests, fetched without changing this machine's apt setup.

    python3 tests/debsrc.py openmpi          # prints the folder holding openmpi's .dsc, orig tarball and debian/

The deb-src lines are made from this machine's own apt sources (their URIs, suites and components), written into a
temporary folder and passed to apt with `-o Dir::...` options, so nothing under /etc/apt or /var/lib/apt changes.
Files are kept in the test cache (``$HVDCLUSTER_TEST_CACHE`` or ``~/.cache/hvdcluster-tests/debsrc/<package>``) and
reused while they are there; apt checks every file against the signed source index when it downloads it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def test_cache() -> Path:
    return Path(os.environ.get("HVDCLUSTER_TEST_CACHE") or Path.home() / ".cache" / "hvdcluster-tests")


@contextlib.contextmanager
def cache_lock(name: str):
    """Held while one test process fills or reads an entry of the test cache: suites run in parallel workers
    (pytest-xdist), and two of them may want the same entry at once."""
    path = test_cache() / "locks" / f"{name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _deb822_sources(text: str) -> list[dict[str, str]]:
    stanzas, current = [], {}
    for line in text.splitlines() + [""]:
        if not line.strip():
            if current:
                stanzas.append(current)
            current = {}
        elif not line.lstrip().startswith("#") and ":" in line:
            key, value = line.split(":", 1)
            current[key.strip().lower()] = value.strip()
    return stanzas


def source_lines() -> list[str]:
    """deb-src lines for every suite this machine's Debian sources name (one-line and deb822 formats)."""
    lines: list[str] = []
    etc = Path("/etc/apt")
    for path in sorted([etc / "sources.list", *sorted((etc / "sources.list.d").glob("*"))]):
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if path.suffix == ".sources":
            for stanza in _deb822_sources(text):
                if "deb" not in stanza.get("types", "").split() or stanza.get("enabled", "yes") == "no":
                    continue
                signed = stanza.get("signed-by", "")
                opts = f"[signed-by={signed}] " if signed.startswith("/") else ""
                for uri in stanza.get("uris", "").split():
                    for suite in stanza.get("suites", "").split():
                        lines.append(f"deb-src {opts}{uri} {suite} {stanza.get('components', 'main')}")
        elif path.suffix == ".list" or path.name == "sources.list":
            for line in text.splitlines():
                if re.match(r"^\s*deb\s", line):
                    lines.append(re.sub(r"^\s*deb\s", "deb-src ", line))
    if not lines:
        raise RuntimeError("no Debian apt sources found on this machine to derive deb-src lines from")
    return lines


def fetch(package: str) -> Path:
    """The folder with `package`'s source files (.dsc, orig tarball, Debian tarball): downloaded once, then reused.
    Where a security or updates suite's mirror lacks some file of its newest version, the release suites' version
    is taken instead."""
    with cache_lock(f"debsrc-{package}"):
        return _fetch(package)


def _fetch(package: str) -> Path:
    dest = test_cache() / "debsrc" / package
    if dest.is_dir() and list(dest.glob("*.dsc")) and (dest / ".complete").is_file():
        return dest
    lines = source_lines()
    release = [line for line in lines if not re.search(r"\s\S+-(security|updates|backports)\s", line)]
    try:
        _download(package, lines, dest)
    except subprocess.CalledProcessError:
        if release == lines:
            raise
        _download(package, release, dest)
    (dest / ".complete").write_text("ok\n")
    return dest


def _download(package: str, lines: list[str], dest: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="hvd-debsrc-") as tmp:
        work = Path(tmp)
        (work / "parts").mkdir()
        (work / "lists" / "partial").mkdir(parents=True)
        (work / "cache" / "archives" / "partial").mkdir(parents=True)
        (work / "sources.list").write_text("\n".join(lines) + "\n")
        opts = [f"-o=Dir::Etc::SourceList={work}/sources.list", f"-o=Dir::Etc::SourceParts={work}/parts",
                f"-o=Dir::State::Lists={work}/lists", f"-o=Dir::Cache={work}/cache",
                "-o=APT::Sandbox::User=root", "-o=Debug::NoLocking=1", "-q"]
        subprocess.run(["apt-get", *opts, "update"], check=True, capture_output=True, text=True)
        out = work / "out"
        out.mkdir()
        subprocess.run(["apt-get", *opts, "source", "--download-only", package], check=True, cwd=out,
                       capture_output=True, text=True)
        if dest.exists():
            shutil.rmtree(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(out, dest)


def orig_tarball(package: str) -> Path:
    """The upstream tarball Debian's source package carries (``<package>_<version>.orig.tar.*``)."""
    [found] = [p for p in fetch(package).glob(f"{package}_*.orig.tar.*") if not p.name.endswith(".asc")]
    return found


if __name__ == "__main__":
    print(fetch(sys.argv[1]))
