"""Benchmark (prints figures, asserts nothing): what a rolling change costs over a plain `up` on 3 nodes, no job
running (issue 24's target: <= 1.3x).

The change is a real one: hosts.yaml adds a package to the env (`six`), or takes it out again, so every run
installs another env and Horovod wheel on every node (both built once, in the warm-up, then taken from the
controller cache, as on a cluster where the first batch built them).

  converge     3 nodes (the controller cache is used: the env and the wheel are built only when missing)
  warm-up      up with the package, up without it (each env and Horovod build lands in the cache)
  then, REPEAT times each, every run flipping the package:
    up                                 every node changed in one run (the roles from hvd_pyenv on: inputs.change)
    up --rolling --batch 1             one node at a time: 3 runs, each proven with the nodes done before it
    up --rolling --batch 2             the first two, then the third: 2 runs
    up --rolling --batch 100%          the 3 nodes in one batch: 1 run, plus the looks for jobs and the marks
  and, on the cluster in sync (nothing to change): up and up --rolling --batch 1 (one read of every node each)

With --cold, the change must be built, as the first roll of a new env is: every run adds a version of `six` no run
before it used, with an empty controller cache of its own, so each one builds the env and compiles Horovod (on the
first node; in a roll, in the first batch) before it installs them:
    up                                 built, then every node changed in one run
    up --rolling --batch 1             built by the canary's batch, then one node at a time

--quick (warm only): up and up --rolling --batch 1, once each after the warm-up.

Run from the checkout after tests/setup.sh:  .venv/bin/python bench/rolling.py [--cold|--quick] [REPEAT]   (default 3,
1 cold)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchargs import arguments  # noqa: E402
from tests.lab.cluster import Lab  # noqa: E402
from tests.lab.images import build_image  # noqa: E402
from tests.lab.stacks import TORCH  # noqa: E402

BASE = [TORCH]
HVDCLUSTER = str(Path(sys.executable).parent / "hvdcluster")
RUNS = {
    "up": [],
    "up --rolling --batch 1": ["--rolling", "--batch", "1", "--poll", "1"],
    "up --rolling --batch 2": ["--rolling", "--batch", "2", "--poll", "1"],
    "up --rolling --batch 100%": ["--rolling", "--batch", "100%", "--poll", "1"],
}


# --cold: one version of six per run, none used by an earlier run (so no cache and no node holds its build).
COLD_SIX = ["1.16.0", "1.15.0", "1.14.0", "1.13.0", "1.12.0", "1.11.0"]


def stack(with_six: bool | str) -> dict:
    six = ["six==1.16.0"] if with_six is True else [f"six=={with_six}"] if with_six else []
    return {"python": {"packages": BASE + six}, "horovod": {"frameworks": ["pytorch"]}}


def timed(lab: Lab, *args: str) -> tuple[float, int]:
    start = time.monotonic()
    proc = subprocess.run([HVDCLUSTER, "up", "hosts.yaml", *args], cwd=lab.workdir, env=os.environ,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-3000:])
    return time.monotonic() - start, proc.returncode


def flip(lab: Lab) -> None:
    lab.stack = stack("six==1.16.0" not in lab.stack["python"]["packages"])
    lab.write_hosts_yaml()


def cold(lab: Lab, tmp: Path, repeat: int) -> None:
    """Each run builds its change (an env no cache holds, and Horovod for it) before it installs it."""
    versions = iter(COLD_SIX)
    for round_ in range(repeat):
        seconds: dict[str, float] = {}
        for name in ("up", "up --rolling --batch 1"):
            version = next(versions)
            lab.stack = stack(version)
            lab.write_hosts_yaml()
            seconds[name], _ = lab.timed_up(tmp / f"cold-cache-{version}", *RUNS[name])  # a failed run exits
            print(f"  {name} (six {version}: the env and Horovod built, then installed): {seconds[name]:.1f} s",
                  flush=True)
        print(f"round {round_ + 1}: up --rolling --batch 1 = {seconds['up --rolling --batch 1'] / seconds['up']:.2f}x up"
              " when the change must be built", flush=True)


def warm(lab: Lab, repeat: int, runs: dict[str, list[str]]) -> None:
    """Each run installs a change the controller cache holds (built by the warm-up)."""
    for _ in range(2):
        flip(lab)
        seconds, rc = timed(lab)
        print(f"warm-up (the env {'with' if 'six==1.16.0' in lab.stack['python']['packages'] else 'without'}"
              f" six): {seconds:.1f} s (rc {rc})")
    best: dict[str, float] = {}
    for _ in range(repeat):
        for name, args in runs.items():
            flip(lab)
            seconds, rc = timed(lab, *args)
            best[name] = min(best.get(name, seconds), seconds)
            print(f"  {name} (env changed): {seconds:.1f} s (rc {rc})")
    base = best["up"]
    for name, seconds in best.items():
        print(f"{name}, env changed: best of {repeat} {seconds:.1f} s = {seconds / base:.2f}x up")
    for name, args in (("up", []), ("up --rolling --batch 1", RUNS["up --rolling --batch 1"])):
        seconds, rc = timed(lab, *args)
        print(f"{name}, nothing to change: {seconds:.1f} s (rc {rc})")


def main() -> None:
    arguments(__doc__)  # -h/--help: the docstring, before any lab is started
    args = sys.argv[1:]
    is_cold, quick = args[:1] == ["--cold"], args[:1] == ["--quick"]
    args = args[1:] if is_cold or quick else args
    repeat = int(args[0]) if args else (1 if is_cold or quick else 3)
    runs = {k: v for k, v in RUNS.items() if k in ("up", "up --rolling --batch 1")} if quick else RUNS
    build_image()
    with tempfile.TemporaryDirectory(prefix="hvd-bench-") as tmp:
        lab = Lab("benchroll", 3, Path(tmp), slots=1, stack=stack(False))
        lab.up()
        try:
            seconds, rc = timed(lab)
            print(f"converge, 3 nodes: {seconds:.1f} s (rc {rc})", flush=True)
            if is_cold:
                cold(lab, Path(tmp), repeat)
            else:
                warm(lab, repeat, runs)
        finally:
            lab.down()

if __name__ == "__main__":
    main()
