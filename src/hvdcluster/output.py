"""What hvdcluster prints, made safe: text a node, a bundle or a file supplied never reaches the terminal as a control
sequence (:func:`printable`, the CLI's guarded stdout and stderr), and the JSON documents the commands' ``--json``
writes (:func:`dump_json`)."""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
from collections.abc import Iterable, Iterator
from typing import IO, Any

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetException

from .redact import redact_text

# How wide one value is shown on a line of a report (show).
VALUE_WIDTH = 60


# What a terminal would act on rather than show: ESC sequences (CSI with its parameters, OSC/DCS/APC/PM/SOS strings up
# to their terminator, two-character escapes), their 8-bit forms (CSI 0x9b, OSC 0x9d, ...) and every other C0 or C1
# control and DEL. Nodes supply much of what is printed (package names and versions, task messages, findings).
_TERMINAL_CONTROL = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"  # CSI ... final byte
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)"  # OSC, DCS, SOS, PM, APC strings
    r"|\x1b[ -/]*[0-~]?"  # other escapes (ESC c, ESC ( B, ...)
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]"  # the rest of C0 (tab and newline kept), DEL, C1, line separators
)


def printable(text: Any, *, newlines: bool = True) -> str:
    """``text`` as a terminal shows it and never acts on it: escape sequences removed, any other control character
    written as ``\\xNN`` (tab kept; newline kept where ``newlines``, else a space). Everything progress prints passes
    here."""
    def escape(match: re.Match[str]) -> str:
        found = match.group()
        if len(found) > 1 or found in "\x1b\x9b":
            return ""
        return f"\\x{ord(found):02x}" if ord(found) < 0x100 else f"\\u{ord(found):04x}"

    text = _TERMINAL_CONTROL.sub(escape, str(text))
    return text if newlines else text.replace("\n", " ")


class PrintableStream(io.TextIOBase):
    """A text stream that passes everything written to it through :func:`printable` (and the credentials of URLs
    through :func:`hvdcluster.redact.redact_text`): the CLI's stdout and stderr (``hvdcluster.cli.main``), so no string a
    node, a bundle or a file supplied reaches the terminal as a control sequence, and no URL's secret is shown,
    whichever path prints it. :attr:`raw` is the stream below, for the console's own cursor movements."""

    def __init__(self, raw: IO[str]) -> None:
        super().__init__()
        self.raw = raw

    def write(self, text: str) -> int:
        self.raw.write(printable(redact_text(text)))
        return len(text)

    def flush(self) -> None:
        self.raw.flush()

    def isatty(self) -> bool:
        return self.raw.isatty()

    def fileno(self) -> int:
        return self.raw.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.raw, "encoding", "utf-8")


@contextlib.contextmanager
def guarded_output() -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` behind :class:`PrintableStream` while the block runs."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (stream if isinstance(stream, PrintableStream) else PrintableStream(stream)
                              for stream in saved)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = saved


def dump_json(stream: IO[str], document: dict[str, Any]) -> None:
    json.dump(document, stream, indent=2, sort_keys=False)
    stream.write("\n")


def fold(nodes: Iterable[str]) -> str:
    """``gpu01 .. gpu16`` -> ``gpu[01-16]``, the way ``clush -b`` writes node sets."""
    names = list(nodes)
    try:
        return str(NodeSet.fromlist(names, resolver=RESOLVER_NOGROUP))
    except NodeSetException:  # a name NodeSet cannot parse: list them as they are
        return ",".join(names)


def show(value: Any, width: int = VALUE_WIDTH) -> str:
    """``value`` on one line, at most ``width`` wide: both ends kept where it is longer (digests differ anywhere, paths
    at the end)."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = value if value else '""'
    else:
        text = json.dumps(value)
    text = " ".join(text.split())  # one line
    if len(text) > width:  # keep both ends: digests differ anywhere, paths at the end
        head = (width - 3) * 2 // 3
        text = text[:head] + "..." + text[-(width - 3 - head):]
    return text
