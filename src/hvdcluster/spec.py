"""The ``hosts.yaml`` model and loader.

Loading happens in two steps. ``yaml.compose`` turns the text into a node tree in which every node keeps
its start mark; the validators below then walk that tree node by node and build frozen dataclasses. So
every mistake is reported as one :class:`~hvdcluster.errors.SpecError` naming the exact line, column and
field path (``hosts[1].port``, ``stack.mpi.source``; list indices are 0-based).

Scalars are judged by their YAML tag, not by Python's idea of their type: ``port: "22"`` is a string,
``port: true`` a boolean (neither is a port), and ``cuda: 12.10`` a float that YAML already read as 12.1,
so versions must be quoted. ``null`` for an optional field means "unset". Keys repeated in one mapping
are rejected (YAML would silently keep the last one); merge keys (``<<: *defaults``) are honoured.
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import posixpath
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from .errors import SpecError

__all__ = ["ClusterSpec", "HostSpec", "NetworkSpec", "SshSpec", "load", "loads"]


# --------------------------------------------------------------------------------------------- model


@dataclass(frozen=True)
class SshSpec:
    """How the controller logs in to every node."""

    user: str = "root"
    port: int = 22  # default port for hosts that give none
    identity: str | None = None  # absolute path of an existing private key file
    become: bool | None = None  # None: derived, ``user != "root"`` (always a bool after construction)

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


@dataclass(frozen=True)
class NetworkSpec:
    """Corporate-network settings; every path is absolute and exists."""

    ca_bundle: str | None = None
    apt_proxy: str | None = None
    pip_index: str | None = None
    wheelhouse: str | None = None


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


# --------------------------------------------------------------------------------------------- entry points


def load(path: str | os.PathLike[str]) -> ClusterSpec:
    """Read and validate a ``hosts.yaml`` file; raise :class:`SpecError` on any mistake."""
    shown = os.fspath(path)
    try:
        with open(shown, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise SpecError(shown, 1, 1, "<file>", f"cannot read the file: {exc.strerror or exc}") from None
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
    return _cluster_spec(ctx, _compose(ctx, text))


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

    def error(self, node: Node, field: str, message: str) -> SpecError:
        mark = node.start_mark
        return SpecError(self.path, mark.line + 1, mark.column + 1, field, message)


def _compose(ctx: _Context, text: str) -> Node | None:
    """Parse YAML into a node tree; syntax errors become SpecErrors at the problem mark."""
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
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
        return {key: schema[key](ctx, value, _join(field, key)) for key, value in fields.items() if not _is_null(value)}

    return validate


# --------------------------------------------------------------------------------------------- scalars


def _string(ctx: _Context, node: Node, field: str) -> str:
    value = _text(node, _STR)
    if value is None:
        hint = " (quote it)" if _text(node, _INT, _FLOAT, _BOOL) is not None else ""
        raise ctx.error(node, field, f"expected a string, got {_describe(node)}{hint}")
    if not value.strip():
        raise ctx.error(node, field, "must not be empty")
    return value


def _integer(ctx: _Context, node: Node, field: str) -> int:
    if not (isinstance(node, ScalarNode) and node.tag == _INT):
        raise _expect(ctx, node, field, "an integer")
    return int(_SCALARS.construct_yaml_int(node))


def _boolean(ctx: _Context, node: Node, field: str) -> bool:
    if not (isinstance(node, ScalarNode) and node.tag == _BOOL):
        raise _expect(ctx, node, field, "true or false")
    return bool(_SCALARS.construct_yaml_bool(node))


def _port(ctx: _Context, node: Node, field: str) -> int:
    port = _integer(ctx, node, field)
    if not 1 <= port <= 65535:
        raise ctx.error(node, field, f"port {port} is out of range (1-65535)")
    return port


def _slots(ctx: _Context, node: Node, field: str) -> int:
    slots = _integer(ctx, node, field)
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
            value = item(ctx, child, f"{field}[{index}]")
            if unique and value in values:
                raise ctx.error(child, f"{field}[{index}]", f"{value!r} is listed twice")
            values.append(value)
        return values

    return validate


def _url(ctx: _Context, node: Node, field: str) -> str:
    value = _string(ctx, node, field)
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ctx.error(node, field, f"{value!r} is not an http:// or https:// URL")
    return value


def _remote_absolute_path(ctx: _Context, node: Node, field: str) -> str:
    value = _string(ctx, node, field)
    if not posixpath.isabs(value):
        raise ctx.error(node, field, f"{value!r} is not an absolute path (a path on the nodes, starting with '/')")
    return posixpath.normpath(value)


def _local_path(ctx: _Context, node: Node, field: str) -> str:
    """A controller-side path: ``~`` expanded, relative to the hosts.yaml folder, normalised."""
    path = os.path.expanduser(_string(ctx, node, field))
    return os.path.normpath(os.path.join(ctx.base_dir, path))


def _existing_file(ctx: _Context, node: Node, field: str) -> str:
    path = _local_path(ctx, node, field)
    if not os.path.isfile(path):
        problem = "is a directory, not a file" if os.path.isdir(path) else "not found"
        raise ctx.error(node, field, f"file {problem}: {path}")
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


def _address(ctx: _Context, node: Node, field: str) -> str:
    value = _string(ctx, node, field)
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
_SSH_KEYS = ("user", "port", "identity", "become")
_HOST_KEYS = ("name", "address", "port", "fabric_address", "fabric_port", "slots")
_NETWORK_KEYS = ("ca_bundle", "apt_proxy", "pip_index", "wheelhouse")

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
                "url": _url,
                "sha256": _sha256,
            }
        ),
        "python": _section(
            {
                "manager": _choice("venv", "conda"),
                "version": _version,
                "prefix": _remote_absolute_path,
                "packages": _list_of(_string),
                "environment_file": _string,
                "installer": _string,
                "installer_sha256": _sha256,
            }
        ),
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


def _ssh(ctx: _Context, node: Node, field: str) -> SshSpec:
    fields = _fields(ctx, node, field, _SSH_KEYS)
    return SshSpec(
        user=_get(ctx, fields, "user", field, _user_name, "root"),
        port=_get(ctx, fields, "port", field, _port, 22),
        identity=_get(ctx, fields, "identity", field, _existing_file),
        become=_get(ctx, fields, "become", field, _boolean),
    )


def _network(ctx: _Context, node: Node, field: str) -> NetworkSpec:
    fields = _fields(ctx, node, field, _NETWORK_KEYS)
    return NetworkSpec(
        ca_bundle=_get(ctx, fields, "ca_bundle", field, _existing_file),
        apt_proxy=_get(ctx, fields, "apt_proxy", field, _url),
        pip_index=_get(ctx, fields, "pip_index", field, _url),
        wheelhouse=_get(ctx, fields, "wheelhouse", field, _existing_directory),
    )


@dataclass(frozen=True)
class _Origin:
    """Where a host's identifying values were written, for duplicate errors."""

    name: Node  # the name node, or the address node the name was derived from
    address: Node
    fabric: Node  # the fabric_address node, or the address node it defaults to
    fabric_defaulted: bool


def _host(ctx: _Context, node: Node, field: str, default_port: int) -> tuple[HostSpec, _Origin]:
    line = node.start_mark.line + 1
    if isinstance(node, ScalarNode):  # shorthand: the address alone
        address = _address(ctx, node, field)
        host = HostSpec(_name_for_address(address), address, default_port, address, default_port, None, line)
        return host, _Origin(node, node, node, True)
    if not isinstance(node, MappingNode):
        raise _expect(ctx, node, field, "an address or a mapping with 'address'")

    fields = _fields(ctx, node, field, _HOST_KEYS, required=("address",))
    name = _get(ctx, fields, "name", field, _host_name)
    address = _address(ctx, fields["address"], _join(field, "address"))
    port = _get(ctx, fields, "port", field, _port, default_port)
    fabric_address = _get(ctx, fields, "fabric_address", field, _address)
    host = HostSpec(
        name=name or _name_for_address(address),
        address=address,
        port=port,
        fabric_address=fabric_address or address,
        fabric_port=_get(ctx, fields, "fabric_port", field, _port, port),
        slots=_get(ctx, fields, "slots", field, _slots),
        line=line,
    )
    origin = _Origin(
        name=fields["name"] if name else fields["address"],
        address=fields["address"],
        fabric=fields["fabric_address"] if fabric_address else fields["address"],
        fabric_defaulted=not fabric_address,
    )
    return host, origin


def _hosts(ctx: _Context, node: Node, field: str, default_port: int) -> tuple[HostSpec, ...]:
    if not isinstance(node, SequenceNode) or node.tag != _SEQ:
        raise _expect(ctx, node, field, "a list of hosts")
    if not node.value:
        raise ctx.error(node, field, "the host list is empty (list at least one host)")
    entries = [_host(ctx, item, f"{field}[{index}]", default_port) for index, item in enumerate(node.value)]
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
        hosts=_hosts(ctx, fields["hosts"], "hosts", ssh.port),
        stack=_get(ctx, fields, "stack", "", _stack, {}),
        network=_get(ctx, fields, "network", "", _network, NetworkSpec()),
        set_hostname=_get(ctx, fields, "set_hostname", "", _boolean, False),
    )
