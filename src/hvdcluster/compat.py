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
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from .errors import HvdError

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

DEFAULT_PREFIX = "/opt/hvd/env"
_SEARCH_BUDGET = 20_000

# --------------------------------------------------------------------------------------------- model


@dataclass(frozen=True)
class NodeInfo:
    """What a read-only probe of the nodes found; every field is optional."""

    os_id: str | None = None  # "debian"
    os_version: str | None = None  # "12"
    kernel: str | None = None
    gcc: str | None = None  # "12.2.0"
    python: str | None = None  # "3.11.2"
    gpus: tuple[str, ...] = ()  # model names as nvidia-smi prints them
    driver_loaded: str | None = None  # "550.54.15"


@dataclass(frozen=True)
class Conflict:
    """Two choices that cannot go together, with the matrix row that says so."""

    rule: str  # short rule id, e.g. "cuda-needs-driver"
    message: str  # one line naming both choices
    choices: tuple[str, str]  # e.g. ("stack.cuda=12.4 (line 4)", "stack.driver=535 (default)")
    source: str  # URL of the matrix row
    where: str = ""  # "hosts.yaml:4": the line of the first value the user wrote, when the lines are known


class ResolveError(HvdError):
    """The stack cannot be made consistent; ``conflicts`` lists every reason, ``str()`` one line each."""

    def __init__(self, conflicts: Iterable[Conflict]) -> None:
        self.conflicts = list(conflicts)
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(
            f"{c.where + ': ' if c.where else ''}{c.rule}: {c.message} [{' vs '.join(c.choices)}] (see {c.source})"
            for c in self.conflicts
        )


@dataclass(frozen=True)
class Plan:
    """A fully resolved stack, why each defaulted value was chosen, and the Horovod patches to apply."""

    stack: dict
    notes: tuple[str, ...]
    patches: tuple[str, ...]


def preflight_vars(stack: dict) -> dict[str, Any]:
    """What hvd_preflight checks GPU nodes against for this (resolved) stack: the GPU rules of the matrix
    and the newest gcc its nvcc accepts; nothing for a CPU-only stack."""
    m = _matrix()
    cuda = stack.get("cuda")
    if not cuda:
        return {}
    out: dict[str, Any] = {
        "hvd_preflight_gpu_rules": [
            {k: row[k] for k in ("arch", "cc", "match", "cuda_min", "cuda_max", "driver_max") if k in row}
            for row in m["gpus"]
        ]
    }
    row = _Catalog(m).gcc_limit(str(cuda))
    if row:
        out["hvd_preflight_gcc_max"] = str(row["gcc_max"])
    return out


# --------------------------------------------------------------------------------------------- matrix


@functools.cache
def _matrix() -> dict:
    text = resources.files("hvdcluster.data").joinpath("compat.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def load_matrix() -> dict:
    """The version matrix as plain data (a fresh copy: callers may change it)."""
    return copy.deepcopy(_matrix())


def gpu_row(name: str) -> dict | None:
    """The matrix row (arch, cc, cuda and driver limits) of a GPU model as nvidia-smi names it, or None."""
    row = _Catalog(_matrix()).gpu(name)
    return copy.deepcopy(row) if row else None


def sdist_sha256(version: str | None, package: str = "horovod") -> str:
    """The sha256 of ``package``'s source distribution of ``version`` from the matrix's ``artifacts``; "" when
    the matrix pins none (the role then refuses to build rather than trust an unpinned download)."""
    for row in _matrix().get("artifacts", {}).get(package, ()):
        if version is not None and row["version"] == str(version):
            return str(row["sha256"])
    return ""


def nvidia_wheel_sha256() -> dict[str, list[str]]:
    """``name==version`` -> the sha256 of each of its files, for NVIDIA's wheels (the matrix's
    ``artifacts.nvidia_wheels``): what hvd_gpu_component checks every wheel it unpacks against."""
    return {
        f"{row['name']}=={row['version']}": [str(digest) for digest in row["sha256"]]
        for row in _matrix().get("artifacts", {}).get("nvidia_wheels", ())
    }


# --------------------------------------------------------------------------------------------- versions


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


# --------------------------------------------------------------------------------------------- lookups


class _Catalog:
    """Lookups into the matrix; each returns a row (a dict) or None when the value is not listed."""

    def __init__(self, matrix: dict) -> None:
        self.m = matrix
        self.rows = {
            "cuda": (matrix["cuda_driver"]["toolkits"], "cuda"),
            "driver": (matrix["driver_branches"], "branch"),
            "nccl": (matrix["nccl"]["releases"], "version"),
            "cudnn": (matrix["cudnn"]["releases"], "version"),
            "pytorch": (matrix["frameworks"]["pytorch"], "version"),
            "tensorflow": (matrix["frameworks"]["tensorflow"], "version"),
            "horovod": (matrix["horovod"], "version"),
        }

    def points(self, kind: str) -> list[dict]:
        """The rows of verified releases (those naming one version)."""
        rows, key = self.rows[kind]
        return [row for row in rows if key in row]

    def ranges(self, kind: str) -> list[dict]:
        """The rows stating a range of releases (``versions: "9.0-9.10"``)."""
        rows, _key = self.rows[kind]
        return [row for row in rows if "versions" in row]

    def find(self, kind: str, value: str | None) -> dict | None:
        """The row naming ``value``: exactly, or as the same series (``2.3`` for ``2.3.1``), newest wins; else
        the range row that covers it; None when neither does."""
        want = _release(value)
        if want is None:
            return None
        _rows, key = self.rows[kind]
        if kind in ("cuda", "driver"):  # keyed by x.y and by branch
            want = want[: 2 if kind == "cuda" else 1]
        hits = [row for row in self.points(kind) if _same_series(_release(row[key]) or (), want)]
        if hits:
            return max(hits, key=lambda row: _release(row[key]))
        return next((row for row in self.ranges(kind) if _covers(row["versions"], str(value))), None)

    def known(self, kind: str) -> list[str]:
        """The verified releases, newest first (defaults are only ever taken from these)."""
        _rows, key = self.rows[kind]
        return _newest_first(row[key] for row in self.points(kind))

    def minor_compat(self, cuda: str) -> dict | None:
        return next((r for r in self.m["cuda_driver"]["minor_compat"] if r["major"] == _major(cuda)), None)

    def gcc_limit(self, cuda: str) -> dict | None:
        return next((r for r in self.m["cuda_gcc"] if _in_range(cuda, r["first"], r["last"])), None)

    def gpu(self, name: str) -> dict | None:
        return next(
            (row for row in self.m["gpus"] if any(re.search(p, name, re.IGNORECASE) for p in row["match"])), None
        )

    def gpus(self, names: Iterable[str]) -> Iterator[tuple[str, dict]]:
        """(name, row) for each distinct GPU model found in the matrix."""
        for name in dict.fromkeys(names):
            row = self.gpu(name)
            if row is not None:
                yield name, row

    def os(self, node: NodeInfo) -> dict | None:
        if not node.os_id or not node.os_version:
            return None
        version = node.os_version
        return next(
            (
                row
                for row in self.m["os"]
                if node.os_id.lower() in row["ids"]
                and (version == row["version"] or version.startswith(row["version"] + "."))
            ),
            None,
        )

    def horovod_breaks(self, horovod: str, component: str) -> Iterator[dict]:
        """The breaks of a Horovod release on ``component`` that no carried patch lifts."""
        row = self.find("horovod", horovod) or {}
        fixed = {patch["fixes"] for patch in row.get("patches", ())}
        for brk in row.get("breaks", ()):
            if Requirement(brk["when"]).name == component and brk["when"] not in fixed:
                yield brk

    def horovod_patches(self, horovod: str, values: dict[str, Any]) -> list[dict]:
        """The carried patches whose fixed break applies to ``values``."""
        row = self.find("horovod", horovod) or {}
        wanted = []
        for patch in row.get("patches", ()):
            when = Requirement(patch["fixes"])
            value = values.get(when.name)
            if value and _matches(when.specifier, value):
                wanted.append(patch)
        return wanted


# --------------------------------------------------------------------------------------------- rules
# A check gets the catalog and the values of the rule's two fields (never None) and yields
# (message, source) for each thing wrong with the pair.

Finding = tuple[str, str]


def _cuda_needs_driver(cat: _Catalog, cuda: str, driver: str) -> Iterator[Finding]:
    row = cat.find("cuda", cuda)
    if row and not _driver_at_least(driver, row["driver"]):
        floor = cat.minor_compat(cuda)
        compat = ""
        if floor and _driver_at_least(driver, floor["driver"]):
            compat = (
                f"; driver {driver} would run cuda {_major(cuda)}.x only through minor-version compatibility"
                " (limited features, no PTX JIT)"
            )
        yield f"cuda {cuda} needs driver >= {row['driver']}, but driver {driver} is older{compat}", row["source"]


def _driver_vs_gpu(cat: _Catalog, driver: str, gpus: tuple[str, ...]) -> Iterator[Finding]:
    branch = cat.find("driver", driver)
    for name, gpu in cat.gpus(gpus):
        if "driver_max" in gpu and _major(driver) > int(gpu["driver_max"]):
            yield (
                f"{name} ({gpu['arch']}) is supported up to driver branch {gpu['driver_max']}, not driver {driver}",
                gpu["source"],
            )
        elif branch and "cuda_min" in gpu and _release(branch["cuda"]) < _release(gpu["cuda_min"]):
            yield (
                f"{name} ({gpu['arch']}) needs cuda >= {gpu['cuda_min']}, "
                f"but driver {driver} runs cuda <= {branch['cuda']}",
                gpu["source"],
            )


def _cuda_vs_gpu(cat: _Catalog, cuda: str, gpus: tuple[str, ...]) -> Iterator[Finding]:
    for name, gpu in cat.gpus(gpus):
        low, high = gpu.get("cuda_min", "0"), gpu.get("cuda_max", "999")
        if not _in_range(cuda, low, high):
            bound = f">= {low}" if _release(cuda)[:2] < _release(low) else f"<= {high}"
            yield (
                f"{name} ({gpu['arch']}, sm_{gpu['cc'].replace('.', '')}) needs cuda {bound}, not cuda {cuda}",
                gpu["source"],
            )


def _cuda_vs_gcc(cat: _Catalog, cuda: str, gcc: str) -> Iterator[Finding]:
    row = cat.gcc_limit(cuda)
    if row and _major(gcc) > row["gcc_max"]:
        yield f"cuda {cuda} accepts gcc <= {row['gcc_max']} (nvcc refuses newer), not gcc {gcc}", row["source"]


def _nccl_vs_cuda(cat: _Catalog, nccl: str, cuda: str) -> Iterator[Finding]:
    row = cat.find("nccl", nccl)
    if row and _major(cuda) not in {_major(build) for build in row["cuda"]}:
        builds = ", ".join(row["cuda"])
        yield f"nccl {nccl} is built for cuda {builds} only, none for cuda {cuda}", row["source"]


def _cudnn_vs_cuda(cat: _Catalog, cudnn: str, cuda: str) -> Iterator[Finding]:
    row = cat.find("cudnn", cudnn)
    if row and _major(cuda) not in row["cuda_majors"]:
        majors = ", ".join(f"{m}.x" for m in row["cuda_majors"])
        yield f"cudnn {cudnn} is built for cuda {majors} only, not cuda {cuda}", row["source"]


def _cudnn_vs_gpu(cat: _Catalog, cudnn: str, gpus: tuple[str, ...]) -> Iterator[Finding]:
    row = cat.find("cudnn", cudnn)
    if row and "min_cc" in row:
        for name, gpu in cat.gpus(gpus):
            if _release(gpu["cc"]) < _release(row["min_cc"]):
                yield (
                    f"cudnn {cudnn} needs compute capability >= {row['min_cc']}, but {name} has {gpu['cc']}",
                    row["source"],
                )


def _framework_vs_python(kind: str) -> Callable[[_Catalog, str, str], Iterator[Finding]]:
    def check(cat: _Catalog, version: str, python: str) -> Iterator[Finding]:
        row = cat.find(kind, version)
        if row and not _in_range(python, *row["python"]):
            low, high = row["python"]
            yield f"{kind} {version} supports python {low} to {high}, not python {python}", row["source"]

    return check


def _pytorch_vs_cuda(cat: _Catalog, pytorch: str, cuda: str) -> Iterator[Finding]:
    row = cat.find("pytorch", pytorch)
    if row and _mm(cuda) not in row["cuda"]:
        builds = ", ".join("cu" + build.replace(".", "") for build in row["cuda"])
        yield f"pytorch {pytorch} has {builds} builds only, none for cuda {cuda}", row["source"]


def _tensorflow_vs_cuda(cat: _Catalog, tensorflow: str, cuda: str) -> Iterator[Finding]:
    row = cat.find("tensorflow", tensorflow)
    if row and _major(row["cuda"]) != _major(cuda):
        yield f"tensorflow {tensorflow} is built with cuda {row['cuda']}, not cuda {_major(cuda)}.x", row["source"]


def _horovod_vs(component: str) -> Callable[[_Catalog, str, str], Iterator[Finding]]:
    def check(cat: _Catalog, horovod: str, value: str) -> Iterator[Finding]:
        for brk in cat.horovod_breaks(horovod, component):
            if _matches(Requirement(brk["when"]).specifier, value):
                yield (
                    f"horovod {horovod} breaks with {component} {value} ({brk['when']}: {brk['reason']})",
                    brk["source"],
                )

    return check


def _openmpi_known_bad(cat: _Catalog, mpi: str, horovod: str) -> Iterator[Finding]:
    for row in cat.m["openmpi"]:
        if "bad" in row and _release(row["version"]) == _release(mpi):
            yield f"openmpi {mpi} is known bad for horovod {horovod}: {row['bad']}", row["source"]


def _gpu_ops_need_gpu(cat: _Catalog, ops: str, gpu: bool) -> Iterator[Finding]:
    if ops in ("nccl", "mpi") and not gpu:
        yield f"gpu_operations {ops} needs a GPU stack, but this is a CPU-only stack", cat.m["sources"]["horovod_gpus"]


def _gpu_part_on_cpu_stack(name: str) -> Callable[[_Catalog, str, bool], Iterator[Finding]]:
    def check(cat: _Catalog, value: str, gpu: bool) -> Iterator[Finding]:
        if not gpu:
            message = f"{name} {value} was asked for, but this is a CPU-only stack (no GPU part is installed)"
            yield message, cat.m["sources"]["horovod_gpus"]

    return check


def _venv_uses_node_python(cat: _Catalog, python: str, node_python: str) -> Iterator[Finding]:
    if _mm(python) != _mm(node_python):
        yield (
            f"a venv is built from the node's python {node_python}, so it cannot be python {python}"
            " (use python.manager conda for another version)",
            cat.m["sources"]["python_venv"],
        )


@dataclass(frozen=True)
class Rule:
    """One compatibility rule over two fields of the working state."""

    id: str
    fields: tuple[str, str]
    check: Callable[[_Catalog, Any, Any], Iterator[Finding]]


RULES: tuple[Rule, ...] = (
    Rule("cuda-needs-driver", ("cuda", "driver"), _cuda_needs_driver),
    Rule("driver-vs-gpu", ("driver", "gpus"), _driver_vs_gpu),
    Rule("cuda-vs-gpu", ("cuda", "gpus"), _cuda_vs_gpu),
    Rule("cuda-vs-gcc", ("cuda", "gcc"), _cuda_vs_gcc),
    Rule("nccl-vs-cuda", ("nccl", "cuda"), _nccl_vs_cuda),
    Rule("cudnn-vs-cuda", ("cudnn", "cuda"), _cudnn_vs_cuda),
    Rule("cudnn-vs-gpu", ("cudnn", "gpus"), _cudnn_vs_gpu),
    Rule("pytorch-vs-cuda", ("pytorch", "cuda"), _pytorch_vs_cuda),
    Rule("pytorch-vs-python", ("pytorch", "python"), _framework_vs_python("pytorch")),
    Rule("tensorflow-vs-cuda", ("tensorflow", "cuda"), _tensorflow_vs_cuda),
    Rule("tensorflow-vs-python", ("tensorflow", "python"), _framework_vs_python("tensorflow")),
    Rule("horovod-vs-pytorch", ("horovod", "pytorch"), _horovod_vs("pytorch")),
    Rule("horovod-vs-tensorflow", ("horovod", "tensorflow"), _horovod_vs("tensorflow")),
    Rule("horovod-vs-gcc", ("horovod", "gcc"), _horovod_vs("gcc")),
    Rule("horovod-vs-python", ("horovod", "python"), _horovod_vs("python")),
    Rule("openmpi-known-bad", ("mpi", "horovod"), _openmpi_known_bad),
    Rule("gpu-ops-need-gpu", ("gpu_operations", "gpu"), _gpu_ops_need_gpu),
    *(
        Rule("gpu-part-on-cpu-stack", (name, "gpu"), _gpu_part_on_cpu_stack(name))
        for name in ("driver", "cuda", "cudnn", "nccl")
    ),
    Rule("venv-uses-node-python", ("python", "venv_base"), _venv_uses_node_python),
)

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
}
_PACKAGE_NAMES = {"torch": "pytorch", "tensorflow": "tensorflow", "tensorflow-cpu": "tensorflow"}
_PIP_NAMES = {"pytorch": "torch", "tensorflow": "tensorflow"}
# Fields the search may fill, in priority order: an earlier field gets its newest consistent value first.
_SEARCH_ORDER = ("driver", "cuda", "gcc", "pytorch", "tensorflow", "cudnn", "nccl")
_NOT_NOTED = ("gpu", "gpu_operations", "venv_base")  # context fields a note need not repeat
_NOT_VERSIONS = ("gpu", "gpu_operations", "gpus")


# --------------------------------------------------------------------------------------------- state


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


def _package_pins(packages: Iterable[str]) -> dict[str, tuple[str, Requirement]]:
    """Framework requirements among ``python.packages``: kind -> (the entry, its parsed requirement)."""
    pins = {}
    for entry in packages:
        try:
            req = Requirement(entry)
        except InvalidRequirement:
            continue
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
    hints = any(stack.get(k) for k in ("driver", "cuda", "cudnn", "nccl", "gpu_source"))
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


# --------------------------------------------------------------------------------------------- defaults


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
    if values["gpu"] and values.get("gpu_source") == "env":
        gpu_fields = ("driver", "cuda")  # cuDNN and NCCL come with the framework's wheels
    wanted = {*gpu_fields, "gcc", *(f for f in ("pytorch", "tensorflow") if f in frameworks)}
    return [name for name in _SEARCH_ORDER if name in wanted and values.get(name) is None]


# --------------------------------------------------------------------------------------------- checks


def _unknowns(cat: _Catalog, draft: _Draft, node: NodeInfo, os_row: dict | None) -> list[Conflict]:
    """Versions the matrix does not list, and a node OS it does not support."""
    found = []
    for kind in ("cuda", "driver", "cudnn", "nccl", "pytorch", "tensorflow", "horovod"):
        value = draft.values.get(kind)
        if value is not None and cat.find(kind, value) is None:
            rows, _ = cat.rows[kind]
            ranges = [str(row["versions"]) for row in cat.ranges(kind)]
            stated = f"; ranges the matrix states: {', '.join(ranges)}" if ranges else ""
            found.append(
                Conflict(
                    "unknown-version",
                    f"unknown {kind} {value} (known: {_listing(cat.known(kind))}{stated}; the newest verified is"
                    f" {cat.known(kind)[0]}: add a row with its source to compat.yaml for a newer one)",
                    (draft.label(kind), f"compat.yaml {kind}"),
                    rows[0]["source"],
                    draft.where(kind),
                )
            )
    if node.os_id and os_row is None:
        supported = "; ".join(f"{'/'.join(r['ids'])} {r['version']}" for r in cat.m["os"])
        found.append(
            Conflict(
                "unsupported-os",
                f"node OS {node.os_id} {node.os_version} is not supported (supported: {supported})",
                (f"node.os={node.os_id} {node.os_version}", "compat.yaml os"),
                cat.m["os"][0]["source"],
            )
        )
    return found


def _mpi_source_needs_version(mpi: dict, source: str, draft: _Draft, lines: Mapping[str, int]) -> list[Conflict]:
    if mpi["source"] == "source" and not mpi["version"]:
        line = lines.get("stack.mpi.source")
        return [
            Conflict(
                "mpi-source-needs-version",
                "an Open MPI source build needs stack.mpi.version (there is no default to build)",
                ("stack.mpi.source=source" + (f" (line {line})" if line else ""), "stack.mpi.version=(unset)"),
                source,
                f"{draft.path}:{line}" if line else "",
            )
        ]
    return []


def _range_notes(cat: _Catalog, draft: _Draft) -> list[str]:
    """A note for each value judged by a range of the matrix rather than a verified row."""
    notes = []
    for kind in cat.rows:
        value = draft.values.get(kind)
        row = cat.find(kind, value) if value is not None else None
        if row is not None and "versions" in row:
            notes.append(f"{kind}: {value} is not a verified release; judged by the matrix range {row['versions']}")
    return notes


# --------------------------------------------------------------------------------------------- plan


def _mpi(stack: dict, os_row: dict | None, draft: _Draft) -> dict:
    """The mpi section; a package install takes the OS's Open MPI version."""
    given = dict(stack.get("mpi") or {})
    distro = (os_row or {}).get("openmpi")
    mpi = {"impl": given.pop("impl", "openmpi"), "version": given.pop("version", None)}
    mpi["source"] = given.pop("source", "package")
    if mpi["source"] == "package" and mpi["version"] is None and distro:
        mpi["version"] = distro["version"]
        draft.values["mpi"] = distro["version"]
        draft.notes.append(f"mpi: openmpi {distro['version']} (the {os_row['ids'][0]} {os_row['version']} package)")
    return {**mpi, **given}


def _python(stack: dict, draft: _Draft) -> dict:
    """The python section: given keys kept, framework pins added for the versions chosen."""
    given = dict(stack.get("python") or {})
    python = {"manager": given.pop("manager", "venv"), "prefix": given.pop("prefix", DEFAULT_PREFIX)}
    packages = list(given.pop("packages", None) or [])
    python["version"] = draft.values["python"]
    pins = _package_pins(packages)
    for kind in ("pytorch", "tensorflow"):
        value = draft.values.get(kind)
        if value is None or kind in draft.given:
            continue
        pin = f"{_PIP_NAMES[kind]}=={value}.*"
        packages = [pin if kind in pins and p == pins[kind][0] else p for p in packages]
        if kind not in pins:
            packages.append(pin)
        draft.shown[kind] = pin
    python["packages"] = packages
    return {**python, **given}


def _default_python(node: NodeInfo, os_row: dict | None, draft: _Draft) -> None:
    """Python defaults to the node's interpreter, else the OS default."""
    if draft.values["python"] is not None:
        return
    if node.python:
        draft.values["python"] = _mm(node.python)
        draft.notes.append(f"python: {draft.values['python']} (the node's python {node.python})")
    elif os_row and "python" in os_row:
        draft.values["python"] = os_row["python"]["version"]
        draft.notes.append(f"python: {draft.values['python']} (the {os_row['ids'][0]} {os_row['version']} default)")


def _defaults_before_search(stack: dict, draft: _Draft, cat: _Catalog) -> dict:
    """Horovod settings that do not depend on the search, with notes."""
    given = dict(stack.get("horovod") or {})
    gpu = draft.values["gpu"]
    horovod = {
        "version": given.pop("version", None) or cat.known("horovod")[0],
        "frameworks": list(given.pop("frameworks", None) or ["pytorch"]),
        "gpu_operations": given.pop("gpu_operations", None) or ("nccl" if gpu else "none"),
        "cpu_operations": given.pop("cpu_operations", None) or "gloo",
        "controllers": list(given.pop("controllers", None) or ["mpi", "gloo"]),
    }
    if draft.values["horovod"] is None:
        draft.values["horovod"] = horovod["version"]
        draft.notes.append(f"horovod: {horovod['version']} (newest known release)")
    draft.values["gpu_operations"] = horovod["gpu_operations"]
    if gpu:
        draft.values["gpu_source"] = stack.get("gpu_source") or "system"
    return {**horovod, **given}


def resolve(
    stack: dict,
    node: NodeInfo | None = None,
    *,
    gpu: bool | None = None,
    lines: Mapping[str, int] | None = None,
    path: str = "hosts.yaml",
) -> Plan:
    """Fill ``stack`` (hosts.yaml's ``stack``) with the newest consistent choices, or raise ResolveError.

    ``lines`` (``ClusterSpec.stack_lines``: "stack.cuda" -> line) and ``path`` let each conflict name the
    hosts.yaml line of the value the user wrote.
    """
    cat = _Catalog(_matrix())
    stack = stack or {}
    node = node or NodeInfo()
    lines = lines or {}
    os_row = cat.os(node)
    draft = _draft(stack, node, _is_gpu(stack, node, gpu), lines, path)
    horovod = _defaults_before_search(stack, draft, cat)
    _default_python(node, os_row, draft)
    _Filler(cat, draft, node, os_row).fill(horovod["frameworks"])
    mpi = _mpi(stack, os_row, draft)
    python = _python(stack, draft)

    conflicts = _unknowns(cat, draft, node, os_row) + _involving_the_user(draft, _conflicts(cat, draft))
    conflicts += _mpi_source_needs_version(mpi, cat.m["sources"]["horovod_install"], draft, lines)
    if conflicts:
        raise ResolveError(conflicts)

    patches = cat.horovod_patches(horovod["version"], draft.values)
    notes = draft.notes + _range_notes(cat, draft)
    notes += [f"horovod patch {p['name']}: lifts the break on {p['fixes']}" for p in patches]
    resolved = {
        "gpu": draft.values["gpu"],
        "gpu_source": draft.values.get("gpu_source"),
        **{name: draft.values.get(name) for name in ("driver", "cuda", "cudnn", "nccl", "gcc")},
        "mpi": mpi,
        "python": python,
        "horovod": horovod,
    }
    return Plan(resolved, tuple(notes), tuple(p["name"] for p in patches))
