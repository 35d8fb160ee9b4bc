"""The GPU stack from the distro's archive (stack.gpu_repo: distro, README's golden image) and nccl-tests (pinned
per tarball source, built by the sha256 the stack gives, none on a CPU stack)."""

from __future__ import annotations

import pytest

from hvdcluster.compat import NodeInfo, ResolveError, load_matrix, resolve
from tests.unit.compat_helpers import DEBIAN12, ROOT, _assert_names_both, _only, _refusal


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
