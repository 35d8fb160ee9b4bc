"""The ``hosts.yaml`` model and loader.

Loading happens in two steps. ``yaml.compose`` turns the text into a node tree in which every node keeps
its start mark; the validators below then walk that tree node by node and build frozen dataclasses. So
every mistake is reported as one :class:`~hvdcluster.errors.SpecError` naming the exact line, column and
field path (``hosts[1].port``, ``stack.mpi.source``; list indices are 0-based).

Scalars are judged by their YAML tag, not by Python's idea of their type: ``port: "22"`` is a string,
``port: true`` a boolean (neither is a port), and ``cuda: 12.10`` a float that YAML already read as 12.1,
so versions must be quoted. ``null`` for an optional field means "unset". Keys repeated in one mapping
are rejected (YAML would silently keep the last one); merge keys (``<<: *defaults``) are honoured.

The input is treated as hostile: only a regular file of at most 1 MiB is read (a FIFO, a device or a folder
is refused before a byte is read); nesting, aliases and merges are bounded, so an alias bomb, a recursive
alias or a deeply nested document is one SpecError, never a hang or a RecursionError. Every string is data:
control characters and Jinja delimiters (``{{``, ``{%``, ``{#``) are refused everywhere, URLs hold URL
characters only, the environment prefix is a safe absolute path outside the system folders, packages are
PEP 508 requirements (no pip options, no URLs), and the files named (SSH key, CA bundle) are read and judged:
a private key, PEM certificates.
"""

from __future__ import annotations

import base64
import binascii
import difflib
import hashlib
import hmac
import ipaddress
import os
import posixpath
import re
import ssl
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from .errors import SpecError

__all__ = ["ClusterSpec", "HostSpec", "JumpSpec", "KnownHost", "NetworkSpec", "SshSpec", "host_matches",
           "load", "loads", "parse_known_hosts"]

MAX_FILE_BYTES = 1 << 20  # hosts.yaml and the SSH key; a hosts.yaml of 1000 hosts is about 100 KiB
MAX_CA_BUNDLE_BYTES = 8 << 20  # a distribution's whole trust store is about 200 KiB
MAX_KNOWN_HOSTS_BYTES = 8 << 20  # ssh.known_hosts: 10 000 nodes with three keys each are about 4 MiB
MAX_DEPTH = 64  # nesting of mappings and lists, aliases followed
MAX_NODES = 100_000  # values in the document with every alias and merge expanded


# --------------------------------------------------------------------------------------------- model


@dataclass(frozen=True)
class JumpSpec:
    """A bastion the controller reaches every node through (``ssh.proxy_jump``)."""

    host: str  # how the controller reaches the bastion (IP or DNS name)
    port: int
    user: str
    identity: str | None  # the bastion's login key; None: ssh's defaults (agent, ~/.ssh)
    host_key: str  # "<type> <base64>": the bastion's own pinned host key


@dataclass(frozen=True)
class KnownHost:
    """One line of an OpenSSH known_hosts file."""

    marker: str  # "", "@revoked" or "@cert-authority"
    patterns: str  # host patterns as written ("a,[b]:2222,!c", "10.0.0.*") or one hashed name ("|1|salt|hash")
    key: str  # "<type> <base64>"
    line: int


@dataclass(frozen=True)
class KnownHostsFile:
    """``ssh.known_hosts``, read: where it is, its lines, and where hosts.yaml names it (for errors)."""

    path: str
    entries: tuple[KnownHost, ...]
    line: int
    column: int


@dataclass(frozen=True)
class SshSpec:
    """How the controller logs in to every node."""

    user: str = "root"
    port: int = 22  # default port for hosts that give none
    identity: str | None = None  # absolute path of an existing private key file
    become: bool | None = None  # None: derived, ``user != "root"`` (always a bool after construction)
    proxy_jump: JumpSpec | None = None  # reach the nodes only through this bastion
    known_hosts: str | None = None  # a known_hosts file pinning node host keys (absolute path; see HostSpec.host_keys)
    known_hosts_file: KnownHostsFile | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.become is None:
            object.__setattr__(self, "become", self.user != "root")


@dataclass(frozen=True)
class HostSpec:
    """One node. Every default is already applied."""

    name: str  # inventory name: a lower-case RFC 1123 hostname
    address: str  # how the controller reaches it (IP or DNS name)
    port: int  # controller's SSH port to it
    fabric_address: str  # how nodes reach each other
    fabric_port: int  # SSH port nodes use to reach it
    slots: int | None  # processes on this node; None: detected later
    line: int  # 1-based line in hosts.yaml where this host entry starts
    # The node's pinned host keys ("<type> <base64>"): its host_key, else the keys ssh.known_hosts holds for its
    # address and port. The controller then accepts no other key, from the first contact on; (): trusted on first use.
    host_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class NetworkSpec:
    """Corporate-network settings; every path is absolute and exists."""

    ca_bundle: str | None = None
    apt_proxy: str | None = None
    pip_index: str | None = None
    wheelhouse: str | None = None
    conda_channel: str | None = None  # a conda mirror (URL) or a local indexed channel folder: the only channel
    bundle: str | None = None  # an offline bundle folder (hvdcluster bundle): nodes install from it only
    bundle_sha256: str | None = None  # the sha256 of the bundle's manifest.yaml (its pin; or bundle_signers)
    bundle_signers: str | None = None  # an OpenSSH allowed-signers file: who may sign a bundle's manifest.yaml


@dataclass(frozen=True)
class ClusterSpec:
    """A validated ``hosts.yaml``."""

    path: str  # the hosts.yaml path as given
    cluster: str
    ssh: SshSpec
    hosts: tuple[HostSpec, ...]
    stack: dict[str, Any]  # only the keys the user wrote; versions as strings
    network: NetworkSpec
    set_hostname: bool = False
    # hosts.yaml line of each value written under ``stack`` ("stack.cuda", "stack.python.packages[0]"), so the
    # resolver can point at the line of a conflicting choice. Not part of the spec's value (compare=False).
    stack_lines: dict[str, int] = field(default_factory=dict, compare=False, repr=False)


# --------------------------------------------------------------------------------------------- entry points


def load(path: str | os.PathLike[str]) -> ClusterSpec:
    """Read and validate a ``hosts.yaml`` file; raise :class:`SpecError` on any mistake."""
    shown = os.fspath(path)
    try:
        data = read_regular_file(shown, MAX_FILE_BYTES)
    except FileProblem as exc:
        raise SpecError(shown, 1, 1, "<file>", str(exc)) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise SpecError(shown, line, column, "<file>", "the file is not valid UTF-8") from None
    return loads(text, shown)


def loads(text: str, path: str = "<string>") -> ClusterSpec:
    """Validate ``hosts.yaml`` text; relative local paths resolve against ``dirname(path)``.

    ``path`` is only used in error messages and for resolving paths (the default resolves them against the
    current directory); nothing is read from it.
    """
    ctx = _Context(path=path, base_dir=os.path.dirname(os.path.abspath(path)))
    if len(text) > MAX_FILE_BYTES:
        raise SpecError(path, 1, 1, "<file>", f"the file is larger than {MAX_FILE_BYTES >> 20} MiB")
    root = _compose(ctx, text)
    _check_expansion(ctx, root)
    return _cluster_spec(ctx, root)


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


# --------------------------------------------------------------------------------------------- plumbing

_TAG = "tag:yaml.org,2002:"
_STR, _INT, _FLOAT, _BOOL, _NULL = (_TAG + name for name in ("str", "int", "float", "bool", "null"))
_MAP, _SEQ, _MERGE = _TAG + "map", _TAG + "seq", _TAG + "merge"
_SCALARS = yaml.constructor.SafeConstructor()  # only its scalar converters are used

_Validator = Callable[["_Context", Node, str], Any]


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


def _join(parent: str, key: str) -> str:
    return f"{parent}.{key}" if parent else key


def _describe(node: Node) -> str:
    """What a node is, for "expected X, got Y" messages."""
    if isinstance(node, MappingNode):
        return "a mapping" if node.tag == _MAP else f"a mapping tagged {node.tag}"
    if isinstance(node, SequenceNode):
        return "a list" if node.tag == _SEQ else f"a list tagged {node.tag}"
    if node.tag == _NULL:
        return "null"
    if node.tag == _STR:
        return f"string {node.value!r}"
    kinds = {_INT: "integer", _FLOAT: "number", _BOOL: "boolean", _TAG + "timestamp": "date"}
    return f"{kinds.get(node.tag, f'a value tagged {node.tag}')} {node.value}"


def _expect(ctx: _Context, node: Node, field: str, what: str) -> SpecError:
    return ctx.error(node, field, f"expected {what}, got {_describe(node)}")


def _is_null(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.tag == _NULL


def _text(node: Node, *tags: str) -> str | None:
    """The scalar's text when the node is a scalar with one of ``tags``, else None."""
    if isinstance(node, ScalarNode) and node.tag in tags:
        return str(node.value)
    return None


# --------------------------------------------------------------------------------------------- mappings


def _mapping_node(ctx: _Context, node: Node, field: str, what: str = "a mapping") -> MappingNode:
    if not isinstance(node, MappingNode) or node.tag != _MAP:
        raise _expect(ctx, node, field, what)
    return node


def _pairs(ctx: _Context, node: MappingNode, field: str) -> dict[str, tuple[ScalarNode, Node]]:
    """The mapping's entries by key, after merge keys; a key written twice is an error."""
    own: dict[str, tuple[ScalarNode, Node]] = {}
    merged: dict[str, tuple[ScalarNode, Node]] = {}
    for key, value in node.value:
        if key.tag == _MERGE:
            for source in _merge_sources(ctx, value, field):
                for name, pair in _pairs(ctx, source, field).items():
                    merged.setdefault(name, pair)  # earlier merge sources win
            continue
        if not isinstance(key, ScalarNode):
            raise ctx.error(key, field or "<document>", "keys must be plain names, not lists or mappings")
        if key.value in own:
            first = own[key.value][0].start_mark.line + 1
            raise ctx.error(
                key,
                _join(field, key.value),
                f"duplicate key '{key.value}' (first on line {first}); YAML would silently keep only the last",
            )
        own[key.value] = (key, value)
    return merged | own  # explicit keys override merged ones


def _merge_sources(ctx: _Context, node: Node, field: str) -> list[MappingNode]:
    what = "a mapping or a list of mappings to merge ('<<')"
    if isinstance(node, SequenceNode):
        return [_mapping_node(ctx, item, field, what) for item in node.value]
    return [_mapping_node(ctx, node, field, what)]


def _unknown_key(ctx: _Context, key: ScalarNode, field: str, allowed: Iterable[str]) -> SpecError:
    allowed = list(allowed)
    written = key.value.lower()
    close = difflib.get_close_matches(written, allowed, n=1, cutoff=0.6)
    close += [name for name in allowed if written.startswith(f"{name}_")]  # cuda_version -> cuda
    hint = f"did you mean '{close[0]}'?" if close else f"allowed keys: {', '.join(allowed)}"
    return ctx.error(key, _join(field, key.value), f"unknown key '{key.value}' ({hint})")


def _fields(
    ctx: _Context, node: Node, field: str, allowed: Iterable[str], required: Iterable[str] = ()
) -> dict[str, Node]:
    """Validate a mapping's keys (unknown, duplicate, missing) and return its value nodes by key."""
    allowed = list(allowed)
    mapping = _mapping_node(ctx, node, field, f"a mapping (keys: {', '.join(allowed)})")
    pairs = _pairs(ctx, mapping, field)
    for name, (key, _value) in pairs.items():
        if name not in allowed:
            raise _unknown_key(ctx, key, field, allowed)
    for name in required:
        if name not in pairs:
            raise ctx.error(mapping, _join(field, name), f"required key '{name}' is missing")
    return {name: value for name, (_key, value) in pairs.items()}


def _get(
    ctx: _Context,
    fields: Mapping[str, Node],
    key: str,
    parent: str,
    validator: _Validator,
    default: Any = None,
) -> Any:
    """The validated value of an optional key; ``default`` when absent or null."""
    node = fields.get(key)
    if node is None or _is_null(node):
        return default
    return validator(ctx, node, _join(parent, key))


def _section(schema: Mapping[str, _Validator]) -> _Validator:
    """A validator for a mapping of optional keys, returning a plain dict of the keys written."""

    def validate(ctx: _Context, node: Node, field: str) -> dict[str, Any]:
        fields = _fields(ctx, node, field, schema)
        out = {}
        for key, value in fields.items():
            if not _is_null(value):
                ctx.lines[_join(field, key)] = value.start_mark.line + 1
                out[key] = schema[key](ctx, value, _join(field, key))
        return out

    return validate


# --------------------------------------------------------------------------------------------- scalars


# C0 and C1 control characters (newline, NUL, escape, ...) and the Unicode line and paragraph separators.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_TEMPLATE = re.compile(r"\{[{%#]")  # what starts a Jinja expression, statement or comment


def _string(ctx: _Context, node: Node, field: str) -> str:
    """A non-empty string that is data only: no control characters, nothing Jinja would evaluate."""
    value = _text(node, _STR)
    if value is None:
        hint = " (quote it)" if _text(node, _INT, _FLOAT, _BOOL) is not None else ""
        raise ctx.error(node, field, f"expected a string, got {_describe(node)}{hint}")
    if not value.strip():
        raise ctx.error(node, field, "must not be empty")
    if bad := _CONTROL.search(value):
        char = bad.group()
        name = {"\n": "a line break", "\r": "a carriage return", "\t": "a tab", "\x00": "a NUL byte",
                "\x1b": "an escape character"}.get(char, "a control character")
        raise ctx.error(node, field, f"contains {name} (U+{ord(char):04X}); write the value on one line, without it")
    if found := _TEMPLATE.search(value):
        raise ctx.error(
            node,
            field,
            f"contains '{found.group()}', which Ansible would evaluate as a template: hosts.yaml values are data,"
            " never code (write the literal value)",
        )
    return value


_DECIMAL = re.compile(r"-?(0|[1-9][0-9]*)")


def _integer(ctx: _Context, node: Node, field: str, what: str = "the number") -> int:
    """An integer written in plain decimal: YAML 1.1 also reads 02222 (octal), 0x16, 1_000, +22 and 1:30."""
    if not (isinstance(node, ScalarNode) and node.tag == _INT):
        raise _expect(ctx, node, field, "an integer")
    number = int(_SCALARS.construct_yaml_int(node))
    if not _DECIMAL.fullmatch(node.value):
        raise ctx.error(node, field, f"write {what} as a decimal number: YAML reads {node.value} as {number}")
    return number


def _boolean(ctx: _Context, node: Node, field: str) -> bool:
    if not (isinstance(node, ScalarNode) and node.tag == _BOOL):
        raise _expect(ctx, node, field, "true or false")
    return bool(_SCALARS.construct_yaml_bool(node))


def _port(ctx: _Context, node: Node, field: str) -> int:
    port = _integer(ctx, node, field, "the port")
    if not 1 <= port <= 65535:
        raise ctx.error(node, field, f"port {port} is out of range (1-65535)")
    return port


def _slots(ctx: _Context, node: Node, field: str) -> int:
    slots = _integer(ctx, node, field, "slots")
    if slots < 1:
        raise ctx.error(node, field, f"slots must be at least 1, got {slots} (leave it out to use the GPU count)")
    return slots


def _matching(pattern: str, description: str) -> _Validator:
    """A string validator for values that must match ``pattern`` entirely."""
    regex = re.compile(pattern)

    def validate(ctx: _Context, node: Node, field: str) -> str:
        value = _string(ctx, node, field)
        if not regex.fullmatch(value):
            raise ctx.error(node, field, f"{value!r} is not {description}")
        return value

    return validate


_cluster_name = _matching(
    r"[a-z0-9][a-z0-9_-]{0,62}", "a valid cluster name (lower-case letters, digits, '-' and '_'; at most 63)"
)
_user_name = _matching(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", "a valid user name")
_sha256_text = _matching(r"[0-9a-fA-F]{64}", "a sha256 digest (64 hexadecimal digits)")


def _sha256(ctx: _Context, node: Node, field: str) -> str:
    return str(_sha256_text(ctx, node, field)).lower()


def _version_like(pattern: str, example: str) -> _Validator:
    """Versions are strings; plain integers (``550``) are accepted, floats (``12.10``) are not."""
    regex = re.compile(pattern)

    def validate(ctx: _Context, node: Node, field: str) -> str:
        if isinstance(node, ScalarNode) and node.tag == _FLOAT:
            written = str(node.value)
            number = repr(float(_SCALARS.construct_yaml_float(node)))
            read = "a number" if number == written else number
            raise ctx.error(node, field, f'write versions as strings ("{written}"): YAML reads {written} as {read}')
        value = _text(node, _STR, _INT)
        if value is None or (node.tag == _INT and not value.isdigit()):
            raise _expect(ctx, node, field, f'a version string such as "{example}"')
        if not regex.fullmatch(value):
            raise ctx.error(node, field, f'{value!r} is not a version (write it like "{example}")')
        return value

    return validate


_version = _version_like(r"\d+(\.[0-9A-Za-z]+)*([+~-][0-9A-Za-z.+~-]+)?", "12.4")
_driver_version = _version_like(r"\d+(\.\d+){0,2}", "550")  # a branch "550" or an exact "550.54.15"


def _choice(*allowed: str) -> _Validator:
    def validate(ctx: _Context, node: Node, field: str) -> str:
        value = _text(node, _STR)
        if value is None:
            raise _expect(ctx, node, field, f"one of {', '.join(allowed)}")
        if value not in allowed:
            raise ctx.error(node, field, f"invalid choice {value!r} (allowed: {', '.join(allowed)})")
        return value

    return validate


def _list_of(item: _Validator, *, unique: bool = False) -> _Validator:
    def validate(ctx: _Context, node: Node, field: str) -> list[Any]:
        if not isinstance(node, SequenceNode) or node.tag != _SEQ:
            raise _expect(ctx, node, field, "a list")
        values: list[Any] = []
        for index, child in enumerate(node.value):
            ctx.lines[f"{field}[{index}]"] = child.start_mark.line + 1
            value = item(ctx, child, f"{field}[{index}]")
            if unique and value in values:
                raise ctx.error(child, f"{field}[{index}]", f"{value!r} is listed twice")
            values.append(value)
        return values

    return validate


# RFC 3986 characters, less the quote and ';' (a shell or a config file would read them): no spaces,
# backslashes, braces, '<', '>', '"', '|', '^' or '`'.
_URL_CHARS = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&()*+,=%]+")
_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _url(ctx: _Context, node: Node, field: str) -> str:
    value = _string(ctx, node, field)
    if not _URL_CHARS.fullmatch(value):
        bad = next(char for char in value if not _URL_CHARS.fullmatch(char))
        escaped = "".join(f"%{byte:02X}" for byte in bad.encode())
        raise ctx.error(node, field, f"{value!r} is not a URL: {bad!r} is not a URL character (write it as {escaped})")
    if _PERCENT.search(value):
        raise ctx.error(node, field, f"{value!r} is not a URL: '%' must start a %XX escape")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port out of range or not a number
    except ValueError as exc:
        raise ctx.error(node, field, f"{value!r} is not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ctx.error(node, field, f"{value!r} is not an http:// or https:// URL")
    return value


def _tarball(ctx: _Context, node: Node, field: str) -> str:
    """The Open MPI tarball: an http(s) URL, or a file on the controller (relative to hosts.yaml; it must exist)."""
    value = _string(ctx, node, field)
    return _url(ctx, node, field) if "://" in value else _existing_file(ctx, node, field)


# A conda match spec as environment files write them (``python=3.11``, ``numpy >=1.26,<2``, ``pytorch=*=*cpu*``):
# a package name, then version and build constraints; nothing a shell or a channel URL would read.
_CONDA_SPEC = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*(?:\s*[=<>!~][A-Za-z0-9_.+*=<>!~,| -]*)?")
# A channel by name (conda-forge, pytorch/label/nightly) or a URL (a mirror).
_CHANNEL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(?:/[A-Za-z0-9_.-]+)*")


def _conda_spec(ctx: _Context, node: Node, field: str) -> str:
    value = _string(ctx, node, field)
    if "::" in value or "/" in value:
        raise ctx.error(node, field, f"{value!r} names a channel; list channels under channels")
    if not _CONDA_SPEC.fullmatch(value.strip()):
        raise ctx.error(node, field, f"{value!r} is not a conda match spec (e.g. 'python=3.11', 'numpy >=1.26')")
    return value.strip()


def _channel(ctx: _Context, node: Node, field: str) -> str:
    value = _string(ctx, node, field)
    if "://" in value:
        return _url_any(ctx, node, field)
    if not _CHANNEL_NAME.fullmatch(value):
        raise ctx.error(node, field, f"{value!r} is not a channel name (e.g. conda-forge) or a URL")
    return value


def _url_any(ctx: _Context, node: Node, field: str) -> str:
    """A URL of any scheme but with the characters and form :func:`_url` requires (file:// for a local mirror)."""
    value = _string(ctx, node, field)
    if value.startswith(("http://", "https://")):
        return _url(ctx, node, field)
    if not value.startswith("file:///") or not _URL_CHARS.fullmatch(value):
        raise ctx.error(node, field, f"{value!r} is not an http://, https:// or file:/// URL")
    return value


def _conda_channel(ctx: _Context, node: Node, field: str) -> str:
    """network.conda_channel: a mirror URL, or a controller folder holding an indexed channel."""
    value = _string(ctx, node, field)
    if "://" in value:
        return _url_any(ctx, node, field)
    path = _existing_directory(ctx, node, field)
    if not any(os.path.isfile(os.path.join(path, sub, "repodata.json")) for sub in ("noarch", "linux-64",
                                                                                   "linux-aarch64")):
        raise ctx.error(node, field, f"{path} is not an indexed conda channel (no <subdir>/repodata.json)")
    return path


_ENV_FILE_KEYS = ("name", "channels", "dependencies")


def _environment_file(ctx: _Context, node: Node, field: str) -> str:
    """A conda environment.yml: channels, dependencies (conda match specs and one ``pip:`` list of requirements).
    It is read here, so a mistake in it is named by its own path, line and field before any node is touched."""
    path = _existing_file(ctx, node, field)
    data = _file_bytes(ctx, node, field, path, MAX_FILE_BYTES)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ctx.error(node, field, f"{path} is not valid UTF-8") from None
    sub = _Context(path=path, base_dir=os.path.dirname(path))
    root = _compose(sub, text)
    if root is None:
        raise ctx.error(node, field, f"{path} is empty")
    _check_expansion(sub, root)
    fields = _fields(sub, root, "", _ENV_FILE_KEYS)
    for key in fields:
        if key == "name":
            _string(sub, fields[key], key)
        elif key == "channels":
            _list_of(_channel, unique=True)(sub, fields[key], key)
    deps = fields.get("dependencies")
    if deps is not None:
        if not isinstance(deps, SequenceNode):
            raise sub.error(deps, "dependencies", "expected a list of conda match specs and one {pip: [...]}")
        pips = 0
        for index, child in enumerate(deps.value):
            where = f"dependencies[{index}]"
            if isinstance(child, MappingNode):
                pip = _fields(sub, child, where, ("pip",), required=("pip",))
                pips += 1
                if pips > 1:
                    raise sub.error(child, where, "a second pip: section; list every pip requirement in one")
                _list_of(_requirement)(sub, pip["pip"], f"{where}.pip")
            else:
                _conda_spec(sub, child, where)
    return path


_PREFIX_CHARS = re.compile(r"[A-Za-z0-9._/-]+")
# Folders an environment must never be put in (hvd_pyenv replaces the prefix as a whole) ...
SYSTEM_FOLDERS = frozenset(
    "/ /usr /usr/local /opt /etc /var /var/lib /home /root /bin /sbin /lib /lib64 /boot /dev /proc /sys /tmp"
    " /var/tmp /srv /mnt /media /run".split()
)
# ... nor anywhere under these (virtual, volatile or world-writable file systems).
SYSTEM_TREES = ("/proc", "/sys", "/dev", "/tmp", "/var/tmp", "/run")


def _env_prefix(ctx: _Context, node: Node, field: str) -> str:
    """Where the environment lives on every node: a safe absolute path of its own, never a system folder."""
    value = _string(ctx, node, field)
    if not value.startswith("/"):
        raise ctx.error(node, field, f"{value!r} is not an absolute path (a path on the nodes, starting with '/')")
    if not _PREFIX_CHARS.fullmatch(value):
        bad = next(char for char in value if not _PREFIX_CHARS.fullmatch(char))
        allowed = "letters, digits, '.', '_', '-', '/'"
        raise ctx.error(node, field, f"{value!r}: {bad!r} is not allowed in the prefix (use {allowed})")
    if ".." in value.split("/"):
        raise ctx.error(node, field, f"{value!r} has a '..' component; write the path it means")
    path = "/" + posixpath.normpath(value).lstrip("/")  # normpath keeps a leading '//'
    if path in SYSTEM_FOLDERS:
        raise ctx.error(node, field, f"{value!r} is a system folder; give the environment its own, e.g. /opt/hvd/env")
    tree = next((t for t in SYSTEM_TREES if path.startswith(t + "/")), None)
    if tree:
        message = f"{value!r} is under {tree}, which is no place for an environment (e.g. /opt/hvd/env)"
        raise ctx.error(node, field, message)
    if path.count("/") < 2:
        raise ctx.error(node, field, f"{value!r} is a top-level folder; name a folder of its own, e.g. /opt/hvd/env")
    return path


def _requirement(ctx: _Context, node: Node, field: str) -> str:
    """A PEP 508 requirement (``torch==2.3.1``, ``numpy>=1.26``): no pip options, no URLs or paths."""
    value = _string(ctx, node, field)
    if value.lstrip().startswith("-"):
        message = f"{value!r} is a pip option, not a package; list requirements only (e.g. 'numpy>=1.26')"
        raise ctx.error(node, field, message)
    try:
        requirement = Requirement(value)
    except InvalidRequirement as exc:
        reason = str(exc).splitlines()[0]
        message = f"{value!r} is not a package requirement (e.g. 'torch==2.3.1'): {reason}"
        raise ctx.error(node, field, message) from None
    if requirement.url:
        message = f"{value!r} installs from a URL; name a package and version (offer wheels with network.wheelhouse)"
        raise ctx.error(node, field, message)
    return value


def _local_path(ctx: _Context, node: Node, field: str) -> str:
    """A controller-side path: ``~`` expanded, relative to the hosts.yaml folder, normalised."""
    path = os.path.expanduser(_string(ctx, node, field))
    return os.path.normpath(os.path.join(ctx.base_dir, path))


def _existing_file(ctx: _Context, node: Node, field: str) -> str:
    path = _local_path(ctx, node, field)
    if not os.path.isfile(path):
        if os.path.isdir(path):
            problem = "is a directory, not a file"
        elif os.path.exists(path):
            problem = "is not a regular file"
        else:
            problem = "not found"
        raise ctx.error(node, field, f"file {problem}: {path}")
    return path


def _file_bytes(ctx: _Context, node: Node, field: str, path: str, limit: int) -> bytes:
    try:
        return read_regular_file(path, limit)
    except FileProblem as exc:
        raise ctx.error(node, field, f"{path}: {exc}") from None


_PRIVATE_KEY = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")
_PUBLIC_KEY = re.compile(r"(?:ssh-|ecdsa-|sk-)[a-z0-9@.-]+ AAAA|-----BEGIN (?:SSH2 |RSA )?PUBLIC KEY-----")


def _private_key(ctx: _Context, node: Node, field: str) -> str:
    """The SSH key the controller logs in with: a readable, non-empty private key (OpenSSH or PEM)."""
    path = _existing_file(ctx, node, field)
    data = _file_bytes(ctx, node, field, path, MAX_FILE_BYTES)
    text = data.decode("ascii", errors="replace").lstrip()
    first = text.splitlines()[0].strip() if text else ""
    if not first:
        raise ctx.error(node, field, f"{path} is empty; name your SSH private key (e.g. ~/.ssh/id_ed25519)")
    if _PRIVATE_KEY.fullmatch(first):
        return path
    if _PUBLIC_KEY.match(first) or path.endswith(".pub"):
        raise ctx.error(node, field, f"{path}: this is a public key; name the private key (without .pub)")
    raise ctx.error(
        node, field, f"{path} is not an SSH private key (its first line is not '-----BEGIN ... PRIVATE KEY-----')"
    )


_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.DOTALL)


def _ca_bundle(ctx: _Context, node: Node, field: str) -> str:
    """CA certificates the nodes will trust: PEM ``CERTIFICATE`` blocks, each a DER certificate, nothing secret."""
    path = _existing_file(ctx, node, field)
    data = _file_bytes(ctx, node, field, path, MAX_CA_BUNDLE_BYTES)
    text = data.decode("ascii", errors="replace")
    blocks = list(_PEM_BLOCK.finditer(text))
    begins = text.count("-----BEGIN ")
    if begins != len(blocks):
        raise ctx.error(node, field, f"{path}: a '-----BEGIN' has no matching '-----END' line (a cut-off PEM file?)")
    if not any(block.group(1) == "CERTIFICATE" for block in blocks):
        message = f"{path} holds no PEM certificate ('-----BEGIN CERTIFICATE-----'); convert DER with openssl x509"
        raise ctx.error(node, field, message)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    for number, block in enumerate(blocks, 1):
        line = text.count("\n", 0, block.start()) + 1
        if block.group(1) != "CERTIFICATE":
            raise ctx.error(
                node, field, f"{path}: line {line} holds a {block.group(1)}; a CA bundle holds certificates only"
            )
        try:
            der = base64.b64decode("".join(block.group(2).split()), validate=True)
            context.load_verify_locations(cadata=der)
        except (binascii.Error, ValueError, ssl.SSLError):
            message = f"{path}: certificate {number} (line {line}) is not a valid certificate"
            raise ctx.error(node, field, message) from None
    return path


def _existing_directory(ctx: _Context, node: Node, field: str) -> str:
    path = _local_path(ctx, node, field)
    if not os.path.isdir(path):
        problem = "is a file, not a directory" if os.path.exists(path) else "not found"
        raise ctx.error(node, field, f"directory {problem}: {path}")
    return path


# --------------------------------------------------------------------------------------------- names


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _hostname_problem(name: str) -> str | None:
    """Why ``name`` (already lower-cased) is not an RFC 1123 hostname, or None when it is one."""
    if len(name) > 253:
        return f"it is {len(name)} characters long (at most 253)"
    labels = name.split(".")
    for label in labels:
        if not label:
            return "it has an empty label (a leading, trailing or doubled '.')"
        if len(label) > 63:
            return f"label '{label[:16]}...' is {len(label)} characters long (at most 63)"
        bad = next((char for char in label if not (char.isascii() and (char.isalnum() or char == "-"))), None)
        if bad is not None:
            return f"bad character {bad!r} in label '{label}' (allowed: a-z, 0-9 and '-')"
        if label.startswith("-"):
            return f"label '{label}' starts with a hyphen"
        if label.endswith("-"):
            return f"label '{label}' ends with a hyphen"
    if all(label.isdigit() for label in labels):
        return "it looks like an IPv4 address but is not a valid one"
    if labels[-1].isdigit():
        return f"its last label '{labels[-1]}' is all digits"
    return None


def _name_for_address(address: str) -> str:
    """The inventory name of a host given only by its address."""
    ip = _ip(address)
    if ip is None:
        return address.lower()
    if ip.version == 4:
        return "ip-" + str(ip).replace(".", "-")
    return "ip6-" + "-".join(ip.packed[i : i + 2].hex() for i in range(0, 16, 2))


def _address_key(address: str) -> str:
    """A canonical form for comparing addresses: IPs compressed (``0:0::1`` is ``::1``), DNS names lower-cased."""
    ip = _ip(address)
    return str(ip) if ip is not None else address.lower()


_ZONE_ID = re.compile(r"[A-Za-z0-9_.-]{1,15}")  # an interface name, as Linux allows it (IFNAMSIZ - 1)


def _address(ctx: _Context, node: Node, field: str) -> str:
    value = _string(ctx, node, field)
    address, percent, zone = value.partition("%")
    if percent and isinstance(_ip(address), ipaddress.IPv6Address) and not _ZONE_ID.fullmatch(zone):
        raise ctx.error(
            node,
            field,
            f"{value!r}: the zone id after '%' must be an interface name (letters, digits, '_', '.', '-'; at most 15),"
            " e.g. fe80::1%eth0",
        )
    if _ip(value) is not None:
        return value
    if "@" in value:
        raise ctx.error(node, field, f"{value!r} is not an address (set the login user with ssh.user)")
    if ":" in value:
        raise ctx.error(node, field, f"{value!r} is not an address (set the SSH port with 'port:')")
    problem = _hostname_problem(value.lower())
    if problem:
        raise ctx.error(node, field, f"{value!r} is not an IP address or a valid hostname: {problem}")
    return value


def _host_name(ctx: _Context, node: Node, field: str) -> str:
    value = _string(ctx, node, field)
    if _ip(value) is not None:
        raise ctx.error(
            node, field, f"{value!r} is an IP address; a host name is needed (e.g. '{_name_for_address(value)}')"
        )
    name = value.lower()
    problem = _hostname_problem(name)
    if problem:
        raise ctx.error(node, field, f"invalid hostname {value!r}: {problem}")
    return name


# --------------------------------------------------------------------------------------------- sections

_TOP_KEYS = ("cluster", "ssh", "hosts", "stack", "network", "set_hostname")
_SSH_KEYS = ("user", "port", "identity", "become", "proxy_jump", "known_hosts")
_JUMP_KEYS = ("host", "port", "user", "identity", "host_key")
_HOST_KEYS = ("name", "address", "port", "fabric_address", "fabric_port", "slots", "host_key")
_NETWORK_KEYS = ("ca_bundle", "apt_proxy", "pip_index", "wheelhouse", "conda_channel", "bundle", "bundle_sha256",
                 "bundle_signers")
# With an offline bundle, nodes use nothing else: these would be sources next to it.
NOT_WITH_BUNDLE = ("apt_proxy", "pip_index", "wheelhouse", "conda_channel")

_PYTHON_SCHEMA: dict[str, _Validator] = {
    "manager": _choice("venv", "conda"),
    "version": _version,
    "prefix": _env_prefix,
    "packages": _list_of(_requirement),
    "environment_file": _environment_file,
    "conda_packages": _list_of(_conda_spec, unique=True),
    "channels": _list_of(_channel, unique=True),
}
_python_fields = _section(_PYTHON_SCHEMA)
_CONDA_ONLY = ("environment_file", "conda_packages", "channels")


def _python(ctx: _Context, node: Node, field: str) -> dict[str, Any]:
    """stack.python; the conda fields only with manager: conda."""
    out = _python_fields(ctx, node, field)
    if out.get("manager", "venv") != "conda":
        for key in _CONDA_ONLY:
            if key in out:
                value = _fields(ctx, node, field, _PYTHON_SCHEMA)[key]
                raise ctx.error(value, _join(field, key), "only with manager: conda (this environment is a venv)")
    return out


_stack = _section(
    {
        "driver": _driver_version,
        "cuda": _version,
        "cudnn": _version,
        "nccl": _version,
        "gpu_source": _choice("system", "env"),
        "gcc": _version,
        "mpi": _section(
            {
                "impl": _choice("openmpi"),
                "version": _version,
                "source": _choice("package", "source"),
                "url": _tarball,
                "sha256": _sha256,
            }
        ),
        "python": _python,
        "horovod": _section(
            {
                "version": _version,
                "frameworks": _list_of(_choice("pytorch", "tensorflow", "mxnet"), unique=True),
                "gpu_operations": _choice("nccl", "mpi", "none"),
                "cpu_operations": _choice("gloo", "mpi", "ccl"),
                "controllers": _list_of(_choice("mpi", "gloo"), unique=True),
            }
        ),
    }
)


_HOST_KEY_TYPES = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "ssh-rsa")


def _key_problem(key_type: str, data: str) -> str | None:
    """Why "<key_type> <data>" is not an OpenSSH public host key, or None."""
    if key_type not in _HOST_KEY_TYPES:
        return (f"{key_type[:40]!r} is not a host key type (expected one of {', '.join(_HOST_KEY_TYPES)}, as in the "
                "host's /etc/ssh/ssh_host_*_key.pub or ssh-keyscan's output)")
    try:
        blob = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return f"the key of type {key_type} is not valid base64"
    fields = []
    while blob:  # the SSH wire format: length-prefixed fields, the first the key type
        length = int.from_bytes(blob[:4], "big") if len(blob) >= 4 else len(blob) + 1
        if length > len(blob) - 4:
            break
        fields.append(blob[4 : 4 + length])
        blob = blob[4 + length :]
    if not fields or fields[0] != key_type.encode():
        return f"the key data does not hold a {key_type} key (copied from another line?)"
    expected = {"ssh-ed25519": 2, "ssh-rsa": 3}.get(key_type, 3)  # type and key; type, e and n; type, curve and point
    if blob or len(fields) != expected or (key_type == "ssh-ed25519" and len(fields[1]) != 32):
        return f"the {key_type} key is cut off or damaged (copy the whole line)"
    return None


def _host_key(ctx: _Context, node: Node, field: str) -> str:
    """An OpenSSH public host key, "<type> <base64>" (a comment after it is dropped), as ssh-keyscan prints it."""
    value = _string(ctx, node, field)
    parts = value.split()
    if len(parts) < 2 or parts[0] not in _HOST_KEY_TYPES:
        raise ctx.error(node, field, f"{value[:60]!r} is not a host key: expected '<type> <base64>' with a type of "
                                     f"{', '.join(_HOST_KEY_TYPES)} (from the host's /etc/ssh/ssh_host_*_key.pub)")
    problem = _key_problem(parts[0], parts[1])
    if problem:
        raise ctx.error(node, field, problem)
    return f"{parts[0]} {parts[1]}"


_KNOWN_HOSTS_MARKERS = ("@cert-authority", "@revoked")


def parse_known_hosts(text: str) -> list[KnownHost]:
    """The lines of an OpenSSH known_hosts file (blank lines and ``#`` comments skipped); ValueError naming the line
    and what is wrong with it."""
    entries = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        marker = ""
        if line.startswith("@"):
            marker, _, line = line.partition(" ")
            if marker not in _KNOWN_HOSTS_MARKERS:
                known = ", ".join(_KNOWN_HOSTS_MARKERS)
                raise ValueError(f"line {number}: unknown marker {marker[:40]!r} (known: {known})")
        fields = line.split()
        if len(fields) < 3:
            raise ValueError(f"line {number}: expected '<host patterns> <key type> <base64 key> [comment]'")
        patterns, key_type, data = fields[:3]
        if patterns.startswith("|"):
            parts = patterns.split("|")
            try:
                if len(parts) != 4 or parts[1] != "1" or len(base64.b64decode(parts[3], validate=True)) != 20:
                    raise ValueError
                base64.b64decode(parts[2], validate=True)
            except (binascii.Error, ValueError):
                raise ValueError(f"line {number}: {patterns[:40]!r} is not a hashed host name (|1|salt|hash)") from None
        elif _CONTROL.search(patterns):
            raise ValueError(f"line {number}: the host patterns hold a control character")
        problem = _key_problem(key_type, data)
        if problem:
            raise ValueError(f"line {number}: {problem}")
        entries.append(KnownHost(marker, patterns, f"{key_type} {data}", number))
    return entries


def _wildcard(pattern: str) -> re.Pattern[str]:
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern), re.S)


def host_matches(patterns: str, host: str) -> bool:
    """Whether a known_hosts line's host patterns name ``host`` ("addr", or "[addr]:port" for a port other than 22), as
    OpenSSH judges it: comma-separated patterns with ``*`` and ``?``, ``!`` negating, case-insensitive; or one hashed
    name (HMAC-SHA1 of the host under the line's salt)."""
    if patterns.startswith("|1|"):
        try:
            _, _, salt, digest = patterns.split("|")
            mac = hmac.new(base64.b64decode(salt), host.encode(), hashlib.sha1).digest()
            return hmac.compare_digest(mac, base64.b64decode(digest))
        except (binascii.Error, ValueError):
            return False
    matched = False
    for pattern in patterns.lower().split(","):
        negated = pattern.startswith("!")
        if _wildcard(pattern[1:] if negated else pattern).fullmatch(host.lower()):
            if negated:
                return False
            matched = True
    return matched


def known_hosts_name(address: str, port: int) -> str:
    """The name ssh looks a node up by in known_hosts: its address (lower-case), in ``[...]:port`` unless port 22."""
    return address.lower() if port == 22 else f"[{address.lower()}]:{port}"


def _known_hosts(ctx: _Context, node: Node, field: str) -> KnownHostsFile:
    """``ssh.known_hosts``: a known_hosts file (OpenSSH's format; ``ssh-keyscan -H`` output too) pinning node keys."""
    path = _existing_file(ctx, node, field)
    text = _file_bytes(ctx, node, field, path, MAX_KNOWN_HOSTS_BYTES).decode("utf-8", errors="replace")
    try:
        entries = parse_known_hosts(text)
    except ValueError as exc:
        raise ctx.error(node, field, f"{path}: {exc}") from None
    if not any(not entry.marker for entry in entries):
        raise ctx.error(node, field,
                        f"{path} holds no host key (lines '<host> <type> <base64>', as ssh-keyscan prints them)")
    mark = node.start_mark
    return KnownHostsFile(path, tuple(entries), mark.line + 1, mark.column + 1)


def _proxy_jump(ctx: _Context, node: Node, field: str, user: str, identity: str | None) -> JumpSpec:
    fields = _fields(ctx, node, field, _JUMP_KEYS, required=("host", "host_key"))
    return JumpSpec(
        host=_address(ctx, fields["host"], _join(field, "host")),
        port=_get(ctx, fields, "port", field, _port, 22),
        user=_get(ctx, fields, "user", field, _user_name, user),
        identity=_get(ctx, fields, "identity", field, _private_key, identity),
        host_key=_host_key(ctx, fields["host_key"], _join(field, "host_key")),
    )


def _ssh(ctx: _Context, node: Node, field: str) -> SshSpec:
    fields = _fields(ctx, node, field, _SSH_KEYS)
    user = _get(ctx, fields, "user", field, _user_name, "root")
    identity = _get(ctx, fields, "identity", field, _private_key)
    jump = fields.get("proxy_jump")
    known = _get(ctx, fields, "known_hosts", field, _known_hosts)
    return SshSpec(
        user=user,
        port=_get(ctx, fields, "port", field, _port, 22),
        identity=identity,
        become=_get(ctx, fields, "become", field, _boolean),
        proxy_jump=_proxy_jump(ctx, jump, _join(field, "proxy_jump"), user, identity) if jump is not None else None,
        known_hosts=known.path if known else None,
        known_hosts_file=known,
    )


def _bundle(ctx: _Context, node: Node, field: str) -> str:
    path = _existing_directory(ctx, node, field)
    if not os.path.isfile(os.path.join(path, "manifest.yaml")):
        raise ctx.error(node, field, f"{path} holds no manifest.yaml: make the bundle with `hvdcluster bundle`")
    return path


def _network(ctx: _Context, node: Node, field: str) -> NetworkSpec:
    fields = _fields(ctx, node, field, _NETWORK_KEYS)
    if fields.get("bundle") is not None and not _is_null(fields["bundle"]):
        for key in NOT_WITH_BUNDLE:
            if fields.get(key) is not None and not _is_null(fields[key]):
                raise ctx.error(fields[key], _join(field, key),
                                "not with network.bundle: an offline bundle is the nodes' only source (drop one)")
    return NetworkSpec(
        ca_bundle=_get(ctx, fields, "ca_bundle", field, _ca_bundle),
        apt_proxy=_get(ctx, fields, "apt_proxy", field, _url),
        pip_index=_get(ctx, fields, "pip_index", field, _url),
        wheelhouse=_get(ctx, fields, "wheelhouse", field, _existing_directory),
        conda_channel=_get(ctx, fields, "conda_channel", field, _conda_channel),
        bundle=_get(ctx, fields, "bundle", field, _bundle),
        bundle_sha256=_get(ctx, fields, "bundle_sha256", field, _sha256),
        bundle_signers=_get(ctx, fields, "bundle_signers", field, _existing_file),
    )


@dataclass(frozen=True)
class _Origin:
    """Where a host's identifying values were written, for duplicate errors."""

    name: Node  # the name node, or the address node the name was derived from
    address: Node
    fabric: Node  # the fabric_address node, or the address node it defaults to
    fabric_defaulted: bool


def _pins(ctx: _Context, node: Node, field: str, address: str, port: int, host_key: str | None,
          known: KnownHostsFile | None) -> tuple[str, ...]:
    """A node's pinned keys: its ``host_key`` (``node`` is where it is written), else those ``known`` holds for its
    address and port. A host_key the file contradicts, or a pin the file revokes, is refused."""
    name = known_hosts_name(address, port)
    if known is None:
        return (host_key,) if host_key is not None else ()
    entries = [entry for entry in known.entries if host_matches(entry.patterns, name)]
    listed = list(dict.fromkeys(entry.key for entry in entries if not entry.marker))
    if host_key is not None and listed and host_key not in listed:
        lines = ", ".join(str(entry.line) for entry in entries if not entry.marker)
        raise ctx.error(node, field, f"differs from the key {known.path} (ssh.known_hosts, line {lines}) pins for "
                                     f"{name}: pin one key in one place")
    pins = (host_key,) if host_key is not None else tuple(listed)
    for entry in entries:
        if entry.marker == "@revoked" and entry.key in pins:
            raise ctx.error(node, field, f"the pinned key of {name} is revoked by {known.path} "
                                         f"(ssh.known_hosts, line {entry.line}): pin the node's current key")
    return pins


def _host(ctx: _Context, node: Node, field: str, default_port: int,
          known: KnownHostsFile | None = None) -> tuple[HostSpec, _Origin]:
    line = node.start_mark.line + 1
    if isinstance(node, ScalarNode):  # shorthand: the address alone
        address = _address(ctx, node, field)
        pins = _pins(ctx, node, field, address, default_port, None, known)
        host = HostSpec(_name_for_address(address), address, default_port, address, default_port, None, line, pins)
        return host, _Origin(node, node, node, True)
    if not isinstance(node, MappingNode):
        raise _expect(ctx, node, field, "an address or a mapping with 'address'")

    fields = _fields(ctx, node, field, _HOST_KEYS, required=("address",))
    name = _get(ctx, fields, "name", field, _host_name)
    address = _address(ctx, fields["address"], _join(field, "address"))
    port = _get(ctx, fields, "port", field, _port, default_port)
    fabric_address = _get(ctx, fields, "fabric_address", field, _address)
    host_key = _get(ctx, fields, "host_key", field, _host_key)
    key_node = fields["host_key"] if host_key is not None else node
    key_field = _join(field, "host_key") if host_key is not None else field
    host = HostSpec(
        name=name or _name_for_address(address),
        address=address,
        port=port,
        fabric_address=fabric_address or address,
        fabric_port=_get(ctx, fields, "fabric_port", field, _port, port),
        slots=_get(ctx, fields, "slots", field, _slots),
        line=line,
        host_keys=_pins(ctx, key_node, key_field, address, port, host_key, known),
    )
    origin = _Origin(
        name=fields["name"] if name else fields["address"],
        address=fields["address"],
        fabric=fields["fabric_address"] if fabric_address else fields["address"],
        fabric_defaulted=not fabric_address,
    )
    return host, origin


def _hosts(ctx: _Context, node: Node, field: str, default_port: int,
           known: KnownHostsFile | None = None) -> tuple[HostSpec, ...]:
    if not isinstance(node, SequenceNode) or node.tag != _SEQ:
        raise _expect(ctx, node, field, "a list of hosts")
    if not node.value:
        raise ctx.error(node, field, "the host list is empty (list at least one host)")
    entries = [_host(ctx, item, f"{field}[{index}]", default_port, known) for index, item in enumerate(node.value)]
    if known is not None and not any(host.host_keys for host, _origin in entries):
        raise SpecError(ctx.path, known.line, known.column, "ssh.known_hosts",
                        f"{known.path} pins no node of this file (its lines are matched by each node's address and "
                        f"port, e.g. {known_hosts_name(entries[0][0].address, entries[0][0].port)})")
    _check_unique_hosts(ctx, entries, field)
    return tuple(host for host, _origin in entries)


def _check_unique_hosts(ctx: _Context, entries: list[tuple[HostSpec, _Origin]], field: str) -> None:
    """Names, controller endpoints (address + port) and fabric addresses must each be unique."""
    names: dict[str, int] = {}
    endpoints: dict[tuple[str, int], int] = {}
    fabrics: dict[str, int] = {}

    def first(seen: int) -> str:
        return f"{field}[{seen}] on line {entries[seen][0].line}"

    for index, (host, origin) in enumerate(entries):
        here = f"{field}[{index}]"
        if (seen := endpoints.setdefault((_address_key(host.address), host.port), index)) != index:
            raise ctx.error(
                origin.address,
                f"{here}.address",
                f"{host.address} port {host.port} is already used by {first(seen)}"
                " (hosts sharing an address need different ports)",
            )
        if (seen := names.setdefault(host.name, index)) != index:
            derived = " (derived from the address: give the host a 'name:')" if origin.name is origin.address else ""
            raise ctx.error(
                origin.name, f"{here}.name", f"duplicate host name '{host.name}'{derived} (first: {first(seen)})"
            )
        if (seen := fabrics.setdefault(_address_key(host.fabric_address), index)) != index:
            hint = (
                "; fabric_address defaults to address: set it to the address the other nodes reach this one at"
                if origin.fabric_defaulted
                else ""
            )
            raise ctx.error(
                origin.fabric,
                f"{here}.fabric_address",
                f"fabric address {host.fabric_address} is already used by {first(seen)}"
                f" (nodes must reach each other at distinct addresses){hint}",
            )


def _cluster_spec(ctx: _Context, root: Node | None) -> ClusterSpec:
    if root is None:
        raise SpecError(ctx.path, 1, 1, "<document>", "the file is empty (expected 'cluster:' and 'hosts:')")
    _mapping_node(ctx, root, "<document>", "a mapping with 'cluster' and 'hosts' at the top level")
    fields = _fields(ctx, root, "", _TOP_KEYS, required=("cluster", "hosts"))
    cluster = _cluster_name(ctx, fields["cluster"], "cluster")
    ssh = _get(ctx, fields, "ssh", "", _ssh, SshSpec())
    return ClusterSpec(
        path=ctx.path,
        cluster=cluster,
        ssh=ssh,
        hosts=_hosts(ctx, fields["hosts"], "hosts", ssh.port, ssh.known_hosts_file),
        stack=_get(ctx, fields, "stack", "", _stack, {}),
        network=_get(ctx, fields, "network", "", _network, NetworkSpec()),
        set_hostname=_get(ctx, fields, "set_hostname", "", _boolean, False),
        stack_lines={name: line for name, line in ctx.lines.items() if name.startswith("stack.")},
    )
