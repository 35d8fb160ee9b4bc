"""hvd_openmpi's look (roles/hvd_openmpi/files/look.py) run as the role runs it, against a stand-in `ompi_info` and
`mpirun` on the PATH: it keeps of `ompi_info --parsable` exactly the lines the role reads (the same prefixes as the
role's own filter of them), so the rest (about 20 KB a node) never travels to the controller; asked to judge, it
fails (exit 3, why on stderr) where mpirun or orted is missing from that PATH or the version is not the one asked for,
and judges nothing in check mode."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROLE = Path(__file__).resolve().parents[2] / "roles" / "hvd_openmpi"
LINES = ["package:Open MPI Debian", "ompi:version:full:4.1.4", "ompi:version:repo:v4.1.4", "mpi-api:version:full:3.1.0",
         "ompi:config:fortran:mpif.h:yes", "mca:hwloc:hwloc201:version:api:2.1.0", "mca:btl:vader:param:x:value:1",
         *(f"mca:coll:tuned:param:p{i}:value:{i}" for i in range(400))]


def look(tmp_path: Path, *args: str, programs: tuple[str, ...] = ("mpirun", "orted")) -> subprocess.CompletedProcess:
    """look.py as the role runs it (python3 -I -c SOURCE CMA_SOURCE VERSION JUDGE), with a stand-in ompi_info and
    ``programs`` alone on the PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "ompi_info").write_text("#!/bin/sh\ncat <<'END'\n" + "\n".join(LINES) + "\nEND\n")
    for name in programs:
        (bin_dir / name).write_text("#!/bin/sh\n")
    for path in bin_dir.iterdir():
        path.chmod(0o755)
    return subprocess.run([sys.executable, "-I", "-c", (ROLE / "files" / "look.py").read_text(), "print('cma')", *args],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin"})


def test_the_look_keeps_the_ompi_info_lines_the_role_reads(tmp_path: Path) -> None:
    proc = look(tmp_path, "", "1")
    assert proc.returncode == 0, proc.stderr
    looked = json.loads(proc.stdout)
    tasks = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    (write,) = [t for t in tasks if t.get("name", "").startswith("Keep Open MPI's parameter file")]
    details = json.dumps(write)
    pattern = re.search(r"select\('match', '(\^\([^']+\))'\)", details).group(1)
    read = [line for line in LINES if re.match(pattern, line)]
    assert looked["info"]["rc"] == 0 and looked["info"]["stdout"].splitlines() == read
    assert read == LINES[1:6] and looked["which"]["rc"] == 0 and looked["cma"]["stdout"].strip() == "cma"


def test_the_look_fails_where_the_ranks_would_not_find_orted(tmp_path: Path) -> None:
    proc = look(tmp_path, "", "1", programs=("mpirun",))
    assert proc.returncode == 3
    assert proc.stderr.startswith("mpirun/orted not on the default PATH of a non-interactive SSH command (")
    assert "orted: command not found" in proc.stderr and json.loads(proc.stdout)["which"]["rc"] != 0


def test_the_look_fails_where_another_version_is_installed(tmp_path: Path) -> None:
    proc = look(tmp_path, "4.0", "1")
    assert (proc.returncode, proc.stderr.strip()) == (3, "Open MPI 4.1.4 is installed, 4.0 was asked for")


def test_a_version_is_matched_by_its_prefix_and_check_mode_judges_nothing(tmp_path: Path) -> None:
    assert look(tmp_path / "a", "4.1", "1").returncode == 0
    assert look(tmp_path / "b", "4", "1").returncode == 0
    assert look(tmp_path / "c", "4.1.4", "1").returncode == 0
    assert look(tmp_path / "d", "4.1.", "1").returncode == 3  # not a prefix of its parts
    missing = look(tmp_path / "e", "4.0", "0", programs=())
    assert missing.returncode == 0 and missing.stderr == ""
