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


def test_an_operator_environment_that_turns_host_key_checking_off_is_refused() -> None:
    import pytest

    from hvdcluster.errors import HvdError
    from hvdcluster.runner import check_environment, run_environment

    for name in ("ANSIBLE_SSH_ARGS", "ANSIBLE_SSH_EXTRA_ARGS"):
        for value in ("-o StrictHostKeyChecking=no", "-o UserKnownHostsFile=/dev/null", "-oStrictHostKeyChecking no"):
            with pytest.raises(HvdError, match=name) as caught:
                check_environment({name: value})
            assert caught.value.exit_code == 2
    check_environment({"ANSIBLE_SSH_ARGS": "-C -o ControlMaster=auto -o ControlPersist=60s"})
    env = run_environment({"ANSIBLE_HOST_KEY_CHECKING": "False", "ANSIBLE_PARAMIKO_HOST_KEY_AUTO_ADD": "True"})
    assert env["ANSIBLE_HOST_KEY_CHECKING"] == "True" and env["ANSIBLE_PARAMIKO_HOST_KEY_AUTO_ADD"] == "False"


def test_run_ids_are_unique_and_secrets_in_the_recorded_environment_are_redacted(tmp_path: Path, monkeypatch) -> None:
    from hvdcluster.runner import run_id

    assert len({run_id("site.yml") for _ in range(200)}) == 200
    inv = tmp_path / "lab"
    inv.mkdir()
    (inv / "hosts.yml").write_text("all:\n  children:\n    hvd_nodes:\n      hosts: {}\n")
    monkeypatch.setenv("HTTPS_PROXY", "http://alice:s3cret@proxy.example:3128")
    monkeypatch.setenv("PIP_INDEX_URL", "https://bob:t0ken@mirror.example/simple")
    monkeypatch.setenv("HVD_HARMLESS", "plain")
    monkeypatch.setenv("ANSIBLE_HOST_KEY_CHECKING", "False")
    result = run_playbook(inv, "verify.yml")
    assert result.rc == 0, result.log.read_text()
    recorded = (result.artifacts / "command").read_text()
    assert "s3cret" not in recorded and "t0ken" not in recorded
    env = json.loads(recorded)["env"]
    assert env["HVD_HARMLESS"] == "plain" and env["ANSIBLE_HOST_KEY_CHECKING"] == "True"


def test_a_run_finds_the_collection_this_command_ships_first_and_names_another_installed_copy(
        tmp_path: Path, capsys) -> None:
    """The operator's own hvd.cluster (here 0.0.9, as ansible-galaxy installs it: MANIFEST.json) stays on the path
    for their other collections but comes after ours, and the command says once which copy runs."""
    from hvdcluster import runner

    other = tmp_path / "mine" / "ansible_collections" / "hvd" / "cluster"
    other.mkdir(parents=True)
    (other / "MANIFEST.json").write_text(json.dumps({"collection_info": {"namespace": "hvd", "name": "cluster",
                                                                         "version": "0.0.9"}}))
    theirs = f"{tmp_path / 'mine'}:{tmp_path / 'absent'}"
    runner._announce_other_collections.cache_clear()
    env = runner.run_environment({"ANSIBLE_COLLECTIONS_PATH": theirs})
    search = env["ANSIBLE_COLLECTIONS_PATH"].split(os.pathsep)
    assert search == [str(paths.collections_dir()), str(tmp_path / "mine"), str(tmp_path / "absent")]
    assert (paths.collections_dir() / "ansible_collections" / "hvd" / "cluster").resolve() == paths.ansible_home()
    ours = paths.collection_version(paths.ansible_home())
    err = capsys.readouterr().err
    assert f"runs hvd.cluster {ours} from {paths.ansible_home()}" in err and f"0.0.9 at {other}" in err
    runner.run_environment({"ANSIBLE_COLLECTIONS_PATH": theirs})
    assert "another copy" not in capsys.readouterr().err  # said once per command
    runner._announce_other_collections.cache_clear()
    runner.run_environment({"ANSIBLE_COLLECTIONS_PATH": str(tmp_path / "absent")})
    assert "another copy" not in capsys.readouterr().err
