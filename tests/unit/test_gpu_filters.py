"""GPU component policy (plugins/filter/hvd_gpu.py) over the components' own data (roles/hvd_gpu_component/vars).

These are the decisions the NVIDIA repository and the other OSes would exercise on real nodes, which this machine
cannot reach: package names and pins, wheel pins with their hashes, where each component lives and how its version
is read. They run here without Ansible or a GPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hvdcluster import compat

ROOT = Path(__file__).resolve().parents[2]
from ansible_collections.hvd.cluster.plugins.filter import hvd_gpu as gpu

HASHES = compat.nvidia_wheel_sha256()


def data(name: str) -> dict:
    return yaml.safe_load((ROOT / "roles" / "hvd_gpu_component" / "vars" / f"{name}.yml").read_text())[
        "__hvd_gpu_component_spec"]


def plan(name: str, **kw) -> dict:
    args = {"source": "system", "repo": "nvidia", "version": "", "cuda_version": "", "packages": [], "wheels": [],
            "env_prefix": f"/opt/hvd/{name}", "distribution": "Debian", "architecture": "x86_64",
            "wheel_sha256": HASHES, **kw}
    return gpu.hvd_gpu_component_plan(data(name), **args)


def test_nccl_from_nvidia_is_pinned_to_the_cuda_minor_build() -> None:
    p = plan("nccl", version="2.21.5", cuda_version="12.4")
    assert p["error"] == ""
    assert p["apt_specs"] == ["libnccl2=2.21.5-*+cuda12.4", "libnccl-dev=2.21.5-*+cuda12.4"]
    assert p["packages"] == ["libnccl2", "libnccl-dev"]
    assert (p["home"], p["register_libs"], p["headers"]) == ("/usr", False, ["/usr/include/nccl.h"])


def test_nccl_from_debian_is_refused_because_debian_has_none() -> None:
    p = plan("nccl", repo="distro", version="2.21.5", cuda_version="12.4")
    assert "Debian's archive has no NCCL" in p["error"]
    assert plan("nccl", repo="distro", version="2.21.5", distribution="Ubuntu")["apt_specs"] == [
        "libnccl2=2.21.5[.~-]*", "libnccl-dev=2.21.5[.~-]*"]


def test_nccl_needs_a_cuda_minor_unless_wheels_are_named() -> None:
    assert "cuda '' must be X.Y" in plan("nccl", version="2.21.5")["error"]
    named = plan("nccl", source="env", version="2.21.5", wheels=["nvidia-nccl-cu12==2.21.5"])
    assert named["error"] == ""


def test_nccl_env_wheel_is_pinned_with_the_matrix_hash_and_lives_in_the_prefix() -> None:
    p = plan("nccl", source="env", repo="distro", version="2.14.3", cuda_version="11.8")
    assert p["wheels"] == [
        "nvidia-nccl-cu11==2.14.3 --hash=sha256:5e5534257d1284b8e825bc3a182c6f06acd6eb405e9f89d49340e98cd8f136eb"]
    assert (p["home"], p["lib_dir"], p["register_libs"]) == ("/opt/hvd/nccl", "/opt/hvd/nccl/lib", True)
    assert p["headers"] == ["/opt/hvd/nccl/include/nccl.h"] and p["apt_specs"] == []


def test_a_wheel_with_no_known_hash_is_refused_naming_it() -> None:
    p = plan("nccl", source="env", version="2.19.3", cuda_version="12.3")
    assert "no sha256 is known for nvidia-nccl-cu12==2.19.3" in p["error"] and p["wheels"] == []


def test_a_wheel_line_that_carries_its_hash_is_taken_as_written() -> None:
    line = "nvidia-nccl-cu12==2.19.3 --hash=sha256:" + "a" * 64
    assert plan("nccl", source="env", version="2.19.3", cuda_version="12.3", wheels=[line])["wheels"] == [line]


@pytest.mark.parametrize("requirement", ["nvidia-nccl-cu12>=2.19", "nvidia-nccl-cu12", "-r x.txt"])
def test_a_wheel_requirement_that_is_not_an_exact_pin_is_refused(requirement: str) -> None:
    p = plan("nccl", source="env", version="2.19.3", cuda_version="12.3", wheels=[requirement])
    assert "is not pinned exactly" in p["error"]


def test_cudnn_9_packages_carry_the_cuda_major_and_a_release_takes_its_build() -> None:
    exact = plan("cudnn", version="9.1.0.70", cuda_version="12.4")
    assert exact["apt_specs"] == ["libcudnn9-cuda-12=9.1.0.70-1", "libcudnn9-dev-cuda-12=9.1.0.70-1"]
    release = plan("cudnn", version="9.1.0", cuda_version="12.4")
    assert release["apt_specs"] == ["libcudnn9-cuda-12=9.1.0.*", "libcudnn9-dev-cuda-12=9.1.0.*"]
    assert "/usr/include/x86_64-linux-gnu/cudnn_version_v9.h" in exact["headers"]


def test_cudnn_8_packages_carry_the_cuda_minor_in_the_version() -> None:
    p = plan("cudnn", version="8.9.6.50", cuda_version="12.2")
    assert p["apt_specs"] == ["libcudnn8=8.9.6.50-1+cuda12.2", "libcudnn8-dev=8.9.6.50-1+cuda12.2"]


def test_cudnn_from_the_distro_is_refused_because_it_downloads_unpinned() -> None:
    assert "repo 'distro' is not one of nvidia" in plan("cudnn", repo="distro", version="9.1.0.70",
                                                         cuda_version="12.4")["error"]


def test_cudnn_env_release_resolves_to_the_build_the_hash_table_knows() -> None:
    p = plan("cudnn", source="env", version="8.5.0", cuda_version="11.7")
    assert p["wheels"][0].startswith("nvidia-cudnn-cu11==8.5.0.96 --hash=sha256:402f40ad")
    unknown = plan("cudnn", source="env", version="8.6.0", cuda_version="11.8")
    assert "is a release, not a build" in unknown["error"]


def test_cuda_from_nvidia_lives_in_usr_local_cuda_and_links_lib64() -> None:
    p = plan("cuda", version="12.4")
    assert p["apt_specs"] == ["cuda-toolkit-12-4=12.4[.~-]*"]
    assert (p["home"], p["lib_dir"], p["register_libs"]) == ("/usr/local/cuda-12.4", "/usr/local/cuda-12.4/lib64", True)
    assert p["programs"] == ["/usr/local/cuda-12.4/bin/nvcc"]


def test_cuda_from_the_distro_lives_in_usr() -> None:
    p = plan("cuda", repo="distro", version="11.8")
    assert p["apt_specs"] == ["nvidia-cuda-toolkit=11.8[.~-]*"] and p["home"] == "/usr" and not p["register_libs"]


def test_cuda_env_needs_its_wheels_named() -> None:
    assert "source env needs hvd_cuda_wheels" in plan("cuda", source="env", version="12.4")["error"]


def test_nothing_requested_searches_the_usual_places_and_installs_nothing() -> None:
    p = plan("nccl")
    assert p["error"] == "" and p["apt_specs"] == [] and p["wheels"] == []
    assert p["headers"] == ["/usr/include/nccl.h", "/usr/local/cuda/include/nccl.h", "/opt/hvd/nccl/include/nccl.h"]
    assert plan("cuda")["programs"] == ["/usr/local/cuda/bin/nvcc", "/usr/bin/nvcc", "/opt/hvd/cuda/bin/nvcc"]


def test_bad_requests_are_refused_with_what_is_expected() -> None:
    p = plan("nccl", source="conda", repo="mirror", version="2.21")
    assert p["error"].startswith("hvd_nccl: source 'conda' is not one of system, env")
    assert "repo 'mirror'" in p["error"] and "version '2.21' is not like 2.21.5" in p["error"]


NCCL_H = """#define NCCL_MAJOR 2
#define NCCL_MINOR 14
#define NCCL_PATCH 3
#define NCCL_SUFFIX ""
"""


def test_nccl_version_and_code_come_from_nccl_h() -> None:
    assert gpu.hvd_gpu_found_version(data("nccl"), "", NCCL_H) == {"version": "2.14.3", "code": 21403}
    old = NCCL_H.replace("MINOR 14", "MINOR 8").replace("PATCH 3", "PATCH 4")
    assert gpu.hvd_gpu_found_version(data("nccl"), "", old)["code"] == 2804  # before 2.9: X*1000


def test_cuda_version_comes_from_nvcc_else_the_runtime_header() -> None:
    nvcc = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 11.8, V11.8.89\n"
    assert gpu.hvd_gpu_found_version(data("cuda"), nvcc, "")["version"] == "11.8.89"
    assert gpu.hvd_gpu_found_version(data("cuda"), "", "#define CUDART_VERSION 11070\n")["version"] == "11.7"


def test_cudnn_version_comes_from_cudnn_version_h_and_a_partial_header_says_nothing() -> None:
    header = "#define CUDNN_MAJOR 8\n#define CUDNN_MINOR 5\n#define CUDNN_PATCHLEVEL 0\n"
    assert gpu.hvd_gpu_found_version(data("cudnn"), "", header)["version"] == "8.5.0"
    assert gpu.hvd_gpu_found_version(data("cudnn"), "", "#define CUDNN_MAJOR 8\n")["version"] == ""


@pytest.mark.parametrize(("found", "requested", "ok"), [
    ("11.8.89", "11.8", True), ("8.5.0", "8.5.0.96", True), ("2.14.3", "2.14.3", True),
    ("2.14.3", "2.14.4", False), ("11.7", "11.8", False), ("", "11.8", False), ("12.4.1", "12.4.10", False),
])
def test_version_found_matches_the_request_at_its_precision(found: str, requested: str, ok: bool) -> None:
    assert gpu.hvd_gpu_version_matches(found, requested) is ok


def test_home_of_a_found_program_or_header() -> None:
    assert gpu.hvd_gpu_home_of("/usr/local/cuda-12.4/bin/nvcc") == "/usr/local/cuda-12.4"
    assert gpu.hvd_gpu_home_of("/usr/include/x86_64-linux-gnu/cudnn_version_v9.h") == "/usr"
    assert gpu.hvd_gpu_home_of("/opt/hvd/nccl/include/nccl.h") == "/opt/hvd/nccl"
    assert gpu.hvd_gpu_home_of("") == ""


def test_so_links_add_only_the_missing_unversioned_names() -> None:
    names = ["libnccl.so.2", "libcudnn.so.8", "libcudnn_ops.so.8.5.0", "libcudnn_ops.so", "libx.so"]
    assert gpu.hvd_so_links(names) == {"libnccl.so": "libnccl.so.2", "libcudnn.so": "libcudnn.so.8"}


def test_nvidia_smi_lines_become_gpus_and_odd_lines_are_dropped() -> None:
    lines = ["NVIDIA H100 80GB HBM3, 9.0, 550.54.15", "garbage", "NVIDIA A100-SXM4-40GB, 8.0, 550.54.15"]
    assert gpu.hvd_nvidia_smi_gpus(lines) == [
        {"name": "NVIDIA H100 80GB HBM3", "compute_cap": "9.0", "driver": "550.54.15"},
        {"name": "NVIDIA A100-SXM4-40GB", "compute_cap": "8.0", "driver": "550.54.15"}]


@pytest.mark.parametrize(("cc_list", "gencode"), [
    ("80", ["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_80,code=compute_80"]),
    # as hvd_nvidia_driver records them (sorted text), numerically ordered: the newest also as PTX
    ("100,90, 80,90", ["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90",
                       "-gencode=arch=compute_100,code=sm_100", "-gencode=arch=compute_100,code=compute_100"]),
])
def test_nvcc_builds_device_code_for_each_capability_found_and_ptx_for_the_newest(cc_list, gencode):
    assert gpu.hvd_nvcc_gencode(cc_list) == gencode


@pytest.mark.parametrize("cc_list", ["", "8.0", "80;rm -rf /", "sm_80", ","])
def test_a_capability_list_that_is_not_digits_is_refused_by_name(cc_list):
    with pytest.raises(ValueError, match="write them without the dot"):
        gpu.hvd_nvcc_gencode(cc_list)


@pytest.mark.parametrize(("version", "branch"), [("550.54.15", "550"), ("550", "550"), ("535.183.01,550.54.15", "535"),
                                                 ("", ""), (None, "")])
def test_a_driver_versions_branch_is_read_as_the_resolver_and_the_preflight_read_versions(version, branch) -> None:
    """hvd_nvidia_driver's packages, Fabric Manager's package and the refusal of a given driver name the branch one
    way: the filter reads the version with hvd_limits.release, the resolver's and the pre-flight's reader."""
    assert gpu.hvd_driver_branch(version) == branch
