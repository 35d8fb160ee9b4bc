"""hvd_openmpi's check of the request, run once for every node of the play (ansible-playbook over local connections,
two hosts): one task, not one a node, that refuses a known-bad version a node's own variables ask for, and passes
the role's defaults.

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

ROLE = ROOT / "roles" / "hvd_openmpi"
TASK = "Check the requested implementation and source, and refuse known-bad Open MPI versions"


def check(tmp_path: Path, inventory: str) -> subprocess.CompletedProcess:
    """The role's check (its task from tasks/main.yml, with the role's defaults and vars) on the hosts of
    ``inventory`` (an INI inventory, host variables on each line)."""
    [task] = [t for t in yaml.safe_load((ROLE / "tasks" / "main.yml").read_text()) if t.get("name") == TASK]
    (tmp_path / "hosts").write_text(inventory)
    book = tmp_path / "check.yml"
    book.write_text(json.dumps([{"hosts": "all", "gather_facts": False,
                                 "vars": yaml.safe_load((ROLE / "defaults" / "main.yml").read_text()),
                                 "vars_files": [str(ROLE / "vars" / "main.yml")], "tasks": [task]}]))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"}  # a failure's message on one line
    return subprocess.run([ANSIBLE_PLAYBOOK, "-i", str(tmp_path / "hosts"), "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}", str(book)],
                          cwd=ROOT, env=env, capture_output=True, text=True)


def test_a_refused_version_one_nodes_own_variables_ask_for_is_named(tmp_path: Path) -> None:
    proc = check(tmp_path, "node1\nnode2 hvd_openmpi_version=3.1.3\n")
    assert proc.returncode != 0
    assert "Open MPI 3.1.3 is refused: Open MPI 3.1.3 hangs in collectives" in proc.stdout, proc.stdout[-4000:]
    assert proc.stdout.count('"msg": "Open MPI 3.1.3 is refused') == 1  # one task for both nodes


def test_the_roles_defaults_pass(tmp_path: Path) -> None:
    proc = check(tmp_path, "node1\nnode2\n")
    assert proc.returncode == 0, proc.stdout[-4000:]
