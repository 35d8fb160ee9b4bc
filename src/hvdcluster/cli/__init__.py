"""The ``hvdcluster`` command: parse, call, render, exit code. Nothing else lives here.

Every argument is checked before anything runs or is written: a bad ``-o``, ``--limit``, ``--tags`` or
``-np`` is one line naming the argument and exit code 2, like a mistake in hosts.yaml.

One module per command (:mod:`.init`, :mod:`.plan` with ``inventory``, :mod:`.up` with :mod:`.rolling` for
``up --rolling``, :mod:`.bundle`, :mod:`.check`, :mod:`.health`, :mod:`.run`, :mod:`.preflight`); what they share in
:mod:`.common` (arguments, loading) and :mod:`.stages` (the stages of a converge, from hosts.yaml to the summary, in
the order :mod:`.up` takes them); what `up` repairs in :mod:`hvdcluster.repair`, plain functions.
"""

from __future__ import annotations

import sys

from ..errors import HvdError
from ..output import guarded_output
from .parser import build_parser


def _cut_job(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """``run``'s job: every word after its first ``--``, kept out of argparse, which would read HOSTS from it."""
    if argv[:1] == ["run"] and "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1:]
    return argv, None


def _what_to_write(command: str, extra: list[str]) -> str:
    """A usage error that says what to write instead: for `run`, the job's words go after ``--``."""
    words = " ".join(extra)
    if command == "run" and all(word.startswith("-") for word in extra):
        return (f"run: {words} is not an option of run (see `hvdcluster run --help`); hosts.yaml is HOSTS, and the "
                f"job's own options go after `--`: write `hvdcluster run HOSTS [options] -- python train.py {words}`")
    if command == "run":
        return (f"run: {words!r} is not an option of run: the job's command goes after `--`: write "
                f"`hvdcluster run HOSTS [options] -- {words}`")
    return f"{command}: unrecognized arguments: {words} (see `hvdcluster {command} --help`)"


def main(argv: list[str] | None = None) -> int:
    with guarded_output():  # every path to the terminal: no control sequence a node or a file supplied passes
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    argv, job = _cut_job(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if job is not None:
        args.job = job
    try:
        if extra:
            raise HvdError(_what_to_write(args.command, extra))
        return args.func(args)
    except HvdError as err:
        print(f"hvdcluster: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("hvdcluster: interrupted", file=sys.stderr)
        return 130
