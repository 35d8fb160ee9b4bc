"""Controller-side files ``hosts.yaml`` names: resolved against its folder, read with the loader's bounds and
judged by their content (a private SSH key, PEM certificates)."""

from __future__ import annotations

import base64
import binascii
import os
import re
import ssl

from yaml.nodes import Node

from .loader import MAX_FILE_BYTES, FileProblem, _Context, read_regular_file
from .schema import _string
from .values import _url
from ..redact import has_credentials

MAX_CA_BUNDLE_BYTES = 8 << 20  # a distribution's whole trust store is about 200 KiB


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


def _tarball(ctx: _Context, node: Node, field: str) -> str:
    """The Open MPI tarball: an http(s) URL, or a file on the controller (relative to hosts.yaml; it must exist)."""
    value = _string(ctx, node, field)
    return _url(ctx, node, field) if "://" in value else _existing_file(ctx, node, field)


def _plain_tarball(ctx: _Context, node: Node, field: str) -> str:
    """A tarball as :func:`_tarball` takes it, whose URL carries no credentials (a user, a query): only the Open MPI
    URL reaches the run through the environment (hvdcluster.redact); any other is written into the inventory."""
    value = _tarball(ctx, node, field)
    if has_credentials(value):
        raise ctx.error(node, field, "a URL with a user or a query is not taken here (the inventory would hold it): "
                                     "name a mirror URL without credentials, or a copy on the controller")
    return value
