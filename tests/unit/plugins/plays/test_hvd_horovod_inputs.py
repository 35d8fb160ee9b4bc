"""hvd_horovod's check of the requested build, run once for every node of the play (ansible-playbook over local
connections, two hosts): one task, not one a node, that names every node whose read found no Python environment, and
passes where each has one; check mode passes without one (nothing was installed).

Under ansible-test units these run in the controller's context (see test_hvd_pyenv_offer.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from ansible_collections.hvd.cluster.tests.unit.plugins.support import ANSIBLE_PLAYBOOK, ROOT

ROLE = ROOT / "roles" / "hvd_horovod"
TASK = "Check the requested build, and that the environment exists (hvd_pyenv makes it)"


def check(tmp_path: Path, without_env: list[str], *options: str) -> subprocess.CompletedProcess:
    """The role's check (its task from tasks/main.yml, with the role's defaults and vars) on node1 and node2, after
    a stand-in for the role's read: the env's key file found on every node but those of ``without_env``."""
    [task] = [t for t in yaml.safe_load((ROLE / "tasks" / "main.yml").read_text()) if t.get("name") == TASK]
    defaults = {**yaml.safe_load((ROLE / "defaults" / "main.yml").read_text()), "hvd_horovod_env_prefix": "/opt/hvd/env"}
    key_file = "/opt/hvd/env/.hvd-env-key"  # (a dict's keys are not templated)
    read = {"ansible.builtin.set_fact": {"__hvd_horovod_read": {"content": {
        key_file: f"{{{{ none if inventory_hostname in {without_env!r} else 'abc123' }}}}"}}}}
    book = tmp_path / "check.yml"
    book.write_text(json.dumps([{
        "hosts": "node1,node2", "gather_facts": False,
        "vars": defaults,
        "vars_files": [str(ROLE / "vars" / "main.yml")],
        "tasks": [read, task],
    }]))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"}  # a failure's message on one line
    return subprocess.run([ANSIBLE_PLAYBOOK, "-i", "node1,node2,", "-c", "local", *options,
                           "-e", f"ansible_python_interpreter={sys.executable}", str(book)],
                          cwd=ROOT, env=env, capture_output=True, text=True)


def test_one_task_names_every_node_without_an_environment(tmp_path: Path) -> None:
    proc = check(tmp_path, ["node2"])
    assert proc.returncode != 0
    assert "no Python environment at /opt/hvd/env on node2: converge hvd_pyenv first" in proc.stdout, \
        proc.stdout[-4000:]
    assert proc.stdout.count('"msg": "no Python environment') == 1  # one task for both nodes


def test_the_check_passes_where_every_node_has_its_environment_and_in_check_mode(tmp_path: Path) -> None:
    assert check(tmp_path, []).returncode == 0
    assert check(tmp_path, ["node1", "node2"], "--check").returncode == 0
