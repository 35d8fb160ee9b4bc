"""The ``hosts.yaml`` model and loader.

Loading happens in two steps. ``yaml.compose`` turns the text into a node tree in which every node keeps
its start mark; the validators below then walk that tree node by node and build frozen dataclasses. So
every mistake is reported as one :class:`~hvdcluster.errors.SpecError` naming the exact line, column and
field path (``hosts[1].port``, ``stack.mpi.source``; list indices are 0-based).

Scalars are judged by their YAML tag, not by Python's idea of their type: ``port: "22"`` is a string,
``port: true`` a boolean (neither is a port), and ``cuda: 12.10`` a float that YAML already read as 12.1,
so versions must be quoted. ``null`` for an optional field means "unset". Keys repeated in one mapping
are rejected (YAML would silently keep the last one); merge keys (``<<: *defaults``) are honoured.

The input is treated as hostile: only a regular file of at most 1 MiB is read (a FIFO, a device or a folder
is refused before a byte is read); nesting, aliases and merges are bounded, so an alias bomb, a recursive
alias or a deeply nested document is one SpecError, never a hang or a RecursionError. Every string is data:
control characters and Jinja delimiters (``{{``, ``{%``, ``{#``) are refused everywhere, URLs hold URL
characters only, the environment prefix is a safe absolute path outside the system folders, packages are
PEP 508 requirements (no pip options, no URLs), and the files named (SSH key, CA bundle) are read and judged:
a private key, PEM certificates.

The package follows those steps: :mod:`.loader` (the bounded read and compose), :mod:`.schema` (the validator
combinators), the domain checks (:mod:`.values`, :mod:`.files`, :mod:`.conda`, :mod:`.names`, :mod:`.hostkeys`),
:mod:`.document` (the sections and the entry points) and :mod:`.model` (what they build).
"""

from __future__ import annotations

# Every name importable from hvdcluster.spec when it was one module still is (``__all__`` is unchanged).
from .document import NOT_WITH_BUNDLE, load, loads
from .files import MAX_CA_BUNDLE_BYTES
from .hostkeys import MAX_KNOWN_HOSTS_BYTES, host_matches, known_hosts_name, parse_known_hosts
from .loader import MAX_DEPTH, MAX_FILE_BYTES, MAX_NODES, FileProblem, read_regular_file
from .model import ClusterSpec, HostSpec, JumpSpec, KnownHost, KnownHostsFile, NetworkSpec, SchedulerSpec, SshSpec
from .values import SYSTEM_FOLDERS, SYSTEM_TREES

__all__ = ["ClusterSpec", "HostSpec", "JumpSpec", "KnownHost", "NetworkSpec", "SchedulerSpec", "SshSpec", "host_matches",
           "load", "loads", "parse_known_hosts"]
