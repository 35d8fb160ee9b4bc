"""The defaults: the fields the user left out, filled newest-first by a small depth-first search that takes a
value only when no rule involving it fails (within a budget; else the fewest conflicts, which are reported)."""

from __future__ import annotations

from dataclasses import dataclass

from .draft import _conflicts, _Draft
from .matrix import _Catalog
from .model import NodeInfo
from .rules import RULES
from .versions import _major, _matches, _release

_SEARCH_BUDGET = 20_000
# Fields the search may fill, in priority order: an earlier field gets its newest consistent value first.
_SEARCH_ORDER = ("driver", "cuda", "gcc", "pytorch", "tensorflow", "cudnn", "nccl")
_NOT_NOTED = ("gpu", "gpu_operations", "venv_base", "distro_cuda")  # context fields a note need not repeat


@dataclass
class _Filler:
    """Fills the fields the user left out: newest consistent value first, by depth-first search."""

    cat: _Catalog
    draft: _Draft
    node: NodeInfo
    os_row: dict | None
    budget: int = _SEARCH_BUDGET  # candidate checks before settling for the fewest conflicts

    def candidates(self, name: str) -> list[str]:
        """Values field ``name`` may take now, most preferred first."""
        cat, values = self.cat, self.draft.values
        if name == "driver":
            loaded = self.node.driver_loaded
            return ([loaded] if loaded and cat.find("driver", loaded) else []) + cat.known("driver")
        if name == "gcc":
            found = [str(_major(self.node.gcc))] if self.node.gcc else []
            return list(dict.fromkeys(found + [row["version"] for row in (self.os_row or {}).get("gcc", ())]))
        if name == "nccl":
            return _nccl_preference(cat, values.get("cuda"))
        spec = self.draft.specs.get(name)
        return [v for v in cat.known(name) if spec is None or _matches(spec, v)]

    def search(self, fields: list[str]) -> bool:
        """Give each field its first candidate that breaks no rule with what is already set."""
        if not fields:
            return True
        name, rest = fields[0], fields[1:]
        for value in self.candidates(name):
            self.budget -= 1
            if self.budget < 0:
                break
            self.draft.values[name] = value
            if not _conflicts(self.cat, self.draft, only=name) and self.search(rest):
                return True
        self.draft.values[name] = None
        return False

    def settle(self, fields: list[str]) -> None:
        """No consistent set exists: take the candidate with the fewest conflicts (they get reported)."""
        for name in fields:
            scores = []
            for value in self.candidates(name):
                self.draft.values[name] = value
                scores.append((len(_conflicts(self.cat, self.draft, only=name)), value))
            self.draft.values[name] = min(scores, key=lambda score: score[0])[1]

    def why(self, name: str, later: list[str]) -> str:
        """A note on the value chosen for ``name``, naming the set values it was checked against."""
        values, node = self.draft.values, self.node
        if name == "driver" and values[name] == node.driver_loaded:
            return f"driver: {values[name]} (loaded on the nodes)"
        if name == "gcc" and node.gcc and values[name] == str(_major(node.gcc)):
            return f"gcc: {values[name]} (the node's compiler)"
        context = []
        for rule in RULES:
            other = next((f for f in rule.fields if f != name), None) if name in rule.fields else None
            if values.get(other) is not None and other not in later and other not in _NOT_NOTED:
                value = values[other]
                context.append(f"{other} {', '.join(dict.fromkeys(value)) if other == 'gpus' else value}")
        if not context:
            return f"{name}: {values[name]} (newest known)"
        return f"{name}: {values[name]} (newest consistent with {', '.join(dict.fromkeys(context))})"

    def fill(self, frameworks: list[str]) -> None:
        fields = [name for name in _open_fields(self.draft, frameworks) if self.candidates(name)]
        if not self.search(fields):
            self.settle(fields)
        self.draft.notes.extend(self.why(name, fields[i + 1 :]) for i, name in enumerate(fields))


def _nccl_preference(cat: _Catalog, cuda: str | None) -> list[str]:
    """NCCL releases, newest first within: a build for exactly cuda x.y, one for an older x.y, the rest."""

    def rank(row: dict) -> int:
        builds = [_release(build) for build in row["cuda"]]
        here = (_release(cuda) or ())[:2]
        if here in builds:
            return 0
        return 1 if any(b[0] == here[0] and b <= here for b in builds) else 2

    rows = sorted(cat.points("nccl"), key=lambda row: _release(row["version"]), reverse=True)
    return [row["version"] for row in sorted(rows, key=rank)] if cuda else [row["version"] for row in rows]


def _open_fields(draft: _Draft, frameworks: list[str]) -> list[str]:
    """The fields to fill, in search order."""
    values = draft.values
    gpu_fields = ("driver", "cuda", "cudnn", "nccl") if values["gpu"] else ()
    if values["gpu"] and (values.get("gpu_source") == "env" or values.get("distro_cuda")):
        gpu_fields = ("driver", "cuda")  # cuDNN and NCCL come with the framework's wheels
    wanted = {*gpu_fields, "gcc", *(f for f in ("pytorch", "tensorflow") if f in frameworks)}
    return [name for name in _SEARCH_ORDER if name in wanted and values.get(name) is None]
