"""hvd_pyenv's check of the requested environment, run once for every node of the play (ansible-playbook over local
connections, two hosts): one task, not one a node, that names every node whose python3 is not the one asked for, and
passes where each is.

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

ROLE = ROOT / "roles" / "hvd_pyenv"
TASK = "Check the requested environment, and the offline bundle's files where it has some"


def check(tmp_path: Path, python: str) -> subprocess.CompletedProcess:
    """The role's check (its task from tasks/main.yml, with the role's defaults and vars) on node1 and node2, both
    this interpreter, after a gather; ``python``: hvd_pyenv_python."""
    [task] = [t for t in yaml.safe_load((ROLE / "tasks" / "main.yml").read_text()) if t.get("name") == TASK]
    book = tmp_path / "check.yml"
    book.write_text(json.dumps([{
        "hosts": "node1,node2", "gather_facts": False,
        "vars": {**yaml.safe_load((ROLE / "defaults" / "main.yml").read_text()), "hvd_pyenv_python": python},
        "vars_files": [str(ROLE / "vars" / "main.yml")],
        "tasks": [{"ansible.builtin.setup": {"gather_subset": ["min"]}}, task],
    }]))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"}  # a failure's message on one line
    return subprocess.run([ANSIBLE_PLAYBOOK, "-i", "node1,node2,", "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}", str(book)],
                          cwd=ROOT, env=env, capture_output=True, text=True)


def test_one_task_names_every_node_whose_python_is_not_the_one_asked_for(tmp_path: Path) -> None:
    found = ".".join(map(str, sys.version_info[:3]))
    proc = check(tmp_path, "3.9")
    assert proc.returncode != 0
    assert f"venv needs each node's python3 to be 3.9 (node1: {found}, node2: {found})" in proc.stdout, \
        proc.stdout[-4000:]
    assert proc.stdout.count('"msg": "hvd_pyenv: manager') == 1  # one task for both nodes


def test_the_check_passes_where_every_node_has_the_python_asked_for(tmp_path: Path) -> None:
    proc = check(tmp_path, ".".join(map(str, sys.version_info[:2])))
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "node1                      : ok=2" in proc.stdout and "node2                      : ok=1" in proc.stdout
