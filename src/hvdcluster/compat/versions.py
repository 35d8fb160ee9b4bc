"""Version arithmetic the matrix needs: release tuples, series, driver branches, inclusive ranges."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version


def _release(value: Any) -> tuple[int, ...] | None:
    """``"12.4.1"`` -> ``(12, 4, 1)``; None for anything that is not a version."""
    try:
        return Version(str(value)).release
    except InvalidVersion:
        return None


def _mm(value: str) -> str:
    """Major.minor of a version string: ``"12.4.1"`` -> ``"12.4"``."""
    return ".".join(str(part) for part in (_release(value) or ())[:2])


def _major(value: str) -> int:
    return (_release(value) or (0,))[0]


def _same_series(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Whether one release tuple is a prefix of the other: ``2.3`` and ``2.3.1`` name the same series."""
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def _driver_at_least(driver: str, minimum: str) -> bool:
    """Driver comparison; a bare branch (``"550"``) stands for the newest release of that branch."""
    have, need = _release(driver), _release(minimum)
    if have is None or need is None:
        return True
    if len(have) == 1 or len(need) == 1:
        return have[0] >= need[0]
    return have >= need


def _in_range(value: str, low: str, high: str) -> bool:
    """Whether major.minor of ``value`` lies in the inclusive range ``low``..``high``."""
    here = (_release(value) or ())[:2]
    return (_release(low) or ()) <= here <= (_release(high) or ())


def _bounds(versions: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A row's ``versions``: ``"9.0-9.10"`` (inclusive) or one series ``"9.11"``, as release tuples."""
    low, _, high = str(versions).partition("-")
    return _release(low.strip()) or (), _release((high or low).strip()) or ()


def _covers(versions: str, value: str) -> bool:
    """Whether ``value`` lies in a row's range, each bound compared at its own precision: ``9.0-9.10`` covers
    9.0.0 and 9.10.2, not 9.11.0; ``9.11`` covers every 9.11.x."""
    want = _release(value)
    low, high = _bounds(versions)
    return want is not None and len(want) >= len(low) and want[: len(low)] >= low and want[: len(high)] <= high


def _matches(spec: str | SpecifierSet, value: str) -> bool:
    try:
        return SpecifierSet(str(spec)).contains(Version(value), prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return False


def _newest_first(values: Iterable[str]) -> list[str]:
    return sorted(values, key=lambda v: _release(v) or (), reverse=True)


def _listing(values: Iterable[str]) -> str:
    return ", ".join(_newest_first(set(values))[::-1])
