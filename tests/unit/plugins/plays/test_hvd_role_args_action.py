"""The roles' argument specs, checked for every node of a play in one task (hvd_role_args) where Ansible would check
each role on each node in a task of its own: real ansible-playbook runs of the project's playbooks, as an operator
runs them, against inventories whose nodes are unreachable by design (TEST-NET-1) or the controller itself.

Under ansible-test units these run in the controller's context (this folder is neither modules/ nor module_utils/).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from ansible_collections.hvd.cluster.tests.unit.plugins.support import ANSIBLE_PLAYBOOK, ROOT


def inventory(tmp_path: Path, hosts: dict[str, dict], node2: str) -> Path:
    root = tmp_path / "inv"
    (root / "host_vars").mkdir(parents=True)
    (root / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"hvd_nodes": {"hosts": hosts}}}}))
    (root / "host_vars" / "node2.yml").write_text(node2)
    return root


def playbook(root: Path, name: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(root), f"playbooks/{name}", *args], cwd=ROOT,
                          capture_output=True, text=True, env=env, timeout=300)


def test_a_bad_value_on_one_node_stops_the_converge_before_any_node_is_reached(tmp_path: Path) -> None:
    """site.yml's first task checks every role of the converge for every node: a value out of a role's choices and a
    value of the wrong type on node2 (for roles that run long after the pre-flight) are both named, with the node,
    the role and the file and line they were read from; the run fails and no node is ever connected to."""
    hosts = {f"node{i}": {"ansible_host": f"192.0.2.{i}", "ansible_user": "root"} for i in (1, 2, 3)}
    root = inventory(tmp_path, hosts, "hvd_openmpi_source: sorce\nhvd_horovod_debug_info: maybe\n"
                                      "hvd_nvidia_driver_reboot: true\nhvd_nvidia_driver_reboot_batch: many\n")
    proc = playbook(root, "site.yml")
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0, out
    node2 = root / "host_vars" / "node2.yml"
    assert (f"node2: hvd.cluster.hvd_openmpi: value of hvd_openmpi_source must be one of: package, source, got: sorce"
            f" ({node2}:1)") in out, out
    assert "node2: hvd.cluster.hvd_horovod:" in out and "hvd_horovod_debug_info" in out and f"({node2}:2)" in out, out
    # the place of the option the message names, not of one whose name it starts with (..._reboot, line 3)
    batch = re.findall(r"argument '+hvd_nvidia_driver_reboot_batch'+ [^;]*?\((\S+)\)", out)
    assert batch and set(batch) == {f"{node2}:4"}, out
    assert "node1:" not in out.split("Validation of arguments failed", 1)[1].split("PLAY RECAP")[0], out
    assert "UNREACHABLE" not in out and "Gathering Facts" not in out and "Look for python3" not in out, out


def test_a_value_that_needs_the_roles_defaults_is_checked_in_the_roles_own_play(tmp_path: Path) -> None:
    """A value templated from a name no play knows is left alone by the pre-flight's early check (the role's defaults
    are not loaded there) and named by the role's own play, before the role's first task; a node whose values fit
    passes (node1 and node3). The nodes are the controller itself (a local connection): the play gathers facts, and
    the role's tasks are skipped by tag (the play's check is tagged always)."""
    hosts = {f"node{i}": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
             for i in (1, 2, 3)}
    root = inventory(tmp_path, hosts, 'hvd_openmpi_version: "{{ hvd_no_such_name }}"\n')
    early = playbook(root, "preflight.yml", "-v", "--tags", "hvd_preflight", "--skip-tags", "hvd_preflight")
    assert early.returncode == 0, early.stdout + early.stderr
    assert "are valid on 3 host(s)" in " ".join(early.stdout.split()), early.stdout
    own = playbook(root, "openmpi.yml", "--tags", "hvd_openmpi", "--skip-tags", "hvd_openmpi")
    out = " ".join((own.stdout + own.stderr).split())
    assert own.returncode != 0, out
    assert (f"node2: hvd.cluster.hvd_openmpi: hvd_openmpi_version ({root / 'host_vars' / 'node2.yml'}:1):" in out
            and "hvd_no_such_name" in out), out
    assert "node1: hvd" not in out and "node3: hvd" not in out, out


def test_every_play_of_the_converge_checks_its_roles_once_and_turns_ansibles_own_check_off() -> None:
    """No role of site.yml is checked per node by Ansible's prepended task (rolespec_validate off), and the
    pre-flight's early check names every role the converge runs, so none is forgotten when a role is added."""
    site = yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text())
    roles: list[str] = []
    for step in site:
        for play in yaml.safe_load((ROOT / "playbooks" / step["ansible.builtin.import_playbook"]).read_text()):
            for task in play.get("tasks") or []:
                for key in ("ansible.builtin.import_role", "ansible.builtin.include_role"):
                    if key in task:
                        roles.append(task[key]["name"])
                        if key.endswith("import_role"):
                            assert task[key]["rolespec_validate"] is False, task
    (preflight,) = yaml.safe_load((ROOT / "playbooks" / "preflight.yml").read_text())[:1]
    assert preflight["tasks"][0]["hvd.cluster.hvd_role_args"]["roles"] == roles


def test_hosts_named_by_the_task_are_checked_and_one_outside_the_inventory_is_named(tmp_path: Path) -> None:
    """The task's own `hosts` (where not the play's batch): the controller itself passes with the roles' defaults; a
    name the inventory lacks fails, named; an unknown role is refused."""
    from ansible_collections.hvd.cluster.tests.unit.plugins.support import run_play

    tasks = [{"hvd.cluster.hvd_role_args": {"roles": ["hvd.cluster.hvd_base", "hvd_openmpi"], "hosts": ["localhost"]}},
             {"hvd.cluster.hvd_role_args": {"roles": ["hvd_base"], "hosts": ["localhost", "nosuch"]},
              "ignore_errors": True},
             {"hvd.cluster.hvd_role_args": {"roles": ["hvd_nosuch"]}, "ignore_errors": True}]
    results, _ = run_play(tmp_path, tasks)
    assert not results[0].get("failed") and results[0]["roles"] == ["hvd.cluster.hvd_base", "hvd.cluster.hvd_openmpi"]
    assert results[0]["argument_errors"] == {} and results[0]["changed"] is False
    assert results[1]["failed"] and results[1]["argument_errors"] == {"nosuch": ["not a host of the inventory"]}
    assert results[2]["failed"] and "'hvd_nosuch' is not a role of this collection" in results[2]["msg"]
