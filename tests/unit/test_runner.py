"""ansible-runner, really run (against an inventory whose cluster group is empty: no node is contacted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hvdcluster import paths
from hvdcluster.runner import run_playbook


def test_limit_and_extra_vars_of_one_run_do_not_stick_to_the_next(tmp_path: Path) -> None:
    # ansible-runner keeps env/cmdline and env/extravars in its folder and reads them back when a later run
    # passes none: `up --limit node9` then `up` would still be limited, `up --verify` would verify forever.
    inv = tmp_path / "lab"
    inv.mkdir()
    (inv / "hosts.yml").write_text("all:\n  children:\n    hvd_nodes:\n      hosts: {}\n")
    first = run_playbook(inv, "verify.yml", limit="node9", extravars={"hvd_verify_allreduce": "always"})
    second = run_playbook(inv, "verify.yml")
    argv = json.loads((first.artifacts / "command").read_text())["command"]
    assert "--limit" in argv and "-e" in argv, argv
    argv = json.loads((second.artifacts / "command").read_text())["command"]
    assert "--limit" not in argv and "-e" not in argv, argv
    assert second.rc == 0, second.log.read_text()
    assert not any((inv / "runs" / "env" / name).exists() for name in ("cmdline", "extravars"))


def test_files_in_the_inventory_folder_that_are_no_inventory_are_not_parsed(tmp_path: Path) -> None:
    inv = tmp_path / "lab"
    (inv / "ssh").mkdir(parents=True)
    (inv / "hosts.yml").write_text("all:\n  children:\n    hvd_nodes:\n      hosts: {}\n")
    (inv / "ssh" / "id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n")
    (inv / "runs" / "artifacts" / "1").mkdir(parents=True)
    (inv / "runs" / "artifacts" / "1" / "stdout").write_text("TASK [x] ***\nok: [node1] => {changed: false}\n")
    result = run_playbook(inv, "verify.yml")
    log = result.log.read_text()
    assert result.rc == 0, log
    assert "OPENSSH" not in log and "b3BlbnNzaC1rZXkt" not in log and "inventory source" not in log, log
    # and the way operators run playbooks: the folder itself as the inventory, with the project's ansible.cfg
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(inv), "--list"],
                          env={**os.environ, "ANSIBLE_CONFIG": str(paths.ansible_home() / "ansible.cfg")},
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "OPENSSH" not in proc.stderr and "inventory source" not in proc.stderr, proc.stderr
