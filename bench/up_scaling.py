"""Benchmark (prints figures, asserts nothing): what a cold and a no-op `hvdcluster up` cost.

  cold up, 1 node   empty controller cache: builds the env and the Horovod wheel
  cold up, 2 nodes  empty controller cache again; the build happens once, so the ratio should stay near 1
                    (target <= 1.3)
  no-op up, 2 nodes the converged cluster again, three times (target <= 30 s, changed=0)

Run from the checkout after tests/setup.sh:  .venv/bin/python bench/up_scaling.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchargs import arguments  # noqa: E402
from tests.lab.cluster import Lab  # noqa: E402
from tests.lab.images import build_image  # noqa: E402
from tests.lab.stacks import cpu_stack  # noqa: E402

STACK = cpu_stack()


def main() -> None:
    arguments(__doc__)  # -h/--help: the docstring, before any lab is started
    build_image()
    with tempfile.TemporaryDirectory(prefix="hvd-bench-") as tmp:
        work = Path(tmp)
        one = Lab("bench1", 1, work / "one", slots=2, stack=STACK)
        one.up()
        cold1, _ = one.timed_up(work / "cache1")
        one.down()

        two = Lab("bench2", 2, work / "two", slots=2, stack=STACK)
        two.up()
        cold2, _ = two.timed_up(work / "cache2")
        noops = []
        for _ in range(3):  # a 2-core machine is noisy: the best and the median of three
            seconds, doc = two.timed_up(work / "cache2")
            noops.append((seconds, sum(h["changed"] for h in doc["hosts"].values())))
        two.down()

    noop = min(s for s, _ in noops)
    median = sorted(s for s, _ in noops)[1]
    changed = max(c for _, c in noops)
    print(f"cold up, 1 node:   {cold1:7.1f} s")
    print(f"cold up, 2 nodes:  {cold2:7.1f} s")
    print(f"ratio 2/1:         {cold2 / cold1:7.2f}   (target <= 1.3)")
    print(f"no-op up, 2 nodes: {noop:7.1f} s   best of 3 (median {median:.1f} s)   changed={changed}"
          "   (target <= 30 s, changed=0)")


if __name__ == "__main__":
    main()
