"""``gpu_repo: distro``: the GPU stack the node's own archive can give. The toolkit is the archive's package (one CUDA
per release), cuDNN and NCCL are the very wheels the framework pins (no distro packages them fit to use), and the
framework is a release whose wheel on the package index is built for that CUDA major."""

from __future__ import annotations

from collections.abc import Mapping

from .draft import _Draft
from .matrix import _Catalog
from .model import Conflict, NodeInfo

# The fields a framework's own wheels bring with gpu_repo distro.
FROM_WHEELS = ("cudnn", "nccl")


def active(stack: dict, draft: _Draft, node: NodeInfo) -> bool:
    """A GPU stack from the distro's archive, on nodes whose OS the probe read (unread, nothing is known to pin)."""
    return bool(draft.values["gpu"]) and stack.get("gpu_repo") == "distro" and node.os_id is not None


def prepare(stack: dict, os_row: dict | None, draft: _Draft, cat: _Catalog, lines: Mapping[str, int]) -> list[Conflict]:
    """Before the search: CUDA is the archive's (``distro_cuda``, checked against a given ``cuda`` and the
    framework by the rules); an OS whose archive has no toolkit is refused (an OS the matrix lacks is refused
    elsewhere)."""
    line = lines.get("stack.gpu_repo")
    where = f"{draft.path}:{line}" if line else ""
    package = (os_row or {}).get("cuda_package")
    if os_row is None:
        return []
    if package is None:
        name = f"{os_row['ids'][0]} {os_row['version']}"
        supported = "; ".join(f"{r['ids'][0]} {r['version']}" for r in cat.m["os"] if "cuda_package" in r)
        return [Conflict(
            "gpu-repo-distro",
            f"{name} has no CUDA toolkit package hvdcluster knows in its own archive (known: {supported});"
            " use gpu_repo: nvidia",
            (f"stack.gpu_repo=distro{f' (line {line})' if line else ''}", f"node.os={name}"),
            os_row["source"],
            where,
        )]
    draft.values["distro_cuda"] = package["cuda"]
    draft.given.add("distro_cuda")
    draft.shown["distro_cuda"] = f"distro ({os_row['ids'][0]} {os_row['version']}: {package['name']} {package['cuda']})"
    if line:
        draft.lines["distro_cuda"] = line
    if draft.values.get("cuda") is None:
        draft.values["cuda"] = package["cuda"]
        draft.notes.append(f"cuda: {package['cuda']} (the {os_row['ids'][0]} {os_row['version']} package"
                           f" {package['name']}, gpu_repo distro)")
    return []


def from_wheels(draft: _Draft, cat: _Catalog) -> list[Conflict]:
    """After the search: cuDNN and NCCL are the versions the chosen framework's wheel pins; one the user gave
    otherwise is refused."""
    pytorch = draft.values.get("pytorch")
    row = cat.find("pytorch", pytorch) if pytorch else None
    wheel = (row or {}).get("pypi") or {}
    found = []
    for name in FROM_WHEELS:
        pin = wheel.get(name)
        if name in draft.given and draft.values[name] != pin:
            found.append(Conflict(
                "gpu-repo-distro",
                f"with gpu_repo distro {name} comes from pytorch {pytorch}'s own wheels"
                f" ({name} {pin or 'none'}), not {name} {draft.values[name]}",
                (draft.label(name), draft.label("distro_cuda")),
                wheel.get("source") or (row or {}).get("source", ""),
                draft.where(name),
            ))
        elif pin and name not in draft.given:
            draft.values[name] = pin
            draft.notes.append(f"{name}: {pin} (from pytorch {pytorch}'s wheels, gpu_repo distro)")
    return found

