"""What `up`'s fast path repairs, decided on plain data: a drift report in, the nodes and roles to converge out."""

from __future__ import annotations

import pytest

from hvdcluster import drift
from hvdcluster.repair import after_change, plan, takes_fast_path

NAMES = ["gpu01", "gpu02", "gpu03"]
STATE = {"os.release": "debian 12", "os.kernel": "6.1.0-18-amd64", "os.machine-id": "m" * 32, "cuda.version": "12.4",
         "pkg.libnccl2": "2.21.5-1+cuda12.4", "env.manifest": "e" * 16, "env.lock": "l" * 16, "env.files": "ok",
         "horovod.record": "r" * 16, "mesh.authorized": True}


def report(**drifted: dict) -> drift.Report:
    """Every node of NAMES recorded with STATE and read back with STATE, changed by ``drifted`` (node -> items)."""
    found = {n: {**STATE, **drifted.get(n, {})} for n in NAMES}
    return drift.compare({n: dict(STATE) for n in NAMES}, found, [], order=NAMES)


def test_a_cluster_in_sync_converges_nothing() -> None:
    todo = plan(report(), NAMES)
    assert todo.in_sync == NAMES and todo.targets == [] and todo.roles == []
    assert todo.summary(0.1) == {"in_sync": NAMES, "repaired": {}, "by_hand": {}, "read_seconds": 0.1, "deep": False}


def test_a_drifted_node_runs_the_role_that_owns_its_drift_and_the_post_flight() -> None:
    todo = plan(report(gpu02={"horovod.record": "x" * 16}), NAMES)
    assert todo.targets == ["gpu02"] and todo.in_sync == ["gpu01", "gpu03"]
    assert todo.roles == ["hvd_horovod", "hvd_verify"]
    assert todo.tags == "hvd_horovod,hvd_verify,hvd_state"
    # the roles are told what drifted, by node and owner
    # ... and the post-flight is told not to test the mesh and mpirun again: Horovod's wheel moves nothing they rely on
    assert todo.extravars == {"hvd_targets": "gpu02", "hvd_repair_items": {"gpu02": {"hvd_horovod": ["horovod.record"]}},
                              "hvd_verify_mesh": "never"}
    assert todo.repaired == {"gpu02": ["horovod.record"]}


def test_the_repair_runs_every_owner_any_drifted_node_needs_and_what_is_built_on_them() -> None:
    todo = plan(report(gpu03={"horovod.record": "x" * 16}, gpu01={"cuda.version": "12.5"}), NAMES)
    assert todo.targets == ["gpu01", "gpu03"]  # inventory order, not the order the drifts were found in
    # CUDA's owner, what is built on CUDA (nccl-tests, Horovod's wheel), the post-flight: not every role after CUDA
    assert todo.roles == ["hvd_cuda", "hvd_nccl_tests", "hvd_horovod", "hvd_verify"]
    assert todo.extravars == {"hvd_targets": "gpu01,gpu03", "hvd_repair_items": {
        "gpu01": {"hvd_cuda": ["cuda.version"]}, "gpu03": {"hvd_horovod": ["horovod.record"]}}, "hvd_verify_mesh": "never"}


def test_a_hold_put_back_moves_nothing_and_runs_no_role_built_on_its_owner() -> None:
    """An unheld Open MPI: hvd_openmpi holds it again and the post-flight proves the cluster; Horovod's wheel and
    nccl-tests, built on Open MPI, are not judged again (nothing was installed). A moved version does pull them."""
    held = {"pkg.openmpi-bin": "4.1.4-3+b1", "pkg.openmpi-bin.hold": True, "pkg.openmpi-bin.guard": True}
    state = {**STATE, **held}
    found = {n: dict(state) for n in NAMES}
    found["gpu02"].update({"pkg.openmpi-bin.hold": False, "pkg.openmpi-bin.guard": False})
    todo = plan(drift.compare({n: dict(state) for n in NAMES}, found, [], order=NAMES), NAMES)
    assert todo.roles == ["hvd_openmpi", "hvd_verify"]
    assert todo.extravars["hvd_repair_items"] == {
        "gpu02": {"hvd_openmpi": ["pkg.openmpi-bin.guard", "pkg.openmpi-bin.hold"]}}
    assert todo.extravars["hvd_verify_mesh"] == "never"  # the same Open MPI, held again: mpirun is not tested again
    found["gpu03"].update({"pkg.openmpi-bin": "4.1.5-1"})
    todo = plan(drift.compare({n: dict(state) for n in NAMES}, found, [], order=NAMES), NAMES)
    assert todo.roles == ["hvd_openmpi", "hvd_nccl_tests", "hvd_horovod", "hvd_verify"]
    assert todo.extravars["hvd_verify_mesh"] == "always"  # Open MPI moved: the mesh and mpirun are proven again


def test_what_no_role_repairs_is_the_operators_and_converges_nothing() -> None:
    todo = plan(report(gpu02={"os.release": "debian 13"}), NAMES)
    assert todo.targets == [] and todo.roles == []
    assert todo.by_hand == {"gpu02": ["os.release"]}
    assert "gpu02" not in todo.in_sync  # not converged, and not in sync either


def test_a_node_with_a_repairable_and_a_by_hand_drift_is_repaired_for_the_first_and_names_the_second() -> None:
    todo = plan(report(gpu01={"os.release": "debian 13", "pkg.libnccl2": "2.20.3-1+cuda12.4"}), NAMES)
    assert todo.targets == ["gpu01"] and todo.roles[0] == "hvd_nccl"
    assert todo.repaired == {"gpu01": ["pkg.libnccl2"]} and todo.by_hand == {"gpu01": ["os.release"]}


def test_a_reinstalled_node_runs_the_preflight_and_every_role() -> None:
    todo = plan(report(gpu03={"os.machine-id": "n" * 32, "horovod.record": "x" * 16}), NAMES)
    assert todo.reinstalled == ["gpu03"] and todo.roles == drift.ROLES
    assert "hvd_repair_items" not in todo.extravars  # every role whole on a reinstalled node, whatever was read
    assert todo.extravars["hvd_verify_mesh"] == "always"  # a new machine: the mesh and mpirun proven again


@pytest.mark.parametrize(("drifted", "mesh"), [
    ({"gpu02": {"horovod.record": "x" * 16}}, False),  # the same wheel installed again
    ({"gpu02": {"env.files": "changed"}}, False),  # files of the env taken out or put back
    ({"gpu02": {"mesh.authorized": False}}, True),  # hvd_ssh_mesh: the cluster's key
    ({"gpu02": {"base.fabric_interface": "eth9"}}, True),  # hvd_base: the fabric the mesh is reached over
    ({"gpu02": {"env.files": "changed"}, "gpu03": {"mesh.authorized": False}}, True),  # any node's mesh drift
])
def test_the_post_flight_tests_the_mesh_again_only_where_the_repair_moved_what_it_relies_on(drifted, mesh) -> None:
    todo = plan(report(**drifted), NAMES)
    assert todo.roles and todo.prove_mesh is mesh
    assert todo.extravars["hvd_verify_mesh"] == ("always" if mesh else "never")


@pytest.mark.parametrize(("first_role", "drifted", "mesh"), [
    ("hvd_pyenv", {}, False),  # a package added to the env: the env and Horovod on every node, nothing of the mesh
    ("hvd_horovod", {}, False),  # a Horovod build option
    ("hvd_verify", {}, True),  # the post-flight's own variables
    ("hvd_openmpi", {}, True),  # Open MPI's own variables: every node's Open MPI converged
    ("hvd_nccl", {}, True),  # from NCCL on: Open MPI runs too
    ("hvd_pyenv", {"gpu02": {"mesh.authorized": False}}, True),  # a node's drift reaches the mesh
    ("hvd_pyenv", {"gpu02": {"env.files": "changed"}}, False),  # a node's drift reaches only the env
])
def test_after_a_change_of_inputs_the_mesh_is_tested_again_only_where_the_run_can_move_it(first_role, drifted,
                                                                                           mesh) -> None:
    todo = after_change(report(**drifted), NAMES, first_role)
    assert todo.targets == NAMES and todo.roles[-1] == "hvd_verify" and todo.prove_mesh is mesh
    assert todo.extravars["hvd_verify_mesh"] == ("always" if mesh else "never")
    assert (set(todo.roles) & {"hvd_base", "hvd_ssh_mesh", "hvd_openmpi"} != set()) or first_role == "hvd_verify" \
        or not mesh


def test_a_changed_env_manifest_makes_hvd_pyenv_install_that_nodes_env_again() -> None:
    todo = plan(report(gpu02={"env.manifest": "f" * 16}, gpu03={"horovod.record": "x" * 16}), NAMES)
    assert todo.roles[0] == "hvd_pyenv" and todo.reinstall_env == ["gpu02"]
    assert todo.extravars == {"hvd_targets": "gpu02,gpu03", "hvd_pyenv_reinstall": ["gpu02"], "hvd_repair_items": {
        "gpu02": {"hvd_pyenv": ["env.manifest"]}, "gpu03": {"hvd_horovod": ["horovod.record"]}},
        "hvd_verify_mesh": "never"}


def test_the_summary_rounds_the_read_time() -> None:
    assert plan(report(), NAMES).summary(1.23456)["read_seconds"] == 1.23


@pytest.mark.parametrize("flag", ["full", "limit", "tags", "check", "verify"])
def test_a_narrowed_or_special_up_never_takes_the_fast_path(flag: str) -> None:
    plain = {"full": False, "limit": None, "tags": None, "check": False, "verify": False}
    assert takes_fast_path(**plain)
    assert not takes_fast_path(**{**plain, flag: "gpu01" if flag in ("limit", "tags") else True})


def test_a_removed_nccl_tests_binary_runs_hvd_nccl_tests_and_the_roles_after_it() -> None:
    item = {"nccl_tests.files": "ok"}
    found = {n: {**STATE, **item} for n in NAMES}
    found["gpu02"]["nccl_tests.files"] = "missing: bin/all_reduce_perf"
    todo = plan(drift.compare({n: {**STATE, **item} for n in NAMES}, found, [], order=NAMES), NAMES)
    assert todo.targets == ["gpu02"] and todo.roles == ["hvd_nccl_tests", "hvd_verify"]
    assert todo.roles[0] == "hvd_nccl_tests" and todo.repaired == {"gpu02": ["nccl_tests.files"]}


@pytest.mark.parametrize(("owners", "roles"), [
    ({"hvd_base"}, ["hvd_base", "hvd_verify"]),  # /etc/hosts, the CA bundle: nothing later reads them back
    ({"hvd_ssh_mesh", "hvd_base"}, ["hvd_base", "hvd_ssh_mesh", "hvd_verify"]),
    ({"hvd_pyenv"}, ["hvd_pyenv", "hvd_horovod", "hvd_verify"]),  # an env installed again holds no Horovod
    ({"hvd_openmpi"}, ["hvd_openmpi", "hvd_nccl_tests", "hvd_horovod", "hvd_verify"]),
    ({"hvd_slurm"}, ["hvd_slurm", "hvd_pyxis", "hvd_verify"]),
    ({"hvd_nccl"}, ["hvd_nccl", "hvd_nccl_tests", "hvd_horovod", "hvd_verify"]),
    ({"hvd_nvidia_driver"}, ["hvd_nvidia_driver", "hvd_nccl_tests", "hvd_horovod", "hvd_verify"]),
    ({"hvd_verify"}, ["hvd_verify"]),
    ({"hvd_preflight", "hvd_horovod"}, list(drift.ROLES)),  # a reinstalled node: every role
    (set(), []),
])
def test_a_repair_runs_the_owners_what_is_built_on_them_and_the_post_flight_in_site_order(owners, roles) -> None:
    from hvdcluster.repair import repair_roles

    assert repair_roles(owners) == roles


def test_every_role_built_on_another_comes_after_it_in_site_yml() -> None:
    """A role that must run after a repair of another is later in site.yml (a repair runs in its order)."""
    from hvdcluster.repair import BUILT_ON

    for role, later in BUILT_ON.items():
        assert all(drift.ROLES.index(role) < drift.ROLES.index(other) for other in later), (role, later)
