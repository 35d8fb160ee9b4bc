"""The bounded YAML loader: a regular file of bounded size, composed into a node tree whose nesting, aliases
and merges are bounded too, so a hostile document is one SpecError, never a hang or a RecursionError."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

from ..errors import SpecError

MAX_FILE_BYTES = 1 << 20  # hosts.yaml and the SSH key; a hosts.yaml of 1000 hosts is about 100 KiB
MAX_DEPTH = 64  # nesting of mappings and lists, aliases followed
MAX_NODES = 100_000  # values in the document with every alias and merge expanded


class FileProblem(Exception):
    """Why a file cannot be read as a small regular file; ``str()`` is the message."""


_FILE_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def read_regular_file(path: str, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; :class:`FileProblem` otherwise.

    Opened non-blocking and judged by ``fstat`` before a byte is read: a FIFO, a device (``/dev/zero``) or a
    directory is refused at once instead of blocking or reading forever.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise FileProblem(f"cannot read the file: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")
            raise FileProblem(f"cannot read the file: it is {kind}, not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 16, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise FileProblem(f"cannot read the file: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if size > limit:
        shown = f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit >> 10} KiB"
        raise FileProblem(f"the file is larger than {shown}; is it the right file?")
    return b"".join(chunks)


_TAG = "tag:yaml.org,2002:"
_STR, _INT, _FLOAT, _BOOL, _NULL = (_TAG + name for name in ("str", "int", "float", "bool", "null"))
_MAP, _SEQ, _MERGE = _TAG + "map", _TAG + "seq", _TAG + "merge"


@dataclass(frozen=True)
class _Context:
    path: str  # shown in errors
    base_dir: str  # relative local paths resolve against this
    lines: dict[str, int] = field(default_factory=dict)  # field path -> 1-based line of its value

    def error(self, node: Node, field: str, message: str) -> SpecError:
        mark = node.start_mark
        return SpecError(self.path, mark.line + 1, mark.column + 1, field, message)


class _TooMuch(Exception):
    """A bound of the loader was passed at ``mark``."""

    def __init__(self, mark: yaml.Mark, message: str) -> None:
        super().__init__(message)
        self.mark = mark
        self.message = message


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader with the nesting bounded *while* composing.

    PyYAML composes recursively: a document nested a few thousand levels deep would end in a
    RecursionError before any validator sees it.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node:  # noqa: D102 - PyYAML's hook
        if self.check_event(yaml.AliasEvent):
            return super().compose_node(parent, index)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _TooMuch(self.peek_event().start_mark, f"nested more than {MAX_DEPTH} levels deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _compose(ctx: _Context, text: str) -> Node | None:
    """Parse YAML into a node tree; syntax errors become SpecErrors at the problem mark."""
    try:
        return yaml.compose(text, Loader=_Loader)
    except _TooMuch as exc:
        raise SpecError(ctx.path, exc.mark.line + 1, exc.mark.column + 1, "<yaml>", exc.message) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = exc.problem or exc.context or "invalid YAML"
        if exc.problem and exc.context:
            where = f" (line {exc.context_mark.line + 1})" if exc.context_mark else ""
            message = f"{exc.context}{where}: {exc.problem}"
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        raise SpecError(ctx.path, line, column, "<yaml>", message) from None
    except yaml.reader.ReaderError as exc:
        before = text[: exc.position]
        line, column = before.count("\n") + 1, exc.position - (before.rfind("\n") + 1) + 1
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        raise SpecError(ctx.path, line, column, "<yaml>", f"control character #x{code:04x} is not allowed") from None
    except yaml.YAMLError as exc:  # pragma: no cover - every PyYAML error above carries a position
        raise SpecError(ctx.path, 1, 1, "<yaml>", str(exc)) from None


def _children(node: Node) -> list[Node]:
    if isinstance(node, MappingNode):
        return [child for pair in node.value for child in pair]
    if isinstance(node, SequenceNode):
        return list(node.value)
    return []


def _check_expansion(ctx: _Context, root: Node | None) -> None:
    """Refuse a document whose aliases refer to themselves, or expand too deep or too far.

    The composed tree shares the node an alias names, so it is small however often an alias is used; the
    validators below walk it *expanded*. Before they do, one walk over the distinct nodes counts the expanded
    size and depth of each (a merge-key bomb of a few hundred bytes expands to hundreds of millions of values)
    and finds cycles (``&a [*a]``, ``&m {<<: *m}``), each reported at the node where it starts.
    """
    if root is None:
        return
    size: dict[int, int] = {}
    height: dict[int, int] = {}
    open_nodes: set[int] = set()
    todo: list[tuple[Node, bool]] = [(root, False)]
    while todo:
        node, finished = todo.pop()
        key = id(node)
        if finished:
            open_nodes.discard(key)
            children = _children(node)
            size[key] = 1 + sum(size[id(child)] for child in children)
            height[key] = 1 + max((height[id(child)] for child in children), default=0)
            if size[key] > MAX_NODES:
                message = f"with its aliases expanded this holds more than {MAX_NODES} values (an alias bomb?)"
                raise ctx.error(node, "<yaml>", message)
            if height[key] > MAX_DEPTH:
                message = f"with its aliases followed this is nested more than {MAX_DEPTH} levels deep"
                raise ctx.error(node, "<yaml>", message)
            continue
        if key in size:
            continue
        if key in open_nodes:
            message = "an alias refers to the mapping or list that contains it (a recursive structure)"
            raise ctx.error(node, "<yaml>", message)
        open_nodes.add(key)
        todo.append((node, True))
        todo.extend((child, False) for child in _children(node))
