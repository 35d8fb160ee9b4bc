"""`up`'s fast path: a cluster converged before from the same inputs is read, and only what drifted is converged,
from the first role that owns the drift; what the run left is read back, and only what is as it must be is
recorded. Ansible is a stand-in (cli_fakes.FakeRun) and the nodes' reading is given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hvdcluster import cli
from hvdcluster.cli import stages
from hvdcluster.drift import ROLES
from tests.unit.cli_fakes import SHARED, FakeRun, fake_reading, record_converged


@pytest.fixture
def recorded(rendered: Path, monkeypatch: pytest.MonkeyPatch) -> FakeRun:
    """A cluster converged before from these very inputs, every node's desired state on record."""
    record_converged(rendered / "c1")
    fake = FakeRun()
    monkeypatch.setattr(stages, "tracked_run", fake)
    return fake


def test_up_converges_nothing_when_every_node_is_in_its_desired_state(hosts, rendered, recorded, monkeypatch,
                                                                      capsys) -> None:
    fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": dict(SHARED)})
    capsys.readouterr()
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["fast_path"]["in_sync"] == ["gpu01", "gpu02"] and recorded.calls == []


def test_up_repairs_a_drifted_node_from_the_first_role_that_owns_its_drift(hosts, rendered, recorded, monkeypatch,
                                                                          capsys) -> None:
    fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": {**SHARED, "horovod.record": "other"}})
    capsys.readouterr()
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["fast_path"] == {"in_sync": ["gpu01"], "repaired": {"gpu02": ["horovod.record"]}, "by_hand": {},
                                "read_seconds": 0.1, "deep": False}
    assert recorded.calls == [{"playbook": "site.yml", "tags": "hvd_horovod,hvd_verify,hvd_state",
                               "extravars": {"hvd_targets": "gpu02", "hvd_state_health": True,
                                             "hvd_repair_items": {"gpu02": {"hvd_horovod": ["horovod.record"]}},
                                             "hvd_verify_mesh": "never"}}]


def test_what_check_deep_finds_the_next_up_reads_deep_and_repairs_until_a_deep_read_finds_it_installed(
        hosts, rendered, recorded, monkeypatch, capsys) -> None:
    """A library with one byte flipped (size and time kept): only a deep read sees it. `check --deep` names it; a
    plain `up` then reads deep by itself, and its repair run judges the env (hvd_pyenv) and reads it back deep; once
    that read-back finds it installed, the next `up` reads shallow again."""
    from hvdcluster import nodestate

    root = rendered / "c1"
    flipped = {**SHARED, "env.files": "changed: lib/python3.11/site-packages/torch/lib/libtorch_cpu.so"}
    calls = fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": flipped})
    assert cli.main(["check", str(hosts), "-o", str(rendered), "--deep"]) == 1
    assert nodestate.deep_findings(root) == ["gpu02"] and calls[-1][-1] == "deep"
    recorded.after = {"gpu01": dict(SHARED), "gpu02": dict(SHARED)}
    capsys.readouterr()
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert calls[-1][-1] == "deep" and doc["fast_path"]["deep"] and doc["converged"] == ["gpu02"]
    assert recorded.calls[-1]["extravars"] == {"hvd_targets": "gpu02", "hvd_pyenv_deep": True, "hvd_state_deep": True,
                                               "hvd_state_health": True, "hvd_verify_mesh": "never",
                                               "hvd_repair_items": {"gpu02": {"hvd_pyenv": ["env.files"]}}}
    assert recorded.calls[-1]["tags"].startswith("hvd_pyenv,")
    assert nodestate.deep_findings(root) == []
    fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": dict(SHARED)})
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--json"]) == 0
    assert not json.loads(capsys.readouterr().out)["fast_path"]["deep"]


def test_up_deep_reads_every_env_file_and_repairs_what_only_that_read_sees(hosts, rendered, recorded, monkeypatch,
                                                                           capsys) -> None:
    flipped = {**SHARED, "env.files": "changed: lib/python3.11/site-packages/torch/lib/libtorch_cpu.so"}
    calls = fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": flipped})
    recorded.after = {"gpu01": dict(SHARED), "gpu02": dict(SHARED)}
    capsys.readouterr()
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--deep", "--json"]) == 0
    assert len(calls) == 1 and calls[0][-1] == "deep"
    assert recorded.calls[-1]["extravars"]["hvd_pyenv_deep"] is True


def test_up_fails_naming_what_its_repair_left_and_records_only_what_is_as_it_must_be(
        hosts, rendered, recorded, monkeypatch, capsys) -> None:
    """The loop contract: the repair's own read-back still shows the drift, so `up` never reports it repaired."""
    from hvdcluster import nodestate

    root = rendered / "c1"
    drifted = {**SHARED, "env.dist.extra-pkg": "1.0 x"}
    fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": drifted})
    recorded.after = {"gpu01": dict(SHARED), "gpu02": drifted}  # the role ran, the extra distribution stayed
    capsys.readouterr()
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["not_repaired"] == ["gpu02: env.dist.extra-pkg: expected absent, found 1.0 x (hvd_pyenv did not "
                                   "repair it)"]
    assert doc["hosts"]["gpu02"]["status"] == "not-repaired" and doc["converged"] == [] and not doc["ok"]
    assert nodestate.desired(root, ["gpu02"]) == {"gpu02": SHARED}  # the drift never became the desired state
    assert nodestate.recorded_inputs(root) == ""  # the next up looks at every node again
    recorded.after = {"gpu01": dict(SHARED), "gpu02": dict(SHARED)}
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["not_repaired"] == []


def test_a_full_converge_never_records_a_nodes_deviation(hosts, rendered, recorded, monkeypatch, capsys) -> None:
    """`up --full` with the same inputs holds every node to its record; a deviation the roles left is named and
    not recorded (it was: the record took whatever the node reported)."""
    from hvdcluster import nodestate

    root = rendered / "c1"
    monkeypatch.setattr(stages, "tracked_run", recorded)
    recorded.after = {"gpu01": dict(SHARED), "gpu02": {**SHARED, "env.files": "added: sitecustomize.py"}}
    capsys.readouterr()
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--full", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["not_repaired"] == ["gpu02: env.files: expected ok, found added: sitecustomize.py (hvd_pyenv did not "
                                   "repair it)"]
    assert nodestate.desired(root, ["gpu01", "gpu02"]) == {"gpu01": SHARED, "gpu02": SHARED}


def test_what_no_role_repairs_is_named_and_not_converged(hosts, rendered, recorded, monkeypatch, capsys) -> None:
    fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": {**SHARED, "os.release": "debian 13"}})
    capsys.readouterr()
    assert cli.main(["up", str(hosts), "-o", str(rendered)]) == 1
    out = capsys.readouterr().out
    assert "not repaired: gpu02: os.release: expected debian 12, found debian 13 (no role repairs it)" in out
    assert recorded.calls == []


@pytest.mark.parametrize("why", ["inputs", "record", "unreachable", "full"])
def test_up_converges_every_node_when_the_fast_path_cannot_be_trusted(hosts, rendered, recorded, monkeypatch,
                                                                      why: str) -> None:
    from hvdcluster import nodestate

    root = rendered / "c1"
    found, unreachable, argv = {"gpu01": dict(SHARED), "gpu02": dict(SHARED)}, {}, []
    if why == "inputs":  # a variable Ansible reads by itself: every role may see it (inputs.change)
        (root / "group_vars" / "all" / "local.yml").write_text("ansible_python_interpreter: /usr/bin/python3\n")
    elif why == "record":
        (root / "state" / "gpu02.json").unlink()
    elif why == "unreachable":
        unreachable = {"gpu02": "unreachable: no route"}
    else:
        argv = ["--full"]
    fake_reading(monkeypatch, found, unreachable)
    assert cli.main(["up", str(hosts), "-o", str(rendered), *argv]) == 0
    # one run of the whole site.yml on every node: no role left out, no node left out
    assert recorded.calls == [{"playbook": "site.yml", "extravars": {"hvd_state_health": True}}]
    assert nodestate.recorded_inputs(root)  # the full converge decides about it, not the fast path


@pytest.mark.parametrize(("change", "drift", "tags", "mesh"), [
    ("hvd_pyenv_packages: [torch==2.13.0, six]\n", {}, "hvd_pyenv,hvd_horovod,hvd_verify,hvd_state", False),
    ("hvd_pyenv_packages: [torch==2.13.0, six]\n", {"mpi.version": "4.1.2"},
     ",".join([*ROLES[ROLES.index("hvd_openmpi"):], "hvd_state"]), True),  # every role from Open MPI's on
    ("hvd_fabric_interface: ib0\n", {}, "hvd_verify,hvd_state", True),  # read by `run` only: the cluster proven again
])
def test_up_after_a_change_of_variables_converges_every_node_from_the_first_role_that_reads_them(
        hosts, rendered, recorded, monkeypatch, capsys, change: str, drift: dict, tags: str, mesh: bool) -> None:
    """A package added to the env: every node runs hvd_pyenv and the roles after it (not the base, the mesh, Open
    MPI), or from an earlier role where a node's own drift needs it; the inputs are recorded once it ends well. The
    post-flight tests the mesh and mpirun again only where Open MPI's role (or an earlier one) runs, or where its own
    inputs changed."""
    from hvdcluster import nodestate

    root = rendered / "c1"
    (root / "group_vars" / "all" / "local.yml").write_text(change)
    fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": {**SHARED, **drift}})
    recorded.after = {"gpu01": dict(SHARED), "gpu02": dict(SHARED)}
    capsys.readouterr()
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--json"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert recorded.calls == [{"playbook": "site.yml", "tags": tags,
                               "extravars": {"hvd_targets": "gpu01,gpu02", "hvd_state_health": True,
                                             "hvd_verify_mesh": "always" if mesh else "never"}}]
    assert doc["changed_inputs"] == {"variables": [change.split(":")[0]], "roles": tags.split(",")[:-1]}
    assert doc["converged"] == ["gpu01", "gpu02"] and doc["ok"]
    assert f"inputs changed since the last converge: {change.split(':')[0]}" in captured.err
    assert nodestate.recorded_inputs(root) == nodestate.inputs_digest(root)  # the next up takes the fast path


def test_an_up_of_some_roles_keeps_the_record_of_the_last_full_converge(hosts, rendered, recorded, capsys) -> None:
    """`up --tags hvd_preflight` converges no node to the inputs (it records nothing): the last full converge's
    record stays, so a later `up` or `up --rolling` still takes the fast path."""
    from hvdcluster import nodestate

    root = rendered / "c1"
    digest = nodestate.recorded_inputs(root)
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--tags", "hvd_preflight"]) == 0
    assert recorded.calls and recorded.calls[0]["tags"] == "hvd_preflight"
    assert digest and nodestate.recorded_inputs(root) == digest


def test_a_change_of_variables_that_ends_badly_is_not_recorded(hosts, rendered, recorded, monkeypatch,
                                                               capsys) -> None:
    """The nodes read back unlike each other after the converge: named, and the inputs stay unrecorded (the next
    up converges again)."""
    from hvdcluster import nodestate

    root = rendered / "c1"
    (root / "group_vars" / "all" / "local.yml").write_text("hvd_pyenv_packages: [torch==2.13.0, six]\n")
    fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": dict(SHARED)})
    recorded.after = {"gpu01": dict(SHARED), "gpu02": {**SHARED, "env.lock": "l2"}}
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["not_repaired"] and not doc["ok"]
    assert nodestate.recorded_inputs(root) == ""


@pytest.mark.parametrize("changed, kept", [(0, True), (1, False)], ids=["nothing-changed", "node1-changed"])
def test_a_run_that_changed_no_node_keeps_the_record_it_forgot_at_its_start(hosts, rendered, recorded, changed, kept,
                                                                            monkeypatch) -> None:
    """`up --full` with gpu02 unreachable (stopped, or its host key refused): when no node changed, the record made by
    the last full converge is put back as it was (the nodes are as it says: the next `up` reads them against it);
    when gpu01 changed, it stays forgotten (the next `up` converges every node)."""
    from hvdcluster import nodestate

    root = rendered / "c1"
    before = (root / "state" / nodestate.INPUTS).read_bytes()
    real_call = recorded.__call__

    def run(*a, **kw):
        tracker, result = real_call(*a, **kw)
        tracker.hosts["gpu01"].ok, tracker.hosts["gpu01"].changed = 5, changed
        tracker.hosts["gpu02"].unreachable = 1
        assert nodestate.recorded_inputs(root) == ""  # forgotten while the run runs: a run cut short never counts
        return tracker, type("Result", (), {"rc": 4, "log": root / "log", "status": "failed"})()

    recorded.after = {"gpu01": dict(SHARED)}
    monkeypatch.setattr(stages, "tracked_run", run)
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--full"]) == 1
    assert (nodestate.saved_inputs(root) == before) is kept
    assert (nodestate.recorded_inputs(root) == "") is not kept


def test_a_first_converge_that_makes_the_cluster_key_is_recorded_with_it(hosts, rendered, monkeypatch,
                                                                         capsys) -> None:
    """The cluster key is made during the first converge and is one of the inputs: the digest recorded is the one
    after the run, so the next `up` takes the fast path."""
    from hvdcluster import nodestate

    root = rendered / "c1"
    fake = FakeRun()
    fake.after = {"gpu01": dict(SHARED), "gpu02": dict(SHARED)}
    real_call = fake.__call__

    def converge(*a, **kw):
        (root / "ssh").mkdir(exist_ok=True)
        (root / "ssh" / "id_ed25519.pub").write_text("ssh-ed25519 AAAAC3Nza hvdcluster@c1\n")
        return real_call(*a, **kw)

    monkeypatch.setattr(stages, "tracked_run", converge)
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--full"]) == 0
    assert nodestate.recorded_inputs(root) == nodestate.inputs_digest(root)
    fake_reading(monkeypatch, {"gpu01": dict(SHARED), "gpu02": dict(SHARED)})
    capsys.readouterr()
    assert cli.main(["up", str(hosts), "-o", str(rendered), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fast_path"]["in_sync"] == ["gpu01", "gpu02"]
