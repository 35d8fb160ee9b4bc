# Copyright: hvdcluster developers
# Apache-2.0 (see galaxy.yml)
"""A byte cache of the Python code Jinja compiles Ansible's templates to, kept in the controller cache.

Why: ansible-core 2.19 compiles a template string (lexes, parses, generates Python, compiles it) every time it
renders one, and a task's templates are rendered in the worker process Ansible forks for that task and host, so
nothing compiled survives the task: the same connection variables, play keywords and role defaults were compiled
again for every task of every host, about a quarter of a task worker's CPU on the project's lab (bench/README, "The
controller's Jinja compiles"). Jinja keeps such a cache for the templates it loads from files (its bytecode caches);
Ansible's templates are strings, so this keeps the same thing for them.

How: installed by the hvd_prefork callback in ansible-playbook before any worker forks, it wraps
``jinja2.Environment.compile`` for source strings: the code object is looked up by a key of everything the generated
code depends on (the source, the arguments of the call, the environment's class, lexer and code generator settings,
filters and tests are looked up at run time and are not in it; Ansible's escape-backslashes switch; the versions of
Python, Jinja and Ansible), read from memory (the entries on disk are loaded once, before the fork) or compiled and
written to disk for the next run. What it returns is what ``compile`` returns for that source: templates render as
before. Ansible's template debugging (its source files) turns it off, as does ``HVDCLUSTER_JINJA_CACHE=off``.

The entries are code the controller runs, so the folder is the user's alone: created 0700, and used only while it and
each entry are owned by this user and writable by no one else (anything else is ignored, never trusted)."""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import os
import stat
import sys
from pathlib import Path

import jinja2
from jinja2 import environment as _jinja_environment

from ansible.release import __version__ as _ANSIBLE_VERSION

try:  # ansible-core 2.19 and later: the ambient switch the key needs
    from ansible._internal._templating import _jinja_bits
except ImportError:  # pragma: no cover - older ansible-core: no cache
    _jinja_bits = None

SWITCH = "HVDCLUSTER_JINJA_CACHE"
LIMIT = 4096  # entries; past it the folder is emptied and filled again (a template set this large is not ours)
_VERSIONS = f"py{sys.version_info[0]}{sys.version_info[1]}-{importlib.util.MAGIC_NUMBER.hex()}-jinja{jinja2.__version__}" \
            f"-ansible{_ANSIBLE_VERSION}"
# Jinja's own lexer key (jinja2.lexer.get_lexer) and what else its compiler reads from the environment.
_SETTINGS = ("block_start_string", "block_end_string", "variable_start_string", "variable_end_string",
             "comment_start_string", "comment_end_string", "line_statement_prefix", "line_comment_prefix",
             "trim_blocks", "lstrip_blocks", "newline_sequence", "keep_trailing_newline", "optimized", "is_async")

_state: dict = {"folder": None, "entries": {}, "original": None, "stats": {"hits": 0, "misses": 0, "written": 0}}


def _name(value) -> str:
    if value is None or isinstance(value, (bool, str, int)):
        return repr(value)
    return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', type(value).__qualname__)}"


def key(env, source: str, name, filename, defer_init: bool) -> str | None:
    """The entry's name for this compile, or None where it is not to be cached."""
    if getattr(env, "_debuggable_template_source", False):
        return None
    context = _jinja_bits._TemplateCompileContext.current(optional=True)  # noqa: SLF001 - see the module docstring
    parts = [source, repr(name), repr(filename), repr(defer_init), _name(type(env)), _name(env.code_generator_class),
             *(repr(getattr(env, setting, None)) for setting in _SETTINGS),
             _name(env.finalize), _name(env.autoescape), repr(sorted(env.extensions)),
             repr(context.escape_backslashes if context else None)]
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def _private(path: Path, folder: bool) -> bool:
    try:
        info = path.lstat()
    except OSError:
        return False
    kind = stat.S_ISDIR if folder else stat.S_ISREG
    return kind(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o022


def _load(folder: Path) -> dict:
    entries = {}
    names = [entry for entry in os.listdir(folder) if len(entry) == 64]
    if len(names) > LIMIT:
        for entry in names:
            (folder / entry).unlink(missing_ok=True)
        return entries
    for entry in names:
        path = folder / entry
        if not _private(path, folder=False):
            continue
        try:
            entries[entry] = marshal.loads(path.read_bytes())
        except (OSError, EOFError, ValueError, TypeError):
            path.unlink(missing_ok=True)
    return entries


def _store(folder: Path, entry: str, code) -> None:
    if len(_state["entries"]) >= LIMIT:
        return
    temporary = folder / f".{entry}.{os.getpid()}"
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(descriptor, "wb") as out:
            marshal.dump(code, out)
        os.replace(temporary, folder / entry)
        _state["stats"]["written"] += 1
    except (OSError, ValueError):
        temporary.unlink(missing_ok=True)


def _compile(self, source, name=None, filename=None, raw=False, defer_init=False):
    original = _state["original"]
    entry = key(self, source, name, filename, defer_init) if isinstance(source, str) and not raw else None
    if entry is None:
        return original(self, source, name, filename, raw, defer_init)
    code = _state["entries"].get(entry)
    if code is not None:
        _state["stats"]["hits"] += 1
        return code
    code = original(self, source, name, filename, raw, defer_init)
    _state["stats"]["misses"] += 1
    _state["entries"][entry] = code
    if _state["folder"] is not None:
        _store(_state["folder"], entry, code)
    return code


def install(cache_root: str) -> Path | None:
    """Wrap Jinja's compile with the cache kept under ``cache_root`` (the controller cache); the folder used, or None
    where the cache is off (switched off, an older ansible-core, a folder that is not this user's alone)."""
    if _state["original"] is not None:
        return _state["folder"]
    if os.environ.get(SWITCH, "").lower() in ("0", "off", "no", "false") or _jinja_bits is None:
        return None
    if not hasattr(_jinja_bits, "_TemplateCompileContext"):
        return None
    folder = Path(cache_root) / "jinja" / _VERSIONS
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return None
    if not (_private(folder, folder=True) and _private(folder.parent, folder=True)):
        return None
    _state["entries"] = _load(folder)
    _state["folder"] = folder
    _state["original"] = _jinja_environment.Environment.compile
    _jinja_environment.Environment.compile = _compile
    jinja2.utils.internal_code.add(_compile.__code__)  # kept out of template tracebacks, as Jinja's own compile is
    return folder


def stats() -> dict:
    """This process's hits, misses and entries written."""
    return dict(_state["stats"])
