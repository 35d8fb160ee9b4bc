"""apt's configuration as apt reads it, for unattended-upgrades' ``Package-Blacklist`` (issue 24: the
unattended-upgrades guard): the files of /etc/apt/apt.conf.d in apt's order, their values for a key (apt.conf's
syntax: scopes, lists, ``#clear``, comments), the patterns and whether they cover a package. Plain file reads.

``root`` as in plugins/module_utils/hvd_state.py. Standard library only and Python 3.9 compatible (it runs on the
nodes).
"""

from __future__ import annotations

import glob
import os
import re

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_dpkg import stanzas
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import read_text, under


# ------------------------------------------------------------------------------------------ unattended-upgrades

_UU_KEY = "unattended-upgrade::package-blacklist"
# apt skips files in its parts folders whose names have other characters, and these (Dir::Ignore-Files-Silently).
_APT_PART = re.compile(r"[A-Za-z0-9_.\-]+")
_APT_IGNORED = re.compile(r"(~|\.disabled|\.bak|\.dpkg-[a-z]+|\.ucf-[a-z]+|\.save|\.orig|\.distUpgrade)$")


def _apt_tokens(text: str) -> list[str]:
    """apt.conf's tokens: quoted strings (kept with their quotes), '{', '}', ';', words, '#clear' and '#include'
    directives; comments (``//`` to the end of the line, ``/* ... */``, ``#`` to the end of the line) dropped."""
    tokens: list[str] = []
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char.isspace():
            i += 1
        elif char == '"':
            end = text.find('"', i + 1)
            end = n if end < 0 else end
            tokens.append(text[i:end + 1])
            i = end + 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif char == "#":
            directive = re.match(r"#(clear|include)\b", text[i:])
            if directive:
                tokens.append(directive.group(0))
                i += len(directive.group(0))
            else:
                end = text.find("\n", i)
                i = n if end < 0 else end
        elif char in "{};":
            tokens.append(char)
            i += 1
        else:
            match = re.match(r'[^\s{};"]+', text[i:])
            tokens.append(match.group(0))
            i += len(match.group(0))
    return tokens


def apt_conf_values(text: str, key: str, values: list[str] | None = None) -> list[str]:
    """The list ``key`` (``Scope::Name``, case-insensitive as apt compares them) of one apt.conf text, appended to
    ``values`` (the list so far, from earlier files): ``Key { "a"; "b"; };``, ``Scope { Key { "a"; }; };`` and
    ``Key:: "a";`` all add; ``#clear Key;`` empties it."""
    values = [] if values is None else values
    want = key.lower()
    scopes: list[str] = []
    pending: list[str] = []  # the words since the last ';', '{' or '}'
    tokens = _apt_tokens(text)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token == "#clear":
            j = i + 1
            while j < len(tokens) and tokens[j] != ";":
                if tokens[j].strip('"').lower().rstrip(":") == want:
                    values.clear()
                j += 1
            i = j + 1
            continue
        if token == "#include":
            while i < len(tokens) and tokens[i] != ";":
                i += 1
            i += 1
            continue
        if token == "{":
            scopes.append(pending[0] if pending else "")
            pending = []
        elif token == "}":
            if scopes:
                scopes.pop()
            pending = []
        elif token == ";":
            name = "::".join(s for s in scopes if s)
            words = [w for w in pending if not w.startswith('"')]
            strings = [w[1:-1] for w in pending if w.startswith('"')]
            full = "::".join(p for p in (name, *words) if p).rstrip(":").lower()
            # a list item: a bare value inside the key's block, or "Key:: value"; "Key value" sets the key itself
            item = not words or words[-1].endswith("::")
            if full == want and strings and item:
                values.append(strings[-1])
            pending = []
        else:
            pending.append(token)
        i += 1
    return values


def apt_conf_files(root: str) -> list[str]:
    """/etc/apt/apt.conf.d's files apt reads (the node's paths), in the order it reads them (by name)."""
    folder = "/etc/apt/apt.conf.d"
    names = []
    for path in glob.glob(os.path.join(glob.escape(under(root, folder)), "*")):
        name = os.path.basename(path)
        if os.path.isfile(path) and _APT_PART.fullmatch(name) and not _APT_IGNORED.search(name):
            names.append(name)
    return [f"{folder}/{name}" for name in sorted(names)]


def uu_blacklist(root: str) -> list[str]:
    """unattended-upgrades' Unattended-Upgrade::Package-Blacklist as apt builds it from /etc/apt/apt.conf.d (and
    /etc/apt/apt.conf, read last): every file's entries in file order, without duplicates."""
    values: list[str] = []
    for path in [*apt_conf_files(root), "/etc/apt/apt.conf"]:
        text = read_text(under(root, path))
        if text is not None:
            apt_conf_values(text, _UU_KEY, values)
    return list(dict.fromkeys(values))


def uu_blacklisted(name: str, patterns: list[str]) -> bool:
    """unattended-upgrades skips ``name``: one entry, a Python regular expression, matches it from its start
    (``re.match``: "nvidia-" covers every nvidia-* package, "libcuda1$" only libcuda1). An entry that is no valid
    expression matches nothing."""
    for pattern in patterns:
        try:
            if re.match(pattern, name):
                return True
        except re.error:
            continue
    return False


GUARD_FILE = "/etc/apt/apt.conf.d/51hvdcluster-{owner}"
_OWNER = re.compile(r"[a-z][a-z0-9_]{0,63}")


def uu_guard(owner: str, packages: list[str], prefixes: list[str] = ()) -> tuple[str, str]:
    """The guard file of ``owner`` (the role whose packages these are) and its text: one Package-Blacklist entry per
    package name (``name:arch`` taken as ``name``), matched exactly (a literal: '.' and '+' in brackets, ending in
    '$'), and one per prefix (covering every name that starts with it). One writer of it for the roles' ``unattended``
    entry point (the hvd_uu_guard filter) and for M(hvd.cluster.hvd_packages)."""
    if not _OWNER.fullmatch(owner or ""):
        raise ValueError(f"{owner!r} is not a role name (the guard file is named after it)")

    def literal(text: str) -> str:
        return text.replace(".", "[.]").replace("+", "[+]")

    lines = [f"// Managed by hvdcluster ({owner}): pinned and held, so unattended-upgrades leaves them alone.",
             "Unattended-Upgrade::Package-Blacklist {"]
    lines += [f'    "{literal(name)}$";' for name in sorted({p.split(":", 1)[0] for p in packages})]
    lines += [f'    "{literal(prefix)}";' for prefix in sorted(prefixes)]
    return GUARD_FILE.format(owner=owner), "\n".join(lines + ["};", ""])


def uu_guard_missing(root: str, packages: list[str]) -> list[str]:
    """Those of ``packages`` (names; ``name:arch`` is taken as ``name``) that are installed and that
    unattended-upgrades' Package-Blacklist does not cover, sorted: each one an unattended run may upgrade behind
    the holds' back. A package not installed needs no guard."""
    patterns = uu_blacklist(root)
    installed = {e["package"] for e in stanzas(root) if e["installed"]}
    names = {p.split(":", 1)[0] for p in packages}
    return sorted(n for n in names if n in installed and not uu_blacklisted(n, patterns))
