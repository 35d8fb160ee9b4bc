"""The labs' command: node images built, the demo's lab up or down.

    .venv/bin/python -m tests.lab build [--packaged] [--kernel]          # from the checkout's root
    .venv/bin/python -m tests.lab up   --name demo --nodes 3 --dir .demo   # writes .demo/hosts.yaml
    .venv/bin/python -m tests.lab down --name demo

``python tests/lab ...`` (the folder run as a script) works too.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if not __package__:  # run as `python tests/lab`: the checkout's root on the import path, as `-m` from it has it
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.lab.cluster import Lab  # noqa: E402
from tests.lab.images import build_image, build_kernel_image, build_packaged_image  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.lab", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["build", "up", "down"])
    parser.add_argument("--packaged", action="store_true",
                        help="build: also the image with the roles' distro packages (molecule horovod, gpu, conda)")
    parser.add_argument("--kernel", action="store_true",
                        help="build: also the image with a kernel image and its headers (molecule driver)")
    parser.add_argument("--name", default="demo")
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--dir", default=".demo", help="where hosts.yaml and the controller key go")
    args = parser.parse_args(argv)
    lab = Lab(args.name, args.nodes, Path(args.dir).resolve())
    if args.action == "build":
        if args.packaged:
            build_packaged_image()  # each variant builds the bare image under it too
        if args.kernel:
            build_kernel_image()
        if not (args.packaged or args.kernel):
            build_image()
    elif args.action == "up":
        build_image()
        print(lab.up())
    else:
        lab.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
