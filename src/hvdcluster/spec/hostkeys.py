"""Pinned SSH host keys: ``host_key`` values, OpenSSH known_hosts files (``ssh.known_hosts``) and how a node's
pins are chosen from them, matched as OpenSSH matches host patterns (hashed names too)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re

from yaml.nodes import Node

from .files import _existing_file, _file_bytes
from .loader import _Context
from .model import KnownHost, KnownHostsFile
from .schema import _CONTROL, _string

MAX_KNOWN_HOSTS_BYTES = 8 << 20  # ssh.known_hosts: 10 000 nodes with three keys each are about 4 MiB


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
