"""Benchmark (prints figures, asserts nothing): Open MPI from source (`stack.mpi.source: source`), cold and cached.

  cold up, 2 nodes   a controller cache holding the env and the Horovod wheel but no Open MPI build: one node
                     configures, compiles and packs Open MPI, both install the archive
  the build          configure, make, make install (DESTDIR) and packing on the builder, from the run's events
  warm up, 2 nodes   fresh nodes, the same cache: nothing is built, every node unpacks the cached archive
  no-op up           the converged cluster again (fast path), changed=0

The tarball is Debian's unchanged upstream one (tests/debsrc.py: `openmpi_<version>.orig.tar.xz`). The cache is a
private copy of this machine's controller cache without its openmpi/ folder, so the real cache is left as it was.

Run from the checkout after tests/setup.sh:  .venv/bin/python bench/openmpi_source.py
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import sha256_of  # noqa: E402
from benchargs import arguments  # noqa: E402
from hvdcluster import paths  # noqa: E402
from tests.debsrc import orig_tarball  # noqa: E402
from tests.lab.cluster import Lab  # noqa: E402
from tests.lab.images import build_image  # noqa: E402
from tests.lab.stacks import cpu_stack  # noqa: E402

BUILD_TASKS = ("Configure (internal hwloc, libevent and PMIx, so nodes cannot disagree on them; for Slurm, the "
               "distro's)",
               "Compile (several minutes)", "Install into the staging folder (the tree every node gets at the prefix)",
               "Pack the staged tree - Open MPI")


def link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system
        shutil.copy2(src, dst)


def task_seconds(log: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for path in (Path(log).parent / "job_events").glob("*.json"):
        event = json.loads(path.read_text())
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and data.get("task") in BUILD_TASKS and data.get("duration"):
            out[data["task"]] = out.get(data["task"], 0.0) + float(data["duration"])
    return out


def main() -> None:
    arguments(__doc__)  # -h/--help: the docstring, before any lab is started
    build_image()
    tarball = Path(orig_tarball("openmpi"))
    version = tarball.name.split("_", 1)[1].split(".orig", 1)[0]
    stack = cpu_stack(mpi={"source": "source", "version": version, "url": str(tarball), "sha256": sha256_of(tarball)})
    real = paths.controller_cache()
    with tempfile.TemporaryDirectory(prefix="hvd-bench-") as tmp:
        work = Path(tmp)
        cache = work / "cache"
        cache.mkdir()
        for folder in ("envs", "horovod"):  # the env and the wheel warm: only Open MPI is built
            if (real / folder).is_dir():
                shutil.copytree(real / folder, cache / folder, copy_function=link_or_copy)
        cold_lab = Lab("bomc", 2, work / "cold", slots=2, stack=stack)
        cold_lab.up()
        cold, doc = cold_lab.timed_up(cache)
        build = task_seconds(doc["log"])
        noop, noop_doc = cold_lab.timed_up(cache)
        cold_lab.down()
        warm_lab = Lab("bomw", 2, work / "warm", slots=2, stack=stack)
        warm_lab.up()
        warm, warm_doc = warm_lab.timed_up(cache)
        warm_build = task_seconds(warm_doc["log"])
        warm_lab.down()
        [archive] = (cache / "openmpi").glob("openmpi-*.tar.zst")
        size = archive.stat().st_size

    print(f"Open MPI {version} from {tarball.name} ({tarball.stat().st_size / 2**20:.1f} MiB)")
    print(f"cold up, 2 nodes (env and wheel cached):  {cold:7.1f} s")
    for task in BUILD_TASKS:
        print(f"  {task[:60]:60s} {build.get(task, 0.0):7.1f} s")
    print(f"  the build, in all:                       {sum(build.values()):7.1f} s   (built once: one node)")
    print(f"no-op up, 2 nodes:                        {noop:7.1f} s   changed="
          f"{sum(h['changed'] for h in noop_doc['hosts'].values())}")
    print(f"warm up, 2 fresh nodes (all cached):      {warm:7.1f} s   built: {sum(warm_build.values()):.1f} s")
    print(f"packed build in the cache:                {size / 2**20:7.1f} MiB  ({archive.name})")


if __name__ == "__main__":
    main()
