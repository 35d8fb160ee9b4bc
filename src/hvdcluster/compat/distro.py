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


def active(stack: dict, draft: _Draft) -> bool:
    return bool(draft.values["gpu"]) and stack.get("gpu_repo") == "distro"


def archive_row(cat: _Catalog, node: NodeInfo, os_row: dict | None, draft: _Draft) -> dict | None:
    """The OS whose archive the plan takes: the probed nodes' own; unprobed (``up`` resolves before it reaches a
    node), the first OS the matrix knows a toolkit package for (one whose package is the ``cuda`` given, where one
    is; today only Debian 12 has a row), which the pre-flight then holds the nodes to (``archive_os``). None: a
    probed OS the matrix lacks (refused as unsupported)."""
    if node.os_id is not None:
        return os_row
    cuda = draft.values.get("cuda")
    rows = cat.archives()
    return ([r for r in rows if r["cuda_package"]["cuda"] == cuda] or rows)[0]


def archive_os(row: dict) -> dict[str, list[str]]:
    """hvd_preflight_supported_os for a plan that takes ``row``'s archive (the distribution names Ansible reports)."""
    return {row["ids"][0].capitalize(): [row["version"]]}


def prepare(os_row: dict | None, draft: _Draft, cat: _Catalog, lines: Mapping[str, int]) -> list[Conflict]:
    """Before the search: CUDA is the archive's (``distro_cuda``, checked against a given ``cuda`` and the
    framework by the rules); an OS whose archive has no toolkit is refused (an OS the matrix lacks is refused
    elsewhere)."""
    if os_row is None:
        return []
    line = lines.get("stack.gpu_repo")
    package = os_row.get("cuda_package")
    if package is None:
        name = f"{os_row['ids'][0]} {os_row['version']}"
        supported = "; ".join(f"{r['ids'][0]} {r['version']}" for r in cat.archives())
        return [Conflict(
            "gpu-repo-distro",
            f"{name} has no CUDA toolkit package hvdcluster knows in its own archive (known: {supported});"
            " use gpu_repo: nvidia",
            (f"stack.gpu_repo=distro{f' (line {line})' if line else ''}", f"node.os={name}"),
            os_row["source"],
            f"{draft.path}:{line}" if line else "",
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
    if not wheel:  # TensorFlow alone: its wheels' pins are not in the matrix
        return [Conflict(
            "gpu-repo-distro",
            "with gpu_repo distro cuDNN and NCCL come from PyTorch's own wheels, and this stack has no PyTorch"
            " whose wheels the matrix knows; use gpu_repo: nvidia",
            (draft.label("distro_cuda"), "stack.horovod.frameworks"),
            cat.m["os"][0]["source"] if row is None else row["source"],
            draft.where("distro_cuda"),
        )]
    found = []
    for name in FROM_WHEELS:
        pin = wheel.get(name)
        if name in draft.given and draft.values[name] != pin:
            found.append(Conflict(
                "gpu-repo-distro",
                f"with gpu_repo distro {name} comes from pytorch {pytorch}'s own wheels"
                f" ({name} {pin or 'none'}), not {name} {draft.values[name]}",
                (draft.label(name), draft.label("distro_cuda")),
                wheel["source"],
                draft.where(name),
            ))
        elif pin and name not in draft.given:
            draft.values[name] = pin
            draft.notes.append(f"{name}: {pin} (from pytorch {pytorch}'s wheels, gpu_repo distro)")
    return found

