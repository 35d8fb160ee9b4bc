"""``hvdcluster init``: write a commented example hosts.yaml."""

from __future__ import annotations

import argparse
import stat
from importlib import resources
from pathlib import Path

from ..errors import HvdError
from .common import EXIT_OK


def cmd_init(args: argparse.Namespace) -> int:
    target = Path(args.path)
    if target.is_dir():
        raise HvdError(f"init: {target} is a folder; name the file to write, e.g. {target / 'hosts.yaml'}")
    folder = target.parent
    if not folder.is_dir():
        problem = "is not a folder" if folder.exists() else "does not exist"
        raise HvdError(f"init: {target}: folder {folder} {problem}; create it first or name another path")
    if target.exists() or target.is_symlink():
        if not args.force:
            raise HvdError(f"{target}: exists; pass --force to overwrite it")
        if not stat.S_ISREG(target.lstat().st_mode):
            raise HvdError(f"init: {target} is not a regular file; name a file to write")
    try:
        target.write_text(resources.files("hvdcluster.data").joinpath("hosts.example.yaml").read_text())
    except OSError as exc:
        raise HvdError(f"init: cannot write {target}: {exc.strerror or exc}") from None
    print(f"wrote {target}: edit the hosts, then run `hvdcluster up {target}`")
    return EXIT_OK
