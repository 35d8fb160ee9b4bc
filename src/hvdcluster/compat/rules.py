"""The compatibility rules: each compares two fields of a stack (``cuda`` and ``driver``, ``horovod`` and
``gcc``, ...) against the matrix and says what is wrong with the pair, with the source that says so."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from packaging.requirements import Requirement

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_limits import cuda_outside, driver_above, gcc_above

from .matrix import _Catalog
from .versions import _driver_at_least, _in_range, _major, _matches, _mm, _release

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
        if driver_above(gpu, driver):
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
        bound = cuda_outside(gpu, cuda)
        if bound:
            yield (
                f"{name} ({gpu['arch']}, sm_{gpu['cc'].replace('.', '')}) needs cuda {bound}, not cuda {cuda}",
                gpu["source"],
            )


def _cuda_vs_gcc(cat: _Catalog, cuda: str, gcc: str) -> Iterator[Finding]:
    row = cat.gcc_limit(cuda)
    if row and gcc_above(gcc, row["gcc_max"]):
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


def _pytorch_vs_distro_cuda(cat: _Catalog, pytorch: str, distro_cuda: str) -> Iterator[Finding]:
    row = cat.find("pytorch", pytorch)
    wheel = (row or {}).get("pypi")
    if row and (wheel is None or _major(wheel["cuda"]) != _major(distro_cuda)):
        built = f"is built for cuda {wheel['cuda']}" if wheel else "has no recorded cuda"
        yield (
            f"pytorch {pytorch}'s wheel on the package index {built}, but the distro's cuda {distro_cuda} needs one"
            f" built for cuda {_major(distro_cuda)}.x (the cuXYZ variants live on another index)",
            (wheel or row)["source"],
        )


def _cuda_vs_distro_cuda(cat: _Catalog, cuda: str, distro_cuda: str) -> Iterator[Finding]:
    if _mm(cuda) != _mm(distro_cuda):
        packages = [row["cuda_package"] for row in cat.archives()]
        source = next((p["source"] for p in packages if p["cuda"] == distro_cuda), packages[0]["source"])
        yield f"gpu_repo distro installs the archive's cuda {distro_cuda}, not cuda {cuda}", source


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
    Rule("pytorch-vs-distro-cuda", ("pytorch", "distro_cuda"), _pytorch_vs_distro_cuda),
    Rule("cuda-vs-distro-cuda", ("cuda", "distro_cuda"), _cuda_vs_distro_cuda),
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
