"""Benchmark (prints figures, asserts nothing): Slurm on 2 converged nodes (issue 53).

  first line   from a converged cluster to the first line of the first `hvdcluster run --slurm` job (srun --mpi=pmix,
               2 nodes x 1 task, a Python that prints), against the same through horovodrun (`run -np 2`)
  no-op up     `up` on the fast path and `up --full`, with Slurm configured and without (the same nodes, hosts.yaml's
               scheduler taken out and converged once); target: with Slurm within 10 % of without

The nodes are the packaged image (the roles' distro packages, not Slurm's); the controller cache is the shared one
(the env and Horovod's wheel are built only when missing).

Run from the checkout after tests/setup.sh:  .venv/bin/python bench/slurm.py [REPEATS]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchargs import arguments  # noqa: E402
from tests.cluster.conftest import SUDO_USER, share_the_cores  # noqa: E402
from tests.lab.cluster import Lab  # noqa: E402
from tests.lab.images import build_packaged_image  # noqa: E402
from tests.lab.stacks import cpu_stack  # noqa: E402

HVDCLUSTER = str(Path(sys.executable).parent / "hvdcluster")
SCHEDULER = {"kind": "slurm", "controller": "node1", "partition": "bench"}
PRINT = ["python", "-c", "import socket; print('first line', socket.gethostname(), flush=True)"]


def hvd(lab: Lab, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HVDCLUSTER, *args], cwd=lab.workdir, env=os.environ, capture_output=True, text=True)


def up(lab: Lab, *args: str) -> float:
    start = time.monotonic()
    proc = hvd(lab, "up", "hosts.yaml", "--json", *args)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"up {' '.join(args)} failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
    doc = json.loads(proc.stdout)
    changed = sum(h["changed"] for h in doc.get("hosts", {}).values())
    if args == ("--full",) and changed:
        print(f"  (up --full changed {changed} tasks)")
    if not args and doc.get("converged"):  # a no-op up that did not stay on the fast path: say why
        print(f"  (up converged {', '.join(doc['converged'])}: {json.dumps(doc.get('fast_path'))[:600]})")
    return seconds


def first_line(lab: Lab, *args: str) -> float:
    """Seconds from `hvdcluster run ARGS -- PRINT` starting to its first line on stdout."""
    start = time.monotonic()
    proc = subprocess.Popen([HVDCLUSTER, "run", "hosts.yaml", *args, "--", *PRINT], cwd=lab.workdir, env=os.environ,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    seconds = time.monotonic() - start
    proc.communicate()
    if "first line" not in line:
        sys.exit(f"run {' '.join(args)}: no first line (rc {proc.returncode}): {line!r}")
    return seconds


def median(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} s (of {', '.join(f'{v:.1f}' for v in values)})"


def main() -> None:
    arguments(__doc__)  # -h/--help: the docstring, before any lab is started
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    image = build_packaged_image()
    with tempfile.TemporaryDirectory(prefix="hvd-bench-") as tmp:
        lab = Lab("benchs", 2, Path(tmp), slots=1, stack=cpu_stack(), user=SUDO_USER, image=image,
                  scheduler=SCHEDULER)
        lab.up()
        share_the_cores(lab)
        try:
            print(f"converge, 2 nodes with Slurm: {up(lab):.1f} s")
            print(f"from the converged cluster to the first srun job's first line: {first_line(lab, '--slurm'):.1f} s"
                  f" (horovodrun: {first_line(lab, '-np', '2'):.1f} s)")
            with_slurm = {"up": [up(lab) for _ in range(repeats)], "up --full": [up(lab, "--full") for _ in range(repeats)]}
            lab.scheduler = {}
            lab.write_hosts_yaml()
            print(f"up without the scheduler (Slurm left running, no longer read): {up(lab):.1f} s")
            without = {"up": [up(lab) for _ in range(repeats)], "up --full": [up(lab, "--full") for _ in range(repeats)]}
            for what in with_slurm:
                ratio = statistics.median(with_slurm[what]) / statistics.median(without[what])
                print(f"no-op {what}: with Slurm {median(with_slurm[what])}, without {median(without[what])}: "
                      f"{(ratio - 1) * 100:+.0f} % (target within 10 %)")
        finally:
            lab.down()


if __name__ == "__main__":
    main()
