"""Benchmark (prints figures, asserts nothing): Open MPI's build as hvd_openmpi runs it on its builder (configure with
the role's options, `make -j<cores>`, a serial `make install DESTDIR=...`) against changes tried for issue 54, in
turns: the wall time of each step and the staged tree's size and file count. The ways:
  role      the role's configure options as they are now
  tried     configure told `--disable-dependency-tracking` (no dependency file beside every object of a tree built
            once) and `make -j<cores> install`: not adopted (the same time)
  noromio   configure told `--disable-io-romio` (Open MPI 4.1 does MPI-IO with OMPIO on every filesystem by default;
            ROMIO is a fallback chosen by hand): not adopted (2 % less, within the noise)

On this machine, not in a node: Debian's unchanged upstream tarball (tests/debsrc.py: `openmpi_<version>.orig.tar.*`,
as test_openmpi_source.py builds it), the role's default configure options (roles/hvd_openmpi/defaults/main.yml) and
the same prefix layout. Needs gcc, g++, make and perl here.

Run from the checkout after tests/setup.sh:  .venv/bin/python bench/openmpi_build.py [ROUNDS] [WAY ...]
(default: 1 round of each way)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from benchargs import arguments  # noqa: E402

ROLE = ROOT / "roles" / "hvd_openmpi"
PREFIX = "/opt/hvd/openmpi-bench"
# name: (extra configure options, make install's -j)
WAYS = {"role": ([], False), "tried": (["--disable-dependency-tracking"], True), "noromio": (["--disable-io-romio"], False)}


def _options() -> list[str]:
    import yaml

    return yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())["hvd_openmpi_configure_options"]


def _timed(argv: list[str], cwd: Path) -> float:
    start = time.monotonic()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    return time.monotonic() - start


def build(tarball: Path, scratch: Path, extra: list[str], parallel_install: bool) -> dict:
    jobs = f"-j{os.cpu_count() or 2}"
    src = scratch / "src"
    with tarfile.open(tarball) as archive:
        archive.extractall(scratch, filter="data")
    [top] = [p for p in scratch.iterdir() if p.is_dir() and p.name.startswith("openmpi-")]
    top.rename(src)
    stage = scratch / "stage"
    out = {"configure": _timed(["./configure", f"--prefix={PREFIX}", *extra, *_options()], src),
           "make": _timed(["make", jobs], src)}
    out["install"] = _timed(["make", *([jobs] if parallel_install else []), "install", f"DESTDIR={stage}"], src)
    files = [p for p in stage.rglob("*") if p.is_file() and not p.is_symlink()]
    out["files"], out["mib"] = len(files), sum(p.stat().st_size for p in files) / 2**20
    return out


def main() -> None:
    arguments(__doc__)  # -h/--help: the docstring, before anything is fetched or built
    from tests.debsrc import orig_tarball

    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    ways = sys.argv[2:] or list(WAYS)
    unknown = [w for w in ways if w not in WAYS]
    if unknown:
        sys.exit(f"openmpi_build.py: unknown way {unknown[0]!r} (the ways: {', '.join(WAYS)})")
    tarball = orig_tarball("openmpi")
    print(f"Open MPI from {tarball.name}, make -j{os.cpu_count()}, {rounds} round(s) each, in turns")
    print(f"{'way':8s} {'configure':>10s} {'make':>8s} {'install':>8s} {'total':>8s} {'files':>6s} {'MiB':>7s}")
    for _ in range(rounds):
        for name in ways:
            extra, parallel_install = WAYS[name]
            with tempfile.TemporaryDirectory(prefix="ompi-bench-") as scratch:
                got = build(tarball, Path(scratch), extra, parallel_install)
            total = got["configure"] + got["make"] + got["install"]
            print(f"{name:8s} {got['configure']:9.1f}s {got['make']:7.1f}s {got['install']:7.1f}s {total:7.1f}s "
                  f"{got['files']:6d} {got['mib']:7.1f}", flush=True)


if __name__ == "__main__":
    main()
