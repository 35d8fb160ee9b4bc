"""The light run of the collection's own modules (plugins/plugin_utils/hvd_light.py) in real ansible-playbook runs: the
same tasks run light and, with ``hvd_light_modules: false``, as Ansible runs the module (its AnsiballZ payload), and the
results are the same: files written, a block and a line kept, check and diff mode, a module's own failure, a result
naming a path (Ansible's path info), a command the module runs, a task's environment and a ``$VAR`` path expanded on
the node, a become. Arguments the controller's check refuses run the module, whose message is Ansible's own. At -vvv
the log names each light run and why a task was not one.

Under ansible-test units these run in the controller's context (this folder is neither modules/ nor module_utils/).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ansible_collections.hvd.cluster.tests.unit.plugins.support import run_play as run

MODULE_RUN = "/plugins/modules/%s.py"  # Ansible's own -vvv line where it runs the module itself
# Keys Ansible's own module run adds that a light run has no part in: none today; kept explicit so a new one shows.
ANSIBLE_ONLY: set[str] = set()


def _both(tmp_path: Path, tasks: list, *extra: str) -> tuple[list, list, str, str]:
    """``tasks`` run light, then (in a fresh folder of the same shape) as Ansible runs the modules."""
    light_dir, module_dir = tmp_path / "light", tmp_path / "module"
    outcome = []
    for folder, light in ((light_dir, True), (module_dir, False)):
        folder.mkdir()
        shaped = json.loads(json.dumps(tasks).replace("@DIR@", str(folder)))
        if not light:
            shaped = [{**task, "vars": {**task.get("vars", {}), "hvd_light_modules": False}} for task in shaped]
        # pipelining, as hvdcluster's ansible.cfg turns it on for SSH (the local connection reads it from here)
        outcome.append(run(folder, shaped, "-e", "ansible_pipelining=true", *extra))
    (light_results, light_out), (module_results, module_out) = outcome
    return ([_same_shape(r, light_dir) for r in light_results], [_same_shape(r, module_dir) for r in module_results],
            light_out, module_out)


def _same_shape(result: dict, folder: Path) -> dict:
    text = json.dumps({k: v for k, v in result.items() if k not in ANSIBLE_ONLY}).replace(str(folder), "@DIR@")
    return json.loads(text)


WRITES = [
    {"hvd.cluster.hvd_write": {"files": [
        {"path": "@DIR@/whole", "content": "one\ntwo\n", "mode": "0640"},
        {"path": "@DIR@/hosts", "state": "block", "marker": "# {mark} hvd test", "block": "10.0.0.1 a\n"},
        {"path": "@DIR@/conf", "state": "line", "regexp": "^key=", "line": "key=1"},
        {"path": "@DIR@/sub/dir", "state": "directory", "mode": "0700"}]}},
    {"hvd.cluster.hvd_write": {"files": [{"path": "@DIR@/whole", "content": "one\ntwo\n", "mode": "0640"}]}},
    {"hvd.cluster.hvd_write": {"files": [{"path": "@DIR@/whole", "content": "three\n"}]}, "check_mode": True,
     "diff": True},
    {"hvd.cluster.hvd_write": {"files": [{"path": "@DIR@/nothing", "state": "file"}]}, "ignore_errors": True},
    {"hvd.cluster.hvd_workdir": {"root": "@DIR@/work", "name": "job"}},
    {"hvd.cluster.hvd_read": {"paths": ["@DIR@/whole", "@DIR@/missing"]}},
]


def test_a_light_run_gives_what_the_module_run_gives_and_sends_no_ansiballz(tmp_path: Path) -> None:
    light, module, light_out, module_out = _both(tmp_path, WRITES)
    assert light == module
    written, again, checked, failed, work, read = light
    assert written["changed"] and written["updated"] == [f"@DIR@/{n}" for n in ("whole", "hosts", "conf", "sub/dir")]
    assert again["changed"] is False and checked["changed"] and checked["diff"][0]["after"] == "three\n", checked
    assert failed["failed"] and "state file needs content" in failed["msg"], failed
    assert work["state"] == "directory" and work["mode"] == "0700" and "uid" in work, work  # Ansible's path info
    assert read["content"]["@DIR@/whole"] == "one\ntwo\n", read
    assert (tmp_path / "light" / "whole").read_text() == "one\ntwo\n"  # check mode wrote nothing
    assert oct((tmp_path / "light" / "whole").stat().st_mode & 0o777) == "0o640"
    assert light_out.count("hvd_light: hvd_write run light") == 4 and MODULE_RUN % "hvd_write" not in light_out
    assert MODULE_RUN % "hvd_write" in module_out and "hvd_light_modules is off" in module_out


def test_the_task_environment_and_a_var_in_a_path_are_the_nodes_and_a_command_runs_as_the_module_runs_it(
        tmp_path: Path) -> None:
    tasks = [
        {"hvd.cluster.hvd_write": {"files": [{"path": "$HVD_LIGHT_DIR/by-env", "content": "x\n"}]},
         "environment": {"HVD_LIGHT_DIR": "@DIR@"}},
        {"hvd.cluster.hvd_dist_record": {"prefix": "@DIR@/env", "read": ["@DIR@/by-env"],
                                         "run": [sys.executable, "-I", "-c",
                                                 "import os; print(os.environ['HVD_LIGHT_X'])"]},
         "environment": {"HVD_LIGHT_X": "from the task"}},
        {"hvd.cluster.hvd_dist_record": {"prefix": "@DIR@/env", "run": ["sh", "-c", "echo no >&2; exit 5"]},
         "ignore_errors": True},
    ]
    light, module, light_out, dummy = _both(tmp_path, tasks)
    assert light == module
    assert os.environ.get("HVD_LIGHT_DIR") is None and (tmp_path / "light" / "by-env").read_text() == "x\n"
    ran, failed = light[1], light[2]
    assert ran["stdout"] == "from the task\n" and ran["rc"] == 0 and ran["content"]["@DIR@/by-env"] == "x\n", ran
    assert failed["failed"] and failed["rc"] == 5 and "exited 5: no" in failed["msg"], failed
    assert light_out.count("run light") == 3


def test_arguments_the_check_refuses_get_the_modules_own_message_and_a_become_that_cannot_pipe_runs_the_module(
        tmp_path: Path) -> None:
    """su cannot take a pipelined command, so the module runs as Ansible runs it there; sudo can (a light run under
    the container suites' sudo user)."""
    tasks = [{"hvd.cluster.hvd_write": {"files": [{"path": "@DIR@/a", "content": "a", "colour": "red"}]},
              "ignore_errors": True},
             {"hvd.cluster.hvd_write": {"files": [{"path": "@DIR@/b", "content": "b\n"}]}, "become": True,
              "become_method": "su"}]
    light, module, light_out, dummy = _both(tmp_path, tasks)
    assert light == module
    refused, became = light
    assert refused["failed"] and "colour" in refused["msg"], refused
    assert became["changed"] and (tmp_path / "light" / "b").read_text() == "b\n", became
    assert light_out.count(MODULE_RUN % "hvd_write") == 2  # the refused arguments (the module's own message), su
    assert "hvd_light: hvd_write run as a module: pipelining is off" in light_out


def test_a_hosts_first_module_run_discovers_its_python_and_the_next_runs_light_with_it(tmp_path: Path) -> None:
    tasks = [{"hvd.cluster.hvd_read": {"paths": [str(tmp_path / "book.yml")]}},
             {"hvd.cluster.hvd_read": {"paths": [str(tmp_path / "book.yml")]}}]
    # discovery looks along PATH for python3.13 first, then older ones: a folder whose python3.13 is this Python comes
    # first, so neither a newer Python nor a shim elsewhere on PATH (pyenv's) is the one found; the rest of PATH stays
    # (under ansible-test units, its ansible-playbook is found through it)
    first = tmp_path / "bin"
    first.mkdir()
    (first / "python3.13").symlink_to(sys.executable)
    path = os.pathsep.join([str(first), os.environ.get("PATH", "/usr/bin:/bin")])
    results, out = run(tmp_path, tasks, "-e", "ansible_pipelining=true", discover=True, env={"PATH": path})
    discovered = results[0].pop("ansible_facts")  # what the module run found, kept for the host's next runs
    assert list(discovered) == ["discovered_interpreter_python"], discovered
    assert Path(discovered["discovered_interpreter_python"]).name.startswith("python3"), discovered
    assert results[0] == results[1] and '"hosts": "localhost"' in results[1]["content"][str(tmp_path / "book.yml")]
    assert "hvd_read run as a module: its run discovers the host's Python" in out
    assert out.count(MODULE_RUN % "hvd_read") == 1 and out.count("hvd_light: hvd_read run light") == 1
