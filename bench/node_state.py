"""Benchmark (prints figures, asserts nothing): one look at a node (`hvd_node_state`) on a real Python env.

Runs the module as Ansible does (its file, the arguments as JSON on stdin) against an env on this machine, by
default the one running this script, in check mode, three times, and prints the module's own reading time
(``seconds`` in its result, best and median) with the env's size: distributions, RECORD lines, files the RECORDs
list. The unit tier proves what the look reads (tests/unit/plugins/modules/test_hvd_node_state.py: every RECORD and
the lock hashed once, no installed file hashed); this prints what that costs. Add ``--deep`` for the sha256 of every
file.

Run from the checkout:  .venv/bin/python bench/node_state.py [--prefix PREFIX] [--deep]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BOOT = ("import sys, runpy; sys.path.insert(0, sys.argv[1]); "
        "sys.argv = sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')")


def look(prefix: str, deep: bool) -> tuple[float, float, dict]:
    args = {"cluster": "bench", "env_prefix": prefix, **({"deep": True} if deep else {}), "_ansible_check_mode": True}
    start = time.monotonic()
    module = ROOT / "plugins" / "modules" / "hvd_node_state.py"
    proc = subprocess.run([sys.executable, "-c", BOOT, str(ROOT / "collections"), str(module)],
                          input=json.dumps({"ANSIBLE_MODULE_ARGS": args}), capture_output=True, text=True)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"hvd_node_state failed (rc {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    result = json.loads(proc.stdout)
    return result["seconds"], wall, result["state"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prefix", default=sys.prefix, help="the env to look at (default: %(default)s)")
    parser.add_argument("--deep", action="store_true", help="hash every file the RECORDs list (check --deep)")
    options = parser.parse_args()
    prefix = Path(options.prefix)
    infos = sorted(prefix.glob("lib/python*/site-packages/*.dist-info"))
    records = [line for info in infos if (info / "RECORD").exists()
               for line in (info / "RECORD").read_text(errors="replace").splitlines() if line.strip()]
    hashed = sum(1 for line in records if ",sha256=" in line)
    runs = [look(str(prefix), options.deep) for _ in range(3)]
    reading = sorted(seconds for seconds, _, _ in runs)
    wall = sorted(wall for _, wall, _ in runs)
    state = runs[-1][2]
    print(f"env {prefix}: {len(infos)} distributions, {len(records)} RECORD lines ({hashed} with a sha256)")
    print(f"hvd_node_state{' --deep' if options.deep else ''}: reading best {reading[0]:.3f} s, "
          f"median {statistics.median(reading):.3f} s; with the interpreter's start best {wall[0]:.2f} s")
    print(f"env.files: {state.get('env.files')}")


if __name__ == "__main__":
    main()
