"""The version matrix and the resolver: consistent stacks resolve to the newest consistent choices; every
rule refuses its inconsistent pair with both choices, its rule id and a source; all conflicts come together."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from hvdcluster.compat import (
    RULES,
    Conflict,
    NodeInfo,
    Plan,
    ResolveError,
    gpu_row,
    load_matrix,
    resolve,
    sdist_sha256,
)
from hvdcluster.errors import HvdError

ROOT = Path(__file__).resolve().parents[2]
DEBIAN12 = NodeInfo(os_id="debian", os_version="12", gcc="12.2.0", python="3.11.2")
A100 = "NVIDIA A100-SXM4-80GB"


def _gpu_node(*gpus: str, **changes: str) -> NodeInfo:
    return dataclasses.replace(DEBIAN12, gpus=gpus, **changes)


def _refusal(stack: dict, node: NodeInfo | None = DEBIAN12, **kwargs: bool) -> list[Conflict]:
    with pytest.raises(ResolveError) as caught:
        resolve(stack, node, **kwargs)
    return caught.value.conflicts


def _only(conflicts: list[Conflict], rule: str) -> Conflict:
    hits = [c for c in conflicts if c.rule == rule]
    assert len(hits) == 1, f"expected one {rule!r} conflict in {[c.rule for c in conflicts]}"
    return hits[0]


def _assert_names_both(conflict: Conflict, first: str, second: str) -> None:
    assert conflict.choices == (first, second)
    assert conflict.source.startswith(("https://", "http://"))
    assert "\n" not in conflict.message


# --------------------------------------------------------------------------------------------- matrix


def _rows(node, path=""):
    """Every mapping that holds a scalar (a row of facts), with its path in the document."""
    if isinstance(node, dict):
        if any(not isinstance(v, (dict, list)) for v in node.values()):
            yield path, node
        for key, value in node.items():
            yield from _rows(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _rows(value, f"{path}[{index}]")


def test_every_matrix_row_carries_an_http_source():
    matrix = load_matrix()
    sources = matrix.pop("sources")
    matrix.pop("artifacts")  # pinned digests: their source is the release they were published with (below)
    assert all(url.startswith("https://") for url in sources.values())
    rows = list(_rows(matrix))
    assert len(rows) > 150
    for path, row in rows:
        assert str(row.get("source", "")).startswith(("https://", "http://")), f"{path} has no http(s) source"


def test_every_artifact_pins_a_sha256_and_names_its_release_without_a_registry_address():
    artifacts = load_matrix()["artifacts"]
    rows = [row for name, package in artifacts.items() if name != "nvidia_wheels" for row in package]
    assert rows
    for row in rows:
        assert re.fullmatch(r"[0-9a-f]{64}", row["sha256"]), row
        assert row["file"].endswith(".tar.gz") and row["version"] in row["file"]
        assert row["source"] and "://" not in row["source"]  # a description, never a registry address
    wheels = artifacts["nvidia_wheels"]
    assert wheels
    for row in wheels:  # one digest per file the release publishes (x86_64, aarch64)
        assert row["sha256"] and all(re.fullmatch(r"[0-9a-f]{64}", d) for d in row["sha256"]), row
        assert re.fullmatch(r"nvidia-[a-z]+-cu1[0-9]", row["name"]) and row["version"] in row["source"], row
        assert "://" not in row["source"], row


def test_the_horovod_sdist_digest_is_the_matrix_pin_and_empty_for_a_release_without_one():
    assert sdist_sha256("0.28.1") == "92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0"
    assert sdist_sha256("0.27.0") == "" and sdist_sha256(None) == ""


SOURCE_HOSTS = {
    "docs.nvidia.com",
    "developer.download.nvidia.com",
    "gitlab.com",
    "github.com",
    "reviews.llvm.org",
    "www.tensorflow.org",
    "open-mpi.org",
    "tracker.debian.org",
    "docs.python.org",
}


def test_matrix_sources_come_from_the_reviewed_hosts():
    matrix = load_matrix()
    hosts = {urlsplit(url).hostname for url in matrix.pop("sources").values()}
    hosts |= {urlsplit(row["source"]).hostname for _, row in _rows(matrix)}
    assert hosts - {None} <= SOURCE_HOSTS


def test_load_matrix_returns_a_private_copy():
    load_matrix()["cuda_driver"]["toolkits"].clear()
    assert load_matrix()["cuda_driver"]["toolkits"]


def test_every_rule_id_is_unique_per_field_pair():
    pairs = [(rule.id, rule.fields) for rule in RULES]
    assert len(pairs) == len(set(pairs))


@pytest.mark.parametrize(
    ("name", "arch"),
    [
        ("Tesla K80", "kepler"),
        ("Tesla P100-PCIE-16GB", "pascal"),
        ("Tesla V100-SXM2-32GB", "volta"),
        ("Tesla T4", "turing"),
        ("NVIDIA A100-SXM4-80GB", "ampere"),
        ("NVIDIA A10", "ampere"),
        ("NVIDIA L40S", "ada"),
        ("NVIDIA GeForce RTX 4090", "ada"),
        ("NVIDIA H100 80GB HBM3", "hopper"),
        ("NVIDIA GH200 480GB", "hopper"),
        ("NVIDIA B200", "blackwell"),
    ],
)
def test_gpu_names_as_nvidia_smi_prints_them_find_their_architecture(name, arch):
    assert gpu_row(name)["arch"] == arch


def test_a_gpu_model_the_matrix_does_not_list_is_not_checked():
    assert gpu_row("NVIDIA A10G") is None and gpu_row("Quadro K4000") is None
    assert resolve({"cuda": "12.4"}, _gpu_node("NVIDIA A10G")).stack["cuda"] == "12.4"


# --------------------------------------------------------------------------------------------- consistent stacks


def test_cpu_stack_on_debian12_takes_distro_openmpi_gloo_and_the_node_python():
    plan = resolve({}, DEBIAN12)
    stack = plan.stack
    assert isinstance(plan, Plan)
    assert stack["gpu"] is False
    assert [stack[k] for k in ("driver", "cuda", "cudnn", "nccl")] == [None] * 4
    assert stack["mpi"] == {"impl": "openmpi", "version": "4.1.4", "source": "package"}
    assert stack["horovod"] == {
        "version": "0.28.1",
        "frameworks": ["pytorch"],
        "gpu_operations": "none",
        "cpu_operations": "gloo",
        "controllers": ["mpi", "gloo"],
    }
    assert stack["python"]["manager"] == "venv"
    assert stack["python"]["prefix"] == "/opt/hvd/env"
    assert stack["python"]["version"] == "3.11"
    assert stack["gcc"] == "12"
    assert any(note.startswith("mpi: openmpi 4.1.4") for note in plan.notes)


def test_cpu_stack_pins_the_newest_torch_that_horovod_builds_with_the_cxx17_patch():
    plan = resolve({}, DEBIAN12)
    assert plan.stack["python"]["packages"] == ["torch==2.13.*"]
    assert plan.patches == ("cxx17",)
    assert any(note.startswith("pytorch: 2.13") for note in plan.notes)


def test_torch_from_2_1_on_gets_the_cxx17_patch():
    plan = resolve({"python": {"packages": ["numpy", "torch==2.3.1"]}}, DEBIAN12)
    assert plan.patches == ("cxx17",)
    assert plan.stack["python"]["packages"] == ["numpy", "torch==2.3.1"]


def test_torch_2_0_needs_no_patch():
    assert resolve({"python": {"packages": ["torch==2.0.1"]}}, DEBIAN12).patches == ()


def test_a_torch_range_is_pinned_to_its_newest_consistent_release():
    plan = resolve({"python": {"packages": ["torch<2.6"]}}, DEBIAN12)
    assert plan.stack["python"]["packages"] == ["torch==2.5.*"]


def test_gpu_operations_none_means_a_cpu_stack():
    plan = resolve({"horovod": {"gpu_operations": "none"}}, _gpu_node(A100))
    assert plan.stack["gpu"] is False and plan.stack["cuda"] is None


def test_gpu_stack_with_only_the_driver_gets_the_newest_cuda_it_supports():
    plan = resolve({"driver": "550"}, DEBIAN12)
    assert plan.stack["gpu"] is True
    assert plan.stack["cuda"] == "12.4"
    assert "cuda: 12.4 (newest consistent with driver 550)" in plan.notes


def test_gpu_stack_defaults_pick_cudnn_and_nccl_builds_for_the_chosen_cuda():
    stack = resolve({"driver": "550"}, DEBIAN12).stack
    assert stack["cudnn"] == "9.17.0"
    assert stack["nccl"] == "2.21.5"  # has a +cuda12.4 build
    assert stack["gpu_source"] == "system"
    assert stack["horovod"]["gpu_operations"] == "nccl"
    assert stack["python"]["packages"] == ["torch==2.6.*"]  # newest torch with a cu124 build


def test_gpu_stack_on_an_a100_with_nothing_asked_gets_newest_cuda_a_torch_build_exists_for():
    stack = resolve({}, _gpu_node(A100)).stack
    assert (stack["driver"], stack["cuda"], stack["python"]["packages"]) == ("615", "13.2", ["torch==2.13.*"])


def test_the_driver_loaded_on_the_nodes_is_kept_when_consistent():
    plan = resolve({}, _gpu_node(A100, driver_loaded="550.54.15"))
    assert plan.stack["driver"] == "550.54.15"
    assert plan.stack["cuda"] == "12.4"
    assert "driver: 550.54.15 (loaded on the nodes)" in plan.notes


def test_volta_stays_on_the_last_driver_and_cuda_that_support_it():
    stack = resolve({}, _gpu_node("Tesla V100-SXM2-16GB")).stack
    assert (stack["driver"], stack["cuda"]) == ("580", "12.9")
    assert stack["cudnn"] == "9.10.2"  # 9.17 needs compute capability 7.5


def test_cuda_11_8_on_debian12_picks_the_distro_gcc_11():
    plan = resolve({"cuda": "11.8"}, DEBIAN12)
    assert plan.stack["gcc"] == "11"
    assert any(note.startswith("gcc: 11 (newest consistent with cuda 11.8") for note in plan.notes)


def test_a_pinned_torch_gets_the_newest_cuda_it_has_a_build_for():
    stack = resolve({"python": {"packages": ["torch==2.3.1"]}}, _gpu_node(A100)).stack
    assert stack["cuda"] == "12.1"


def test_tensorflow_defaults_to_the_newest_release_horovod_runs_with():
    plan = resolve({"horovod": {"frameworks": ["tensorflow"]}}, DEBIAN12)
    assert plan.stack["python"]["packages"] == ["tensorflow==2.15.*"]
    assert plan.patches == ()


def test_env_gpu_source_leaves_cudnn_and_nccl_to_the_framework_wheels():
    stack = resolve({"gpu_source": "env", "driver": "580"}, DEBIAN12).stack
    assert stack["gpu_source"] == "env"
    assert stack["cuda"] == "13.0" and stack["cudnn"] is None and stack["nccl"] is None


@pytest.mark.parametrize("os_id, version", [("debian", "13"), ("rocky", "9.4"), ("rhel", "8.10")])
def test_an_os_no_role_installs_is_refused_naming_only_those_the_roles_install(os_id, version):
    """Debian 13 and the RHEL family: no role installs them, so the resolver refuses them as the pre-flight and the
    roles' metadata do, and its refusal offers only what the roles install."""
    with pytest.raises(ResolveError) as refused:
        resolve({}, NodeInfo(os_id=os_id, os_version=version))
    text = str(refused.value)
    assert f"node OS {os_id} {version} is not supported" in text
    assert "(supported: debian 12; ubuntu 24.04; ubuntu 22.04)" in text
    offered = text.split("(supported:")[1].split(")")[0]
    assert not any(name in offered for name in ("rhel", "rocky", "almalinux", "13")), offered
    preflight = yaml.safe_load((ROOT / "roles" / "hvd_preflight" / "defaults" / "main.yml").read_text())
    assert preflight["hvd_preflight_supported_os"] == {"Debian": ["12"], "Ubuntu": ["22.04", "24.04"]}
    for meta in (ROOT / "roles").glob("*/meta/main.yml"):
        platforms = yaml.safe_load(meta.read_text())["galaxy_info"].get("platforms", [])
        assert all(set(p["versions"]) <= {"bookworm", "jammy", "noble"} for p in platforms), (meta, platforms)


# --------------------------------------------------------------------------------------------- one rule each


def test_cuda_newer_than_driver_branch_is_refused_with_source():
    conflict = _only(_refusal({"cuda": "12.4", "driver": "535"}), "cuda-needs-driver")
    _assert_names_both(conflict, "stack.cuda=12.4", "stack.driver=535")
    assert conflict.message.startswith("cuda 12.4 needs driver >= 550.54.14, but driver 535 is older")
    assert "cuda-toolkit-release-notes" in conflict.source


def test_cuda_driver_refusal_mentions_minor_version_compatibility_when_it_applies():
    conflict = _only(_refusal({"cuda": "12.4", "driver": "535"}), "cuda-needs-driver")
    assert "minor-version compatibility" in conflict.message
    other_major = _only(_refusal({"cuda": "13.0", "driver": "575"}), "cuda-needs-driver")
    assert "minor-version compatibility" not in other_major.message


def test_exact_driver_older_than_the_toolkit_minimum_is_refused():
    conflict = _only(_refusal({"cuda": "12.4", "driver": "550.40.07"}), "cuda-needs-driver")
    _assert_names_both(conflict, "stack.cuda=12.4", "stack.driver=550.40.07")


def test_driver_branch_newer_than_the_gpu_supports_is_refused():
    conflict = _only(_refusal({"driver": "535", "cuda": "11.4"}, _gpu_node("Tesla K80")), "driver-vs-gpu")
    _assert_names_both(conflict, "stack.driver=535", "node.gpus=Tesla K80")
    assert "up to driver branch 470" in conflict.message


def test_driver_too_old_for_a_new_gpu_is_refused():
    conflict = _only(_refusal({"driver": "535", "cuda": "12.2"}, _gpu_node("NVIDIA B200")), "driver-vs-gpu")
    assert "needs cuda >= 12.8" in conflict.message and "driver 535" in conflict.message


def test_cuda_older_than_the_gpu_needs_is_refused():
    conflict = _only(_refusal({"cuda": "11.7"}, _gpu_node("NVIDIA H100 80GB HBM3")), "cuda-vs-gpu")
    _assert_names_both(conflict, "stack.cuda=11.7", "node.gpus=NVIDIA H100 80GB HBM3")
    assert "needs cuda >= 11.8" in conflict.message and "sm_90" in conflict.message


def test_cuda_13_for_a_volta_gpu_is_refused():
    conflict = _only(_refusal({"cuda": "13.0"}, _gpu_node("Tesla V100-SXM2-16GB")), "cuda-vs-gpu")
    assert "needs cuda <= 12.9, not cuda 13.0" in conflict.message


def test_gcc_newer_than_the_cuda_accepts_is_refused():
    conflict = _only(_refusal({"cuda": "12.2", "gcc": "13"}), "cuda-vs-gcc")
    _assert_names_both(conflict, "stack.cuda=12.2", "stack.gcc=13")
    assert "accepts gcc <= 12" in conflict.message


def test_nccl_built_for_another_cuda_major_is_refused():
    conflict = _only(_refusal({"cuda": "13.0", "nccl": "2.21.5"}), "nccl-vs-cuda")
    _assert_names_both(conflict, "stack.nccl=2.21.5", "stack.cuda=13.0")


def test_cudnn_built_for_another_cuda_major_is_refused():
    conflict = _only(_refusal({"cuda": "13.0", "cudnn": "8.9.6"}), "cudnn-vs-cuda")
    _assert_names_both(conflict, "stack.cudnn=8.9.6", "stack.cuda=13.0")


def test_cudnn_9_17_on_a_pascal_gpu_is_refused():
    conflict = _only(_refusal({"cudnn": "9.17", "cuda": "12.8"}, _gpu_node("Tesla P100-PCIE-16GB")), "cudnn-vs-gpu")
    _assert_names_both(conflict, "stack.cudnn=9.17", "node.gpus=Tesla P100-PCIE-16GB")


def test_torch_without_a_build_for_the_cuda_is_refused():
    conflict = _only(_refusal({"cuda": "12.4", "python": {"packages": ["torch==2.3.1"]}}), "pytorch-vs-cuda")
    _assert_names_both(conflict, "stack.python.packages=torch==2.3.1", "stack.cuda=12.4")
    assert "cu118, cu121 builds only" in conflict.message


def test_torch_for_another_python_is_refused():
    stack = {"python": {"manager": "conda", "version": "3.13", "packages": ["torch==2.3.1"]}}
    conflict = _only(_refusal(stack), "pytorch-vs-python")
    _assert_names_both(conflict, "stack.python.packages=torch==2.3.1", "stack.python.version=3.13")


def test_horovod_with_torch_2_13_is_accepted_with_the_cxx17_patch_verified_here():
    plan = resolve({"python": {"packages": ["torch==2.13.0"]}})
    assert plan.patches == ("cxx17",)
    assert plan.stack["python"]["packages"] == ["torch==2.13.0"]


def test_horovod_with_torch_newer_than_verified_is_refused_saying_why():
    conflict = _only(_refusal({"python": {"packages": ["torch==2.14.0"]}}), "horovod-vs-pytorch")
    _assert_names_both(conflict, "stack.horovod.version=0.28.1 (default)", "stack.python.packages=torch==2.14.0")
    assert "C++20" in conflict.message and "not verified" in conflict.message


def test_horovod_with_gcc_13_gets_the_headers_patch_that_built_it_with_gcc_13_3():
    """0.28.1 misses two includes GCC 13 no longer pulls in (horovod#3957); with hvd_horovod's gcc13-headers patch it
    built with GCC 13.3 on a lent GPU machine (tests/gpu/lent_machine.sh). Below 13 no patch is carried for it."""
    plan = resolve({"gcc": "13"}, DEBIAN12)
    assert plan.stack["gcc"] == "13" and plan.patches == ("cxx17", "gcc13-headers")
    assert "horovod patch gcc13-headers: lifts the break on gcc>=13" in plan.notes
    assert resolve({"gcc": "12"}, DEBIAN12).patches == ("cxx17",)
    with_conda = resolve({"python": {"manager": "conda", "version": "3.11"}},
                         NodeInfo(os_id="ubuntu", os_version="24.04", gcc="13.3.0", python="3.12.3"))
    assert with_conda.stack["gcc"] == "13" and "gcc13-headers" in with_conda.patches



def test_horovod_with_python_3_12_is_refused():
    stack = {"horovod": {"version": "0.28.1"}, "python": {"manager": "conda", "version": "3.12"}}
    conflict = _only(_refusal(stack), "horovod-vs-python")
    _assert_names_both(conflict, "stack.horovod.version=0.28.1", "stack.python.version=3.12")


def test_horovod_with_tensorflow_2_16_is_refused():
    conflict = _only(_refusal({"python": {"packages": ["tensorflow==2.16.1"]}}), "horovod-vs-tensorflow")
    assert "Keras 3" in conflict.message
    assert conflict.source == "https://github.com/horovod/horovod/issues/4290"


def test_tensorflow_for_another_cuda_major_is_refused():
    stack = {"cuda": "11.8", "gcc": "11", "python": {"packages": ["tensorflow==2.15.0"]}}
    conflict = _only(_refusal(stack), "tensorflow-vs-cuda")
    _assert_names_both(conflict, "stack.python.packages=tensorflow==2.15.0", "stack.cuda=11.8")


def test_openmpi_3_1_3_is_refused_for_its_known_hangs():
    conflict = _only(_refusal({"mpi": {"version": "3.1.3", "source": "package"}}), "openmpi-known-bad")
    _assert_names_both(conflict, "stack.mpi.version=3.1.3", "stack.horovod.version=0.28.1 (default)")
    assert "hangs" in conflict.message
    assert conflict.source == "https://github.com/horovod/horovod/blob/master/docs/install.rst"


def test_nccl_gpu_operations_on_a_cpu_stack_is_refused():
    conflict = _only(_refusal({"horovod": {"gpu_operations": "nccl"}}, gpu=False), "gpu-ops-need-gpu")
    _assert_names_both(conflict, "stack.horovod.gpu_operations=nccl", "gpu=false (CPU-only stack)")


def test_gpu_parts_asked_for_on_a_cpu_stack_are_refused():
    conflict = _only(_refusal({"cuda": "12.4"}, gpu=False), "gpu-part-on-cpu-stack")
    _assert_names_both(conflict, "stack.cuda=12.4", "gpu=false (CPU-only stack)")


def test_venv_python_other_than_the_nodes_is_refused():
    conflict = _only(_refusal({"python": {"version": "3.10"}}), "venv-uses-node-python")
    _assert_names_both(conflict, "stack.python.version=3.10", "node.python=3.11.2")


def test_open_mpi_source_build_without_a_version_is_refused():
    _only(_refusal({"mpi": {"source": "source"}}), "mpi-source-needs-version")


def test_unknown_cuda_version_is_refused_listing_the_known_ones():
    conflict = _only(_refusal({"cuda": "12.99"}), "unknown-version")
    assert conflict.message.startswith("unknown cuda 12.99 (known: 11.0, 11.1,")
    assert "12.4" in conflict.message and conflict.choices[0] == "stack.cuda=12.99"


def test_unknown_torch_version_is_refused():
    conflict = _only(_refusal({"python": {"packages": ["torch==9.0.0"]}}), "unknown-version")
    assert "unknown pytorch 9.0.0" in conflict.message


def test_unsupported_node_os_is_refused():
    conflict = _only(_refusal({}, NodeInfo(os_id="fedora", os_version="40")), "unsupported-os")
    assert "debian 12" in conflict.message


def test_a_conflict_with_a_defaulted_value_says_it_was_a_default():
    conflict = _only(_refusal({"cuda": "13.0"}, _gpu_node("Tesla K80")), "cuda-vs-gpu")
    assert conflict.choices == ("stack.cuda=13.0", "node.gpus=Tesla K80")
    driver = _only(_refusal({"cuda": "13.0"}, _gpu_node("Tesla K80")), "driver-vs-gpu")
    assert driver.choices[0].endswith("(default)")


# --------------------------------------------------------------------------------------------- all together


def test_several_conflicts_are_reported_together():
    stack = {
        "driver": "535",
        "cuda": "12.4",
        "gcc": "13",
        "nccl": "2.21.5",
        "cudnn": "9.17",
        "mpi": {"version": "3.1.3"},
        "python": {"version": "3.12", "packages": ["torch==2.3.1", "tensorflow==2.16.1"]},
    }
    rules = {c.rule for c in _refusal(stack, _gpu_node("Tesla V100-SXM2-16GB"))}
    assert rules >= {
        "cuda-needs-driver",
        "cudnn-vs-gpu",
        "pytorch-vs-cuda",
        "horovod-vs-python",
        "horovod-vs-tensorflow",
        "openmpi-known-bad",
        "venv-uses-node-python",
    }


def test_resolve_error_is_a_user_error_with_one_line_per_conflict():
    with pytest.raises(ResolveError) as caught:
        resolve({"cuda": "12.4", "driver": "535", "mpi": {"version": "3.1.3"}}, DEBIAN12)
    error = caught.value
    assert isinstance(error, HvdError) and error.exit_code == 2
    lines = str(error).splitlines()
    assert len(lines) == len(error.conflicts) == 2
    assert lines[0].startswith("cuda-needs-driver: cuda 12.4 needs driver >= 550.54.14")
    assert all("(see https://" in line for line in lines)


# --------------------------------------------------------------------------------------------- ranges


def test_a_cudnn_release_between_verified_rows_is_judged_by_the_range_that_covers_it():
    plan = resolve({"cuda": "12.4", "cudnn": "9.11.0"}, DEBIAN12)
    assert plan.stack["cudnn"] == "9.11.0"
    assert any("judged by the matrix range 9.11" in note for note in plan.notes)
    assert resolve({"cuda": "13.0", "cudnn": "9.13.1"}, DEBIAN12).stack["cudnn"] == "9.13.1"


def test_a_range_refuses_what_its_source_rules_out():
    conflict = _only(_refusal({"cuda": "11.8", "cudnn": "9.11"}), "cudnn-vs-cuda")
    assert "cudnn 9.11 is built for cuda 12.x only" in conflict.message
    _only(_refusal({"cuda": "13.0", "cudnn": "9.8.0"}), "cudnn-vs-cuda")  # 9.0-9.10: CUDA 11 and 12 only


def test_a_release_no_row_or_range_covers_is_refused_naming_the_newest_verified():
    conflict = _only(_refusal({"cudnn": "9.30"}), "unknown-version")
    assert "the newest verified is 9.17.0" in conflict.message and "9.0-9.10" in conflict.message


def test_defaults_come_from_verified_rows_only():
    verified = {row["version"] for row in load_matrix()["cudnn"]["releases"] if "version" in row}
    assert resolve({"cuda": "12.4"}, DEBIAN12).stack["cudnn"] in verified


# --------------------------------------------------------------------------------------------- what is listed


def test_an_unknown_version_is_reported_once_not_in_every_rule_it_takes_part_in():
    conflicts = _refusal({"cuda": "12.99"})
    assert [c.rule for c in conflicts] == ["unknown-version"]
    conflicts = _refusal({"python": {"packages": ["torch==9.0.0"]}})
    assert [c.rule for c in conflicts] == ["unknown-version"]


def test_conflicts_among_defaults_only_are_not_listed_next_to_the_users_mistake():
    # No CUDA suits both NCCL 2.8.4 (CUDA 11) and cuDNN 9.17 (CUDA 12/13): the defaulted CUDA then also
    # clashes with the defaulted torch, which the user never wrote: that one is not listed.
    conflicts = _refusal({"cudnn": "9.17", "nccl": "2.8.4"})
    assert [c.rule for c in conflicts] == ["nccl-vs-cuda"]
    for conflict in conflicts:
        assert any("(default)" not in choice for choice in conflict.choices), conflict


def test_each_conflict_names_the_hosts_yaml_line_of_the_value_the_user_wrote():
    lines = {"stack.cuda": 4, "stack.driver": 5, "stack.python.packages[1]": 9}
    with pytest.raises(ResolveError) as caught:
        resolve({"cuda": "12.4", "driver": "535", "python": {"packages": ["numpy", "torch==2.0.1"]}}, DEBIAN12,
                lines=lines, path="site/hosts.yaml")
    conflicts = caught.value.conflicts
    driver = _only(conflicts, "cuda-needs-driver")
    assert driver.where == "site/hosts.yaml:4"
    assert driver.choices == ("stack.cuda=12.4 (line 4)", "stack.driver=535 (line 5)")
    torch = _only(conflicts, "pytorch-vs-cuda")
    assert torch.where == "site/hosts.yaml:9" and torch.choices[0] == "stack.python.packages=torch==2.0.1 (line 9)"
    assert all(line.startswith("site/hosts.yaml:") for line in str(caught.value).splitlines())


def test_an_unknown_version_names_its_line():
    with pytest.raises(ResolveError) as caught:
        resolve({"cudnn": "9.30"}, DEBIAN12, lines={"stack.cudnn": 7})
    assert str(caught.value).startswith("hosts.yaml:7: unknown-version: unknown cudnn 9.30")



# --------------------------------------------------------------------------------------------- gpu_repo distro


def test_gpu_repo_distro_takes_the_archives_cuda_and_cudnn_and_nccl_from_the_frameworks_wheels():
    """README's golden image (driver 535 from Debian's archive, no device): Debian 12 packages CUDA 11.8 only and
    neither cuDNN nor NCCL, and only a PyTorch whose default wheel is built for CUDA 11 fits that toolkit."""
    plan = resolve({"driver": "535", "gpu_repo": "distro", "without_device": True}, DEBIAN12)
    stack = plan.stack
    assert (stack["cuda"], stack["gcc"], stack["python"]["packages"]) == ("11.8", "11", ["torch==2.0.*", "setuptools<70"])
    assert (stack["cudnn"], stack["nccl"]) == ("8.5.0.96", "2.14.3")
    assert (stack["cudnn_source"], stack["nccl_source"], stack["gpu_source"]) == ("env", "env", "system")
    assert "cuda: 11.8 (the debian 12 package nvidia-cuda-toolkit, gpu_repo distro)" in plan.notes
    assert "nccl: 2.14.3 (from pytorch 2.0's wheels, gpu_repo distro)" in plan.notes
    assert plan.patches == ()  # PyTorch 2.0 builds with C++14: no cxx17 patch


def test_gpu_repo_distro_refuses_another_cuda_naming_both_lines():
    conflict = _only(_refusal({"gpu_repo": "distro", "cuda": "12.1"}), "cuda-vs-distro-cuda")
    _assert_names_both(conflict, "stack.cuda=12.1",
                       "stack.gpu_repo=distro (debian 12: nvidia-cuda-toolkit 11.8)")
    assert conflict.message == "gpu_repo distro installs the archive's cuda 11.8, not cuda 12.1"


def test_gpu_repo_distro_refuses_a_pytorch_whose_index_wheel_is_built_for_another_cuda_major():
    conflict = _only(_refusal({"gpu_repo": "distro", "python": {"packages": ["torch==2.5.1"]}}),
                     "pytorch-vs-distro-cuda")
    assert conflict.message.startswith("pytorch 2.5.1's wheel on the package index is built for cuda 12.4, but")
    assert conflict.choices[0] == "stack.python.packages=torch==2.5.1"


def test_gpu_repo_distro_refuses_an_nccl_other_than_the_frameworks_own():
    conflict = _only(_refusal({"gpu_repo": "distro", "nccl": "2.16.5"}), "gpu-repo-distro")
    assert conflict.message == "with gpu_repo distro nccl comes from pytorch 2.0's own wheels (nccl 2.14.3), not nccl 2.16.5"


def test_gpu_repo_distro_on_an_os_whose_archive_has_no_toolkit_is_refused_alone():
    ubuntu = NodeInfo(os_id="ubuntu", os_version="22.04", gcc="11.4.0", python="3.10.12")
    conflicts = _refusal({"gpu_repo": "distro"}, ubuntu)
    assert [c.rule for c in conflicts] == ["gpu-repo-distro"]
    assert conflicts[0].message.startswith("ubuntu 22.04 has no CUDA toolkit package hvdcluster knows")


def test_unprobed_gpu_repo_distro_plans_the_archive_the_matrix_knows_and_holds_the_nodes_to_its_os():
    """`up` resolves before it reaches a node: the plan is Debian 12's (its gcc and python defaults too), and the
    pre-flight refuses a node that runs anything else."""
    stack = resolve({"driver": "535", "gpu_repo": "distro"}).stack
    assert (stack["cuda"], stack["gcc"], stack["python"]["version"]) == ("11.8", "11", "3.11")
    assert stack["archive_os"] == {"Debian": ["12"]}
    assert "archive_os" not in resolve({"driver": "535"}).stack


def test_building_against_pytorch_2_0_adds_setuptools_below_70_unless_the_user_lists_setuptools():
    assert resolve({"python": {"packages": ["torch==2.0.1"]}}, DEBIAN12).stack["python"]["packages"] == [
        "torch==2.0.1", "setuptools<70"]
    listed = ["torch==2.0.1", "setuptools==69.5.1"]
    assert resolve({"python": {"packages": listed}}, DEBIAN12).stack["python"]["packages"] == listed
    assert "setuptools<70" not in resolve({}, DEBIAN12).stack["python"]["packages"]


def test_gpu_repo_distro_without_pytorch_is_refused_for_want_of_the_wheels_that_bring_cudnn_and_nccl():
    conflict = _only(_refusal({"gpu_repo": "distro", "horovod": {"frameworks": ["tensorflow"]}}), "gpu-repo-distro")
    assert "this stack has no PyTorch whose wheels the matrix knows; use gpu_repo: nvidia" in conflict.message


# --------------------------------------------------------------------------------------------- nccl-tests

NCCL_TESTS_PIN = "a93c09241f55985677caa5151caaa8b1fc7cd6dfa40201e2ea1534d3326c983f"
GOLDEN = {"driver": "535", "gpu_repo": "distro", "without_device": True}
# The shared copy of the release (../shared/sources next to the checkout): read in place, never copied into the
# repository. An extra layer: a plain clone has none, and the test that reads it is skipped.
SHARED_NCCL_TESTS = ROOT.parent / "shared" / "sources" / "nccl-tests-2.19.6.tar.gz"


def test_nccl_tests_is_pinned_per_tarball_source_with_its_upstream_tag_and_commit():
    [row] = load_matrix()["nccl_tests"]
    assert (row["version"], row["tag"], row["commit"]) == (
        "2.19.6", "v2.19.6", "a0b82b2260cf5152b9f8c061bbf7eaf0ba096432")
    assert row["upstream"] == "https://github.com/NVIDIA/nccl-tests"
    [tarball] = row["tarballs"]  # GitHub's own tag tarball: no pin (nobody here could compute its sha256)
    assert tarball["sha256"] == NCCL_TESTS_PIN
    assert tarball["made_by"].startswith("git archive --prefix=nccl-tests-2.19.6/ v2.19.6")


def test_the_nccl_tests_pin_is_the_sha256_of_the_shared_git_archive_of_the_tag():
    if not SHARED_NCCL_TESTS.is_file():
        pytest.skip(f"{SHARED_NCCL_TESTS} is not next to this checkout: the shared copy of the release is an extra "
                    "layer; the pin itself is checked above")
    import hashlib

    assert hashlib.sha256(SHARED_NCCL_TESTS.read_bytes()).hexdigest() == NCCL_TESTS_PIN


@pytest.mark.parametrize("given", [{}, {"version": "2.19.6"}, {"url": "/mirror/nccl-tests-2.19.6.tar.gz"},
                                   {"sha256": NCCL_TESTS_PIN}])
def test_nccl_tests_without_its_tarball_and_sha256_is_refused_at_its_line_saying_what_to_give(given):
    conflicts = _refusal({**GOLDEN, "nccl_tests": given}, lines={"stack.nccl_tests": 9}, path="site/hosts.yaml")
    conflict = _only(conflicts, "nccl-tests-needs-tarball")
    assert conflict.where == "site/hosts.yaml:9" and "\n" not in conflict.message
    assert conflict.choices[1] == f"stack.nccl_tests.{'sha256' if 'url' in given else 'url'}=(unset)"
    assert "point stack.nccl_tests.url at your mirror or a local copy of the release" in conflict.message
    assert f"has sha256 {NCCL_TESTS_PIN}" in conflict.message  # the git archive's pin, named as such: no GitHub digest
    assert conflict.source.startswith("https://github.com/NVIDIA/nccl-tests")
    assert str(ResolveError(conflicts)).startswith("site/hosts.yaml:9: nccl-tests-needs-tarball: nccl-tests 2.19.6 ")


def test_nccl_tests_with_the_pinned_tarball_resolves_to_the_default_release_and_says_which_pin_it_is():
    plan = resolve({**GOLDEN, "nccl_tests": {"url": "/mirror/x.tar.gz", "sha256": NCCL_TESTS_PIN}})
    assert plan.stack["nccl_tests"] == {"version": "2.19.6", "url": "/mirror/x.tar.gz", "sha256": NCCL_TESTS_PIN}
    [note] = [n for n in plan.notes if n.startswith("nccl_tests:")]
    assert "git archive --prefix=nccl-tests-2.19.6/ v2.19.6" in note and "a0b82b2260cf" in note


def test_nccl_tests_from_another_tarball_or_release_is_built_by_the_sha256_the_stack_gives():
    other = resolve({**GOLDEN, "nccl_tests": {"url": "https://m/x.tar.gz", "sha256": "b" * 64}})
    assert other.stack["nccl_tests"]["sha256"] == "b" * 64
    assert any("not one the version data pins" in n for n in other.notes)
    newer = resolve({**GOLDEN, "nccl_tests": {"version": "2.20.0", "url": "https://m/x.tar.gz", "sha256": "b" * 64}})
    assert newer.stack["nccl_tests"]["version"] == "2.20.0"
    assert any("not a release the version data lists (known: 2.19.6)" in n for n in newer.notes)


def test_nccl_tests_on_a_cpu_stack_is_not_built_and_the_plan_says_why():
    plan = resolve({"nccl_tests": {"url": "/mirror/x.tar.gz", "sha256": NCCL_TESTS_PIN}}, DEBIAN12)
    assert plan.stack["gpu"] is False and "nccl_tests" not in plan.stack
    assert "nccl_tests: not built (a CPU-only stack has no GPU for nccl-tests to measure)" in plan.notes
    # nor refused for a missing tarball: nothing would be built from it
    assert "nccl_tests" not in resolve({"nccl_tests": {}}, DEBIAN12, gpu=False).stack


def test_a_stack_that_asks_for_no_nccl_tests_builds_none_and_says_nothing_of_it():
    plan = resolve(GOLDEN)
    assert "nccl_tests" not in plan.stack and not [n for n in plan.notes if "nccl_tests" in n]
