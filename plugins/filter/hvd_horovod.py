"""hvd_horovod's build policy: the HOROVOD_* build environment, what ``horovodrun --check-build`` must list, and
the reading of what it does list.

Plain functions over plain data, so the policy is unit-tested without a node (tests/unit/plugins/filter/test_hvd_filters.py).
The role calls them from ``roles/hvd_horovod/vars/main.yml`` and ``tasks/main.yml``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

# Framework -> (the suffix of its HOROVOD_WITH(OUT)_ switch, the name --check-build prints), in switch order.
FRAMEWORKS = {"pytorch": ("PYTORCH", "PyTorch"), "tensorflow": ("TENSORFLOW", "TensorFlow"), "mxnet": ("MXNET", "MXNet")}
# Controller -> the name --check-build prints (the switch is HOROVOD_WITH(OUT)_<upper>).
CONTROLLERS = {"mpi": "MPI", "gloo": "Gloo"}

_SECTION = re.compile(r"^\s*Available ([^:]+):\s*$")
_BUILT = re.compile(r"^\s*\[X\] (\S+)")


def _sorted(names: Iterable[str]) -> list[str]:
    """Sorted as Jinja's ``sort`` does (case-insensitive), so lists and messages read as before."""
    return sorted(names, key=lambda name: str(name).lower())


def _unique(items: Iterable[Any]) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if item not in out:
            out.append(item)
    return out


def hvd_horovod_build_vars(
    frameworks: Iterable[str],
    controllers: Iterable[str] = (),
    cpu_operations: str = "gloo",
    gpu_operations: str = "none",
    make_jobs: Any = 2,
    cuda_home: Any = "",
    nccl_home: Any = "",
    nccl_link: Any = "",
    cuda_cc_list: Any = "",
    cuda_host_cxx: Any = "",
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The environment ``pip wheel`` builds Horovod with.

    Every framework and controller is switched on or off explicitly (HOROVOD_WITH_X=1 / HOROVOD_WITHOUT_X=1, so
    Horovod never guesses from what the environment happens to hold); the CPU operations are named; a GPU build
    (``gpu_operations`` other than none) names its operations and, where they are not empty, the CUDA and NCCL
    homes, how NCCL is linked, the compute capabilities and nvcc's host compiler. ``extra`` (hvd_horovod_build_env)
    is applied last and overrides any of these. Keys keep the order the build key (a JSON digest) was computed with.
    """
    frameworks, controllers = list(frameworks), list(controllers)
    env: dict[str, Any] = {"MAKEFLAGS": f"-j{make_jobs}"}
    if "mxnet" not in frameworks:  # MXNet is off unless asked for: its switch comes first
        env["HOROVOD_WITHOUT_MXNET"] = "1"
    for framework, (switch, dummy) in FRAMEWORKS.items():
        env[("HOROVOD_WITH_" if framework in frameworks else "HOROVOD_WITHOUT_") + switch] = "1"
    for controller in CONTROLLERS:
        env[("HOROVOD_WITH_" if controller in controllers else "HOROVOD_WITHOUT_") + controller.upper()] = "1"
    env["HOROVOD_CPU_OPERATIONS"] = str(cpu_operations).upper()
    if gpu_operations != "none":
        env["HOROVOD_GPU_OPERATIONS"] = str(gpu_operations).upper()
        for var, value in (("HOROVOD_CUDA_HOME", cuda_home), ("HOROVOD_NCCL_HOME", nccl_home),
                           ("HOROVOD_NCCL_LINK", nccl_link), ("HOROVOD_BUILD_CUDA_CC_LIST", cuda_cc_list),
                           ("CUDAHOSTCXX", cuda_host_cxx)):
            if value is not None and str(value) != "":
                env[var] = value if isinstance(value, str) else str(value)
    env.update(extra or {})
    return env


def hvd_horovod_expected_build(
    frameworks: Iterable[str], controllers: Iterable[str] = (), cpu_operations: str = "gloo",
    gpu_operations: str = "none",
) -> dict[str, list[str]]:
    """What ``horovodrun --check-build`` must list as built, section by section (names as it prints them).

    Tensor operations: NCCL for an NCCL GPU build, MPI and Gloo for the controllers built in, CCL for CCL CPU
    operations.
    """
    controllers = list(controllers)
    operations = (["NCCL"] if gpu_operations == "nccl" else []) + [
        name for controller, name in CONTROLLERS.items() if controller in controllers
    ] + (["CCL"] if cpu_operations == "ccl" else [])
    return {
        "Frameworks": _sorted(FRAMEWORKS[f][1] if f in FRAMEWORKS else f for f in frameworks),
        "Controllers": _sorted(CONTROLLERS.get(c, c) for c in controllers),
        "Tensor Operations": _sorted(operations),
    }


def hvd_horovod_check_build(output: str) -> dict[str, list[str]]:
    """``horovodrun --check-build``'s output as {section: [what is built]}: the items marked ``[X]`` under each
    ``Available <section>:`` line, sorted. Anything else it prints (its version line, warnings) is ignored."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in str(output or "").splitlines():
        heading = _SECTION.match(line)
        if heading:
            current = sections.setdefault(heading.group(1).strip(), [])
            continue
        built = _BUILT.match(line)
        if built and current is not None:
            current.append(built.group(1))
    return {section: _sorted(items) for section, items in sections.items()}


def hvd_horovod_build_missing(built: Mapping[str, Iterable[str]], expected: Mapping[str, Iterable[str]]) -> list[str]:
    """Each difference between what was built and what was expected, one message per section and kind:
    ``"<section> missing A, B"`` and ``"<section> unexpected C"``. Empty when the build is exactly as expected."""
    out = []
    for section, want in expected.items():
        want, got = list(want), list(built.get(section) or [])
        missing = _unique(name for name in want if name not in got)
        unexpected = _unique(name for name in got if name not in want)
        if missing:
            out.append(f"{section} missing {', '.join(missing)}")
        if unexpected:
            out.append(f"{section} unexpected {', '.join(unexpected)}")
    return out


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "hvd_horovod_build_vars": hvd_horovod_build_vars,
            "hvd_horovod_expected_build": hvd_horovod_expected_build,
            "hvd_horovod_check_build": hvd_horovod_check_build,
            "hvd_horovod_build_missing": hvd_horovod_build_missing,
        }
