"""What every benchmark script does with its command line first: ``-h``/``--help`` prints the script's own docstring
(what it measures, how to run it) and exits 0, before any lab is started or anything is built."""

from __future__ import annotations

import sys


def arguments(doc: str | None) -> list[str]:
    """The script's arguments (``sys.argv[1:]``); with ``-h`` or ``--help`` among them, ``doc`` printed and exit 0."""
    if any(arg in ("-h", "--help") for arg in sys.argv[1:]):
        print((doc or "").strip())
        sys.exit(0)
    return sys.argv[1:]
