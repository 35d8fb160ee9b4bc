"""The GPU and compiler limits of the version matrix, judged one way: by the resolver when it plans a stack
(hvdcluster.compat, from the user's hosts.yaml) and by the pre-flight on the nodes it found (plugins/filter/
hvd_preflight.py, with the rows the inventory carries as hvd_preflight_gpu_rules and hvd_preflight_gcc_max).
Standard library only."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any


def release(value: Any) -> tuple[int, ...]:
    """The numbers of a version as the tools print it: ``"12.4.1"`` -> ``(12, 4, 1)``, ``"12.2.0-14"`` ->
    ``(12, 2, 0)``, ``"550"`` -> ``(550,)``; ``()`` for no version."""
    found = re.match(r"\s*v?(\d+(?:\.\d+)*)", str(value or ""))
    return tuple(int(part) for part in found.group(1).split(".")) if found else ()


def major(value: Any) -> int:
    return (release(value) or (0,))[0]


def gpu_row(rows: Any, name: str) -> Mapping[str, Any] | None:
    """The matrix row of a GPU model as nvidia-smi names it: the first of ``rows`` (the matrix's ``gpus``, or the
    inventory's hvd_preflight_gpu_rules) one of whose ``match`` patterns finds ``name`` (case ignored); None."""
    return next((row for row in rows or [] if any(re.search(p, name, re.IGNORECASE) for p in row.get("match", []))),
                None)


def cuda_outside(gpu: Mapping[str, Any], cuda: str) -> str | None:
    """The bound of a GPU's matrix row (``cuda_min``, ``cuda_max``; major.minor, inclusive) that ``cuda`` breaks, as
    ``">= 11.0"`` or ``"<= 12.9"``; None when the GPU runs that CUDA."""
    low, high = str(gpu.get("cuda_min", "0")), str(gpu.get("cuda_max", "999"))
    here = release(cuda)[:2]
    if here < release(low):
        return f">= {low}"
    if here > release(high):
        return f"<= {high}"
    return None


def driver_above(gpu: Mapping[str, Any], driver: str) -> bool:
    """Whether ``driver``'s branch is newer than the last one that supports the GPU (its row's ``driver_max``)."""
    return "driver_max" in gpu and major(driver) > int(gpu["driver_max"])


def gcc_above(gcc: str, gcc_max: Any) -> bool:
    """Whether the host compiler ``gcc`` is newer than the newest one nvcc accepts (``gcc_max``, a major)."""
    return bool(str(gcc_max or "").strip()) and major(gcc) > int(gcc_max)
