"""Benchmark (prints figures, asserts nothing): the day-2 loop on one drifted node of a 3-node cluster.

  converge     3 nodes (the controller cache is used: the env and the wheel are built only when missing)
  per drift    check (detect) + up (repair on the fast path, the post-flight proving every node, the read-back
               of the loop contract) + check again; target (issue 54): detect + repair + prove <= 20 s
  drifts       an added .pth in the env (taken out: hvd_env_prune), a wrong IP in the /etc/hosts block (hvd_base),
               an unheld package (hvd_openmpi), a removed Horovod (the same wheel installed again)

  AGAINST      a git revision: each drift is repaired twice in turn on the same lab, by the checkout and by that
               revision's hvdcluster and Ansible content (bench/against.py), each after an untimed `up` of its own
               (a content's first `up` after the other's sees its inputs changed and converges every node in full)

Run from the checkout after tests/setup.sh:  .venv/bin/python bench/repair_figures.py [AGAINST]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from against import contents, environment  # noqa: E402
from benchargs import arguments  # noqa: E402
from tests.lab.cluster import Lab  # noqa: E402
from tests.lab.images import build_image  # noqa: E402
from tests.lab.stacks import cpu_stack  # noqa: E402

STACK = cpu_stack()
HVDCLUSTER = str(Path(sys.executable).parent / "hvdcluster")
SITE = "/opt/hvd/env/lib/python3.11/site-packages"
DRIFTS = {
    "a .pth added to the env": f"echo 'import os' > {SITE}/zz-hook.pth",
    "a wrong IP in the /etc/hosts block": ("sed 's/^[0-9.]* node3 /10.99.99.99 node3 /' /etc/hosts > /root/h "
                                           "&& cat /root/h > /etc/hosts"),
    "Open MPI unheld": "apt-mark unhold openmpi-bin",
    "Horovod removed": "/opt/hvd/env/bin/pip uninstall -y -q horovod",
}


def timed(lab: Lab, *args: str, content: Path | None = None) -> tuple[float, int, dict]:
    start = time.monotonic()
    proc = subprocess.run([HVDCLUSTER, *args, "--json"], cwd=lab.workdir, env=environment(content),
                          capture_output=True, text=True)
    seconds = time.monotonic() - start
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        sys.exit(f"hvdcluster {' '.join(args)}: no JSON (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
    return seconds, proc.returncode, doc


def main() -> None:
    args = arguments(__doc__)  # -h/--help: the docstring, before any lab is started
    build_image()
    with contents(args[0] if args else None) as runs_of, tempfile.TemporaryDirectory(prefix="hvd-bench-") as tmp:
        lab = Lab("benchr", 3, Path(tmp), slots=1, stack=STACK)
        lab.up()
        try:
            seconds, rc, _ = timed(lab, "up", "hosts.yaml")
            print(f"converge, 3 nodes: {seconds:.1f} s (rc {rc})")
            for name, command in DRIFTS.items():
                for label, content in runs_of.items():
                    if len(runs_of) > 1:  # untimed: the other content's inputs differ, so its first up converges all
                        timed(lab, "up", "hosts.yaml", content=content)
                    lab.exec(2, "sh", "-c", command)
                    detect, rc1, _ = timed(lab, "check", "hosts.yaml", content=content)
                    repair, rc2, up = timed(lab, "up", "hosts.yaml", content=content)
                    again, rc3, _ = timed(lab, "check", "hosts.yaml", content=content)
                    total = detect + repair
                    print(f"{name} [{label}]: check {detect:.1f} s (rc {rc1}), up {repair:.1f} s (rc {rc2}, repaired "
                          f"{up.get('converged')}), check again {again:.1f} s (rc {rc3}); detect + repair + prove "
                          f"{total:.1f} s (target <= 20 s)")
        finally:
            lab.down()


if __name__ == "__main__":
    main()
