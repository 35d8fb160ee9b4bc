"""The inventory's YAML: every string that is not a bare word written ``!unsafe`` (Ansible never templates it),
files written atomically (the private ones 0600 from the start), and read back."""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path
from typing import Any

import yaml

from ..errors import HvdError


class Unsafe(str):
    """A string Ansible must never template: written as ``!unsafe '...'``."""


class Expression(str):
    """One of hvdcluster's own Jinja expressions (never a value from hosts.yaml): written plain, so Ansible evaluates
    it."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(Unsafe, lambda dumper, value: dumper.represent_scalar("!unsafe", str(value), style="'"))
_Dumper.add_representer(Expression, lambda dumper, value: dumper.represent_scalar("tag:yaml.org,2002:str", str(value),
                                                                                  style='"'))

_BARE_WORD = re.compile(r"[A-Za-z0-9_.+-]*")  # no Jinja delimiter can be spelled with these


def data_only(value: Any) -> Any:
    """``value`` with every string that is not a bare word marked :class:`Unsafe` (lists and dicts walked)."""
    if isinstance(value, str) and not isinstance(value, (Unsafe, Expression)) and not _BARE_WORD.fullmatch(value):
        return Unsafe(value)
    if isinstance(value, dict):
        return {key: data_only(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [data_only(item) for item in value]
    return value


class _Reader(yaml.SafeLoader):
    """Reads what :func:`render` writes: ``!unsafe`` values are plain data."""


def _construct_unsafe(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]


_Reader.add_constructor("!unsafe", _construct_unsafe)


def _dump(value: Any) -> str:
    return yaml.dump(value, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)


def _write(path: Path, text: str, private: bool = False) -> None:
    """Write ``text`` to ``path`` atomically: a new file beside it, then a rename, so a reader sees the old file or the
    new one, never a part. ``private``: mode 0600 from the moment the file exists, whatever the umask (else the
    umask's 0666)."""
    mode = 0o600 if private else 0o666
    if path.is_file() and not path.is_symlink() and path.read_text() == text:
        if private and path.stat().st_mode & 0o077:
            os.chmod(path, 0o600)
        return
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), mode)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            if private:
                os.fchmod(fh.fileno(), 0o600)
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _load(file: Path) -> dict[str, Any]:
    """One inventory file as a mapping; a broken or hand-mangled file is one line naming it (exit 2)."""
    try:
        with open(file, encoding="utf-8") as fh:
            doc = yaml.load(fh, Loader=_Reader) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f":{mark.line + 1}:{mark.column + 1}"
        reason = getattr(exc, "strerror", None) or getattr(exc, "problem", None) or str(exc)
        raise HvdError(f"{file}{where}: cannot read the inventory: {reason}") from None
    if not isinstance(doc, dict):
        raise HvdError(f"{file}: cannot read the inventory: expected a mapping at the top")
    return doc
