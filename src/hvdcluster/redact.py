"""Credentials in URLs: kept out of everything hvdcluster prints and keeps.

A URL in hosts.yaml may carry a secret: a user and password (``https://user:pass@mirror/...``) or a token in its query
(``...?token=...``). hvdcluster needs the URL itself only where the download happens, so:

- whatever it prints (stdout and stderr pass :func:`redact_text` with :func:`hvdcluster.output.printable`), the
  inventory it writes, the records it keeps and the environment ansible-runner records with a run show the URL with
  its user information and every query value replaced by ``<redacted>``;
- the Open MPI tarball's URL (``stack.mpi.url``) reaches the run through the environment variable
  :data:`OPENMPI_URL_ENV` (:func:`run_env`), which the inventory names (``lookup('ansible.builtin.env', ...)``) instead
  of holding the secret; a hand-run playbook exports it; the download task runs with ``no_log``.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

REDACTED = "<redacted>"
OPENMPI_URL_ENV = "HVD_OPENMPI_URL"

# A URL in running text: a scheme, then everything up to a blank or a quote, less a closing punctuation mark.
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]*[^\s'\"<>`.,:;)\]]")


def has_credentials(url: str) -> bool:
    """Whether ``url`` carries user information or a query (either can hold a secret)."""
    try:
        parts = urlsplit(str(url))
    except ValueError:
        return False
    return "://" in str(url) and ("@" in parts.netloc or bool(parts.query))


def redact_url(url: str) -> str:
    """``url`` with its user information and every query value replaced by ``<redacted>`` (the names of the query's
    parameters kept, so the reader still sees what was there)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rsplit('@', 1)[1]}"
    query = "&".join(f"{pair.split('=', 1)[0]}={REDACTED}" if "=" in pair else REDACTED
                     for pair in parts.query.split("&")) if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_text(text: str) -> str:
    """Every URL in ``text`` with its credentials redacted (:func:`redact_url`); the rest unchanged."""
    if "://" not in text:
        return text
    return _URL.sub(lambda match: redact_url(match.group()) if has_credentials(match.group()) else match.group(), text)


def redact_data(value: Any) -> Any:
    """``value`` (dicts and lists walked) with the credentials of every URL in its strings redacted."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {key: redact_data(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_data(item) for item in value]
    return value


def openmpi_url(stack: dict[str, Any]) -> str:
    """``stack.mpi.url`` when it carries credentials (and so travels through :data:`OPENMPI_URL_ENV`), else ""."""
    url = str((stack.get("mpi") or {}).get("url") or "")
    return url if has_credentials(url) else ""


def run_env(cluster: Any) -> dict[str, str]:
    """The secrets a converge of ``cluster`` (a ClusterSpec) needs in its environment: the Open MPI URL's."""
    url = openmpi_url(cluster.stack or {})
    return {OPENMPI_URL_ENV: url} if url else {}
