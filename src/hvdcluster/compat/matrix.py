"""The version matrix (``data/compat.yaml``) as plain data, the lookups into it, and what the roles take from it
(the pre-flight's GPU rules, the pinned sha256 of the Horovod sdist and of NVIDIA's wheels)."""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterable, Iterator
from importlib import resources
from typing import Any

from packaging.requirements import Requirement

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_limits

from .. import yamlread
from .model import NodeInfo
from .versions import _covers, _in_range, _major, _matches, _newest_first, _release, _same_series


@functools.cache
def _matrix() -> dict:
    text = resources.files("hvdcluster.data").joinpath("compat.yaml").read_text(encoding="utf-8")
    return yamlread.safe_load(text)


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


def preflight_vars(stack: dict) -> dict[str, Any]:
    """What hvd_preflight checks GPU nodes against for this (resolved) stack: the GPU rules of the matrix, the newest
    gcc its nvcc accepts, and with gpu_repo distro the OS whose archive it planned; nothing for a CPU-only stack."""
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
    if stack.get("archive_os"):  # gpu_repo distro: the plan took that archive's toolkit, so the nodes must run it
        out["hvd_preflight_supported_os"] = stack["archive_os"]
        out["hvd_preflight_supported_os_why"] = f"stack.gpu_repo distro plans that archive's cuda {cuda}"
    return out


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
        return hvd_limits.gpu_row(self.m["gpus"], name)  # type: ignore[return-value]

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

    def archives(self) -> list[dict]:
        """The OS rows whose own archive carries a CUDA toolkit package (``cuda_package``), for gpu_repo distro."""
        return [row for row in self.m["os"] if "cuda_package" in row]

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
