"""One rule each: every rule of the resolver refuses its inconsistent pair with both choices, its rule id and a
source."""

from __future__ import annotations

from hvdcluster.compat import NodeInfo, resolve
from tests.unit.compat_helpers import DEBIAN12, _assert_names_both, _gpu_node, _only, _refusal


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
