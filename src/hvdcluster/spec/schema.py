"""The schema combinators: validators that walk the composed node tree and turn each value into plain data.

A validator is ``(ctx, node, field) -> value``; it raises a SpecError at the node's mark naming ``field``.
Mappings reject unknown, duplicate and missing keys (merge keys honoured); scalars are judged by their YAML tag.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ..errors import SpecError
from .loader import _BOOL, _FLOAT, _INT, _MAP, _MERGE, _NULL, _SEQ, _STR, _TAG, _Context

_SCALARS = yaml.constructor.SafeConstructor()  # only its scalar converters are used

_Validator = Callable[[_Context, Node, str], Any]


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


def _matching(pattern: str, description: str) -> _Validator:
    """A string validator for values that must match ``pattern`` entirely."""
    regex = re.compile(pattern)

    def validate(ctx: _Context, node: Node, field: str) -> str:
        value = _string(ctx, node, field)
        if not regex.fullmatch(value):
            raise ctx.error(node, field, f"{value!r} is not {description}")
        return value

    return validate


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
