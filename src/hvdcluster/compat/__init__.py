"""The version matrix (``data/compat.yaml``) and the resolver.

:func:`resolve` turns the partial ``stack`` of ``hosts.yaml`` into a complete, consistent one, or refuses it
with every conflict listed. Each rule in :data:`RULES` compares two *fields* (``cuda`` and ``driver``,
``horovod`` and ``gcc``, ...). Fields the user left out are filled newest-first by a small depth-first
search that accepts a value only when no rule involving it fails; conflicts among the values the user
wrote are never worked around, they are reported.

A row of the matrix names one verified release (``version: "9.10.2"``) or states a range its source gives
(``versions: "9.0-9.10"``): a release between verified rows is judged by the range that covers it, one no
row or range covers is refused as unknown. Only conflicts that involve a value the user wrote (or a node
reported) are listed, each naming the hosts.yaml line of that value when the caller passes the lines; a
value the matrix does not know is reported once, as unknown, not again in every rule it takes part in.

The package: :mod:`.matrix` (the matrix and its lookups), :mod:`.versions`, :mod:`.rules`, :mod:`.draft` (the
working state), :mod:`.search` (the defaults), :mod:`.resolver` (:func:`resolve`) and :mod:`.model`.
"""

from __future__ import annotations

# Every name importable from hvdcluster.compat when it was one module still is (``__all__`` is unchanged).
from .matrix import gpu_row, load_matrix, nvidia_wheel_sha256, preflight_vars, sdist_sha256
from .model import Conflict, NodeInfo, Plan, ResolveError
from .resolver import DEFAULT_PREFIX, resolve
from .rules import RULES, Rule

__all__ = [
    "RULES",
    "Conflict",
    "NodeInfo",
    "Plan",
    "ResolveError",
    "Rule",
    "gpu_row",
    "load_matrix",
    "resolve",
    "sdist_sha256",
]
