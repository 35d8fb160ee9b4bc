"""The resolver: consistent stacks resolve to the newest consistent choices; all conflicts come together, each
named once, at the hosts.yaml line of the value the user wrote; releases between verified rows are judged by
the matrix range that covers them.

The version matrix itself: test_compat_matrix.py; each rule's refusal: test_compat_rules.py; the GPU stack from
the distro's archive and nccl-tests: test_compat_gpu_repo.py; what they share: compat_helpers.py.
"""

from __future__ import annotations

import pytest
import yaml

from hvdcluster.compat import NodeInfo, Plan, ResolveError, load_matrix, resolve
from hvdcluster.errors import HvdError
from tests.unit.compat_helpers import A100, DEBIAN12, ROOT, _gpu_node, _only, _refusal


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
