"""The resolver's working state: one value per field from what the user wrote and what the probe found,
which of them were given (and on which hosts.yaml line), and the rule conflicts among them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from .matrix import _Catalog
from .model import Conflict, NodeInfo
from .rules import RULES
from .versions import _release

# Where each field lives in hosts.yaml, for naming a choice ("stack.cuda=12.4").
_PATHS = {
    "driver": "stack.driver",
    "cuda": "stack.cuda",
    "cudnn": "stack.cudnn",
    "nccl": "stack.nccl",
    "gcc": "stack.gcc",
    "python": "stack.python.version",
    "pytorch": "stack.python.packages",
    "tensorflow": "stack.python.packages",
    "horovod": "stack.horovod.version",
    "mpi": "stack.mpi.version",
    "gpu_operations": "stack.horovod.gpu_operations",
    "gpus": "node.gpus",
    "venv_base": "node.python",
    "gpu": "gpu",
    "distro_cuda": "stack.gpu_repo",  # gpu_repo distro: the CUDA of the node's own archive
}
_PACKAGE_NAMES = {"torch": "pytorch", "tensorflow": "tensorflow", "tensorflow-cpu": "tensorflow"}
_NOT_VERSIONS = ("gpu", "gpu_operations", "gpus")


@dataclass
class _Draft:
    """The working state: one value per field, which were given, and how to show them."""

    values: dict[str, Any]
    given: set[str]
    shown: dict[str, str] = field(default_factory=dict)  # display overrides ("torch==2.3.1")
    specs: dict[str, SpecifierSet] = field(default_factory=dict)  # ranges a default must honour
    notes: list[str] = field(default_factory=list)
    lines: dict[str, int] = field(default_factory=dict)  # field -> hosts.yaml line of the value the user wrote
    path: str = "hosts.yaml"  # shown with the lines

    def where(self, *names: str) -> str:
        """``hosts.yaml:LINE`` of the first of ``names`` the user wrote, or "" when no line is known."""
        line = next((self.lines[n] for n in names if n in self.given and n in self.lines), None)
        return f"{self.path}:{line}" if line else ""

    def label(self, name: str) -> str:
        value = self.values.get(name)
        if name == "gpus":
            text = ", ".join(dict.fromkeys(value or ()))
        elif name == "gpu":
            text = "true" if value else "false (CPU-only stack)"
        else:
            text = self.shown.get(name, str(value))
        default = "" if name in self.given or name in ("gpus", "gpu", "venv_base") else " (default)"
        line = f" (line {self.lines[name]})" if name in self.given and name in self.lines else ""
        return f"{_PATHS[name]}={text}{default}{line}"


def _usable(cat: _Catalog, name: str, value: Any) -> bool:
    """Non-version fields always; version fields only when they parse and, for the kinds the matrix lists,
    when it knows them (an unknown version is reported once, as unknown, not in every rule)."""
    if name in _NOT_VERSIONS:
        return True
    if _release(value) is None:
        return False
    return name not in cat.rows or cat.find(name, value) is not None


def _conflicts(cat: _Catalog, draft: _Draft, only: str | None = None) -> list[Conflict]:
    """Every rule failure among set fields (or only those involving field ``only``)."""
    found = []
    for rule in RULES:
        if only is not None and only not in rule.fields:
            continue
        a, b = (draft.values.get(name) for name in rule.fields)
        if a is None or b is None or not (_usable(cat, rule.fields[0], a) and _usable(cat, rule.fields[1], b)):
            continue
        for message, source in rule.check(cat, a, b):
            found.append(Conflict(rule.id, message, tuple(draft.label(n) for n in rule.fields), source,
                                  draft.where(*rule.fields)))
    return found


# Values that are not the user's choice but facts about the nodes: a conflict with one of them is listed.
_OBSERVED = ("gpus", "venv_base")


def _involving_the_user(draft: _Draft, conflicts: list[Conflict]) -> list[Conflict]:
    """The conflicts that involve a value the user wrote or a node reported; all of them when none does
    (an inconsistent stack is never accepted, but defaults are not blamed next to the user's own mistake)."""
    rules = {rule.id: rule for rule in RULES}
    mine = {name for name in draft.given if name != "gpu"} | {n for n in _OBSERVED if draft.values.get(n)}
    picked = [c for c in conflicts if c.rule not in rules or mine & set(rules[c.rule].fields)]
    return picked or conflicts


# --------------------------------------------------------------------------------------------- inputs


def _requirements(packages: Iterable[str]) -> Iterable[tuple[str, Requirement]]:
    """The entries of ``python.packages`` that parse as requirements, each with its parse (pip refuses the rest)."""
    for entry in packages:
        try:
            yield entry, Requirement(entry)
        except InvalidRequirement:
            continue


def _package_pins(packages: Iterable[str]) -> dict[str, tuple[str, Requirement]]:
    """Framework requirements among ``python.packages``: kind -> (the entry, its parsed requirement)."""
    pins = {}
    for entry, req in _requirements(packages):
        kind = _PACKAGE_NAMES.get(canonicalize_name(req.name))
        if kind:
            pins[kind] = (entry, req)
    return pins


def _exact(req: Requirement) -> str | None:
    """The version of an ``==X`` requirement without wildcard, else None."""
    specs = list(req.specifier)
    if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
        return specs[0].version
    return None


def _is_gpu(stack: dict, node: NodeInfo, gpu: bool | None) -> bool:
    """CPU-only when asked, when gpu_operations is none, or when nothing hints at a GPU."""
    ops = (stack.get("horovod") or {}).get("gpu_operations")
    if gpu is not None:
        return gpu
    if ops == "none":
        return False
    hints = any(stack.get(k) for k in ("driver", "cuda", "cudnn", "nccl", "gpu_source", "gpu_repo", "without_device"))
    return bool(hints or ops in ("nccl", "mpi") or node.gpus)


def _draft(stack: dict, node: NodeInfo, gpu: bool, lines: Mapping[str, int], path: str) -> _Draft:
    """The working state from what the user wrote and what the probe found."""
    python = stack.get("python") or {}
    horovod = stack.get("horovod") or {}
    mpi = stack.get("mpi") or {}
    values: dict[str, Any] = {name: stack.get(name) for name in ("driver", "cuda", "cudnn", "nccl", "gcc")}
    values.update(
        python=python.get("version"),
        horovod=horovod.get("version"),
        mpi=mpi.get("version"),
        gpu_operations=horovod.get("gpu_operations"),
        gpus=tuple(node.gpus) or None,
        gpu=gpu,
    )
    draft = _Draft(values, {k for k, v in values.items() if v is not None}, path=path)
    draft.lines = {name: lines[_PATHS[name]] for name in draft.given if _PATHS.get(name) in lines}
    packages = list(python.get("packages") or ())
    for kind, (entry, req) in _package_pins(packages).items():
        version = _exact(req)
        if version:
            values[kind] = version
            draft.given.add(kind)
            draft.shown[kind] = entry
            line = lines.get(f"stack.python.packages[{packages.index(entry)}]")
            if line:
                draft.lines[kind] = line
        elif req.specifier:
            draft.specs[kind] = req.specifier
    if (python.get("manager") or "venv") == "venv" and node.python:
        values["venv_base"] = node.python
    return draft
