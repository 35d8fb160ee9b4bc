"""Domain scalars of ``hosts.yaml``: ports, names, digests, versions, URLs, PEP 508 requirements and the
environment prefix. Every one is a string validator over :func:`~hvdcluster.spec.schema._string`: data only."""

from __future__ import annotations

import posixpath
import re
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from yaml.nodes import Node

from .loader import _Context
from .schema import _integer, _matching, _string, _version_like


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


_cluster_name = _matching(
    r"[a-z0-9][a-z0-9_-]{0,62}", "a valid cluster name (lower-case letters, digits, '-' and '_'; at most 63)"
)
_user_name = _matching(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", "a valid user name")
_sha256_text = _matching(r"[0-9a-fA-F]{64}", "a sha256 digest (64 hexadecimal digits)")


def _sha256(ctx: _Context, node: Node, field: str) -> str:
    return str(_sha256_text(ctx, node, field)).lower()


_version = _version_like(r"\d+(\.[0-9A-Za-z]+)*([+~-][0-9A-Za-z.+~-]+)?", "12.4")
_driver_version = _version_like(r"\d+(\.\d+){0,2}", "550")  # a branch "550" or an exact "550.54.15"


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


def _url_any(ctx: _Context, node: Node, field: str) -> str:
    """A URL of any scheme but with the characters and form :func:`_url` requires (file:// for a local mirror)."""
    value = _string(ctx, node, field)
    if value.startswith(("http://", "https://")):
        return _url(ctx, node, field)
    if not value.startswith("file:///") or not _URL_CHARS.fullmatch(value):
        raise ctx.error(node, field, f"{value!r} is not an http://, https:// or file:/// URL")
    return value


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
