"""hvd_openmpi's look (roles/hvd_openmpi/files/look.py) run as the role runs it, against a stand-in `ompi_info` and
`mpirun` on the PATH: it keeps of `ompi_info --parsable` exactly the lines the role reads (the same prefixes as the
role's own filter of them), so the rest (about 20 KB a node) never travels to the controller."""

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


def test_the_look_keeps_the_ompi_info_lines_the_role_reads(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ompi_info").write_text("#!/bin/sh\ncat <<'END'\n" + "\n".join(LINES) + "\nEND\n")
    for name in ("mpirun", "orted"):
        (bin_dir / name).write_text("#!/bin/sh\n")
    for path in bin_dir.iterdir():
        path.chmod(0o755)
    proc = subprocess.run([sys.executable, "-I", "-c", (ROLE / "files" / "look.py").read_text(), "print('cma')"],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    looked = json.loads(proc.stdout)
    tasks = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    (write,) = [t for t in tasks if t.get("name", "").startswith("Keep Open MPI's parameter file")]
    details = json.dumps(write)
    pattern = re.search(r"select\('match', '(\^\([^']+\))'\)", details).group(1)
    read = [line for line in LINES if re.match(pattern, line)]
    assert looked["info"]["rc"] == 0 and looked["info"]["stdout"].splitlines() == read
    assert read == LINES[1:6] and looked["which"]["rc"] == 0 and looked["cma"]["stdout"].strip() == "cma"
