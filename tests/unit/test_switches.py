"""The roles a whole run leaves out (src/hvdcluster/switches.py): a switched role off on every node of the inventory
hvdcluster wrote is named in ``hvd_plays_off`` and its play matches no host; where that cannot be known here, the play
decides per node as before. The role's side of each switch is rendered as tests/unit/test_playbook_switches.py does."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import jinja2
import pytest
import yaml
from ansible.module_utils.parsing.convert_bool import boolean

from hvdcluster import runner, switches
from hvdcluster.runner import run_playbook

ROOT = Path(__file__).resolve().parents[2]


def role_switch(role: str, scope: dict) -> bool:
    """The role's own switch for a node: its default under the inventory's values, as Ansible would render it."""
    env = jinja2.Environment(undefined=jinja2.Undefined)
    env.filters["bool"] = lambda value: boolean(value, strict=False)
    defaults = yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())
    play = switches.switched_roles()[role]
    merged = {**defaults, **scope, **dict(play.get("vars") or {})}

    def render(text):
        return env.from_string(text).render(merged) if isinstance(text, str) and "{{" in text else text

    return boolean(render(merged[f"{role}_enabled"]), strict=False)


def inventory(tmp_path: Path, group: dict, hosts: dict[str, dict]) -> Path:
    root = tmp_path / "inv"
    (root / "group_vars" / "all").mkdir(parents=True)
    (root / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"hvd_nodes": {"hosts": hosts}}}}))
    (root / "group_vars" / "all" / "stack.yml").write_text(yaml.safe_dump(group))
    return root


def test_the_switched_playbooks_are_the_roles_with_a_switch_and_each_pattern_leaves_its_play_out_when_named() -> None:
    roles = switches.switched_roles()
    assert sorted(r.removeprefix("hvd_") for r in roles) == sorted(runner.SWITCHED_PLAYBOOKS)
    env = jinja2.Environment()
    env.filters["intersect"] = lambda a, b: [x for x in a if x in b]
    for role, play in roles.items():
        pattern = env.from_string(play["hosts"])
        assert pattern.render(ansible_run_tags=["all"]).strip() == "hvd_nodes"
        assert pattern.render(ansible_run_tags=["all"], hvd_plays_off=["hvd_other"]).strip() == "hvd_nodes"
        assert pattern.render(ansible_run_tags=["all"], hvd_plays_off=[role]).strip() == "!all"
        assert pattern.render(ansible_run_tags=[role], hvd_targets="node2").strip() == "node2"
        assert pattern.render(ansible_run_tags=["hvd_base"]).strip() == "!all"


GRID = {"hvd_gpu": [None, True, False, "false"], "hvd_nccl_tests_url": [None, "", "https://mirror.example/t.tar.gz"],
        "hvd_scheduler": [None, {}, {"kind": "slurm"}, {"kind": "slurm", "containers": "pyxis"}]}


def test_a_role_is_left_out_exactly_where_its_own_switch_is_off_on_every_node(tmp_path: Path) -> None:
    for n, values in enumerate(itertools.product(*GRID.values())):
        group = {k: v for k, v in zip(GRID, values) if v is not None}
        root = inventory(tmp_path / str(n), group, {"node1": {"ansible_host": "10.0.0.1"}, "node2": {}})
        expected = sorted(r for r in switches.switched_roles() if not role_switch(r, group))
        assert switches.plays_off(root) == expected, group


def test_one_node_that_turns_a_role_on_keeps_its_play_and_what_is_not_known_here_is_not_left_out(
        tmp_path: Path) -> None:
    cpu = {"hvd_gpu": False}
    assert "hvd_cuda" in switches.plays_off(inventory(tmp_path / "a", cpu, {"n1": {}, "n2": {}}))
    # one node's own switch on: the play runs (and decides per node)
    assert "hvd_cuda" not in switches.plays_off(inventory(tmp_path / "b", cpu, {"n1": {}, "n2": {"hvd_cuda_enabled": True}}))
    # a value Ansible would template first: not judged here
    templated = {"hvd_gpu": "{{ lookup('ansible.builtin.env', 'GPU') | bool }}"}
    off = switches.plays_off(inventory(tmp_path / "c", templated, {"n1": {}}))
    assert not {"hvd_cuda", "hvd_nvidia_driver", "hvd_nccl_tests"} & set(off), off
    # variables this reading does not see (host_vars/, another group's): nothing left out
    root = inventory(tmp_path / "d", cpu, {"n1": {}})
    (root / "host_vars").mkdir()
    assert switches.plays_off(root) == []
    root = inventory(tmp_path / "e", cpu, {"n1": {}})
    (root / "group_vars" / "hvd_nodes.yml").write_text("hvd_cuda_enabled: true\n")
    assert switches.plays_off(root) == []
    assert switches.plays_off(tmp_path / "missing") == []


def test_a_run_of_a_role_off_everywhere_never_reaches_a_node(tmp_path: Path) -> None:
    """Real ansible-runner: cuda.yml on an inventory whose one node is off for CUDA (a CPU stack) and unreachable by
    design (TEST-NET-1): the play matches no host, so nothing is gathered or tried on the node."""
    root = inventory(tmp_path, {"hvd_gpu": False}, {"node1": {"ansible_host": "192.0.2.1"}})
    result = run_playbook(root, "cuda.yml")
    argv = json.loads((result.artifacts / "command").read_text())["command"]
    assert "-e" in argv, argv  # hvd_plays_off, given by hvdcluster
    events = [json.loads(p.read_text()) for p in (result.artifacts / "job_events").glob("*.json")]
    kinds = {e["event"] for e in events}
    assert result.rc == 0 and "playbook_on_no_hosts_matched" in kinds, kinds
    assert not any(e.get("event_data", {}).get("host") for e in events), kinds


@pytest.mark.parametrize("playbook", ["site.yml", "cuda.yml"])
def test_hvdcluster_names_the_roles_off_everywhere_for_site_yml_and_the_switched_playbooks(
        tmp_path: Path, monkeypatch, playbook: str) -> None:
    seen = {}

    def fake_run(ansible_runner, private, ident, name, inventory_dir, args, extravars, envvars, handler):
        seen["extravars"] = extravars
        raise SystemExit  # no run: what it was given is all this test reads

    monkeypatch.setattr(runner, "_run", fake_run)
    root = inventory(tmp_path, {"hvd_gpu": False}, {"node1": {}})
    with pytest.raises(SystemExit):
        run_playbook(root, playbook, extravars={"hvd_targets": "node1"})
    assert seen["extravars"]["hvd_targets"] == "node1"
    assert {"hvd_cuda", "hvd_nvidia_driver", "hvd_slurm"} <= set(seen["extravars"]["hvd_plays_off"])


def test_the_switched_tasks_are_the_tagged_ones_each_with_its_switch_first() -> None:
    """A task tagged <role>_switch_<name> is one task whose `when` list starts with its switch."""
    assert switches.switched_tasks() == {
        "hvd_base_switch_hostname": ("hvd_base", "hvd_base_set_hostname | bool"),
        "hvd_base_switch_bundle": ("hvd_base", "hvd_base_bundle | length > 0"),
        "hvd_openmpi_switch_source": ("hvd_openmpi", "hvd_openmpi_source == 'source'"),
    }


ALL_TASKS_OFF = ["hvd_base_switch_bundle", "hvd_base_switch_hostname", "hvd_openmpi_switch_source"]


@pytest.mark.parametrize(("group", "node2", "extravars", "kept"), [
    ({"hvd_set_hostname": False}, {}, None, []),
    ({}, {}, None, []),  # the roles' own defaults: no hostname set, no bundle, the distro's Open MPI
    ({"hvd_set_hostname": False}, {"hvd_set_hostname": True}, None, ["hvd_base_switch_hostname"]),
    ({"hvd_openmpi_source": "source"}, {}, None, ["hvd_openmpi_switch_source"]),
    ({}, {"hvd_base_bundle": "/srv/bundle"}, None, ["hvd_base_switch_bundle"]),
    ({}, {}, {"hvd_base_bundle": "/srv/bundle"}, ["hvd_base_switch_bundle"]),  # an extra variable of the run
    ({"hvd_openmpi_source": "{{ lookup('env', 'MPI_SOURCE') }}"}, {}, None, ["hvd_openmpi_switch_source"]),
    ({"hvd_base_set_hostname": "{{ hvd_set_hostname }}"}, {}, None, ["hvd_base_switch_hostname"]),
])
def test_a_switched_task_is_left_out_exactly_where_its_switch_is_off_on_every_node(
        tmp_path: Path, group: dict, node2: dict, extravars: dict | None, kept: list[str]) -> None:
    """The switch rendered over the role's defaults, each node's inventory variables and the run's extra variables;
    one node that turns a task on keeps it, and so does a value that is itself a template (Ansible would render it
    first: not known here)."""
    root = inventory(tmp_path, group, {"node1": {}, "node2": node2})
    assert switches.tasks_off(root, extravars) == [tag for tag in ALL_TASKS_OFF if tag not in kept]


def test_nothing_is_left_out_where_variables_lie_beside_hvdclusters_own_inventory(tmp_path: Path) -> None:
    root = inventory(tmp_path, {}, {"node1": {}})
    assert switches.tasks_off(root) == ALL_TASKS_OFF
    (root / "host_vars").mkdir()
    assert switches.tasks_off(root) == []
    assert switches.tasks_off(tmp_path / "missing") == []


@pytest.mark.parametrize(("playbook", "skipped"), [("site.yml", True), ("base.yml", True), ("openmpi.yml", True),
                                                   ("state.yml", False), ("health.yml", False)])
def test_hvdcluster_leaves_the_switched_tasks_off_everywhere_out_of_the_runs_of_roles(
        tmp_path: Path, monkeypatch, playbook: str, skipped: bool) -> None:
    seen = {}

    def fake_run(ansible_runner, private, ident, name, inventory_dir, args, extravars, envvars, handler):
        seen["args"] = args
        raise SystemExit  # no run: what it was given is all this test reads

    monkeypatch.setattr(runner, "_run", fake_run)
    root = inventory(tmp_path, {"hvd_openmpi_source": "source"}, {"node1": {}})
    with pytest.raises(SystemExit):
        run_playbook(root, playbook, tags="hvd_base")
    expected = ["--skip-tags", "hvd_base_switch_bundle,hvd_base_switch_hostname"] if skipped else []
    assert seen["args"] == ["--tags", "hvd_base", *expected]
