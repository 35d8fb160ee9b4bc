"""The conda side of ``stack.python``: match specs, channels, a channel mirror and an ``environment.yml``, which
is read and validated here with the same loader, so its mistakes name its own path, line and field."""

from __future__ import annotations

import os
import re

from yaml.nodes import MappingNode, Node, SequenceNode

from .files import _existing_directory, _existing_file, _file_bytes
from .loader import MAX_FILE_BYTES, _check_expansion, _compose, _Context
from .schema import _fields, _list_of, _string
from .values import _requirement, _url_any

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
