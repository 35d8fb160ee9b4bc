"""Credentials in URLs (a user and password, a token in the query) stay out of what hvdcluster prints and keeps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hvdcluster import cli, inventory, redact, spec
from hvdcluster.runner import scrub_artifacts

SECRET_URL = "https://builder:hunter2@mirror.example.org/openmpi/openmpi-4.1.6.tar.bz2?token=SECRET42&x=1"
SECRETS = ("hunter2", "SECRET42", "builder:")


def test_a_url_keeps_its_place_and_path_and_loses_its_user_and_query_values() -> None:
    assert redact.redact_url(SECRET_URL) == ("https://<redacted>@mirror.example.org/openmpi/openmpi-4.1.6.tar.bz2"
                                             "?token=<redacted>&x=<redacted>")
    assert redact.redact_text(f"get {SECRET_URL}: 401") == f"get {redact.redact_url(SECRET_URL)}: 401"
    plain = "https://mirror.example.org/openmpi-4.1.6.tar.bz2"
    assert redact.redact_text(f"from {plain}.") == f"from {plain}."  # nothing to hide: unchanged
    assert not redact.has_credentials(plain) and redact.has_credentials(SECRET_URL)
    assert redact.redact_data({"a": [SECRET_URL], "b": 1}) == {"a": [redact.redact_url(SECRET_URL)], "b": 1}


@pytest.fixture
def hosts(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.yaml"
    path.write_text("cluster: c1\nhosts: [10.0.0.1, 10.0.0.2]\nstack:\n  python: {packages: [torch==2.13.0]}\n"
                    f"  mpi: {{source: source, version: '4.1.6', url: '{SECRET_URL}', sha256: '{'a' * 64}'}}\n")
    return path


def test_plan_and_its_json_show_the_open_mpi_url_without_its_secrets(
        hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", str(hosts)]) == 0
    assert cli.main(["plan", str(hosts), "--json"]) == 0
    out = capsys.readouterr().out
    assert "mirror.example.org/openmpi/openmpi-4.1.6.tar.bz2" in out
    assert not any(secret in out for secret in SECRETS), out


def test_the_inventory_names_the_url_it_needs_and_holds_no_secret_of_it(hosts: Path, tmp_path: Path) -> None:
    """Every file the inventory folder holds is free of the secrets; Ansible itself gets the URL from the environment
    variable that `up` sets (and a hand-run playbook exports), and nothing else."""
    cluster = spec.load(hosts)
    from hvdcluster import compat

    plan = compat.resolve(cluster.stack, lines=cluster.stack_lines, path=cluster.path)
    root = inventory.render(cluster, tmp_path / "inv", plan)
    for path in root.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert not any(secret in text for secret in SECRETS), (path, text)
    assert redact.run_env(cluster) == {redact.OPENMPI_URL_ENV: SECRET_URL}
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), "all", "-i", str(root), "-c", "local", "-m",
         "ansible.builtin.debug", "-a", "msg={{ hvd_openmpi_url }}"],
        capture_output=True, text=True, env={"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin",
                                             "ANSIBLE_NOCOLOR": "1", redact.OPENMPI_URL_ENV: SECRET_URL},
        timeout=120)
    assert SECRET_URL in proc.stdout, proc.stdout + proc.stderr
    stack = yaml.safe_load((root / "group_vars" / "all" / "stack.yml").read_text().replace("!unsafe ", ""))
    assert stack["hvd_stack"]["mpi"]["url"] == redact.redact_url(SECRET_URL)


def test_a_runs_recorded_environment_keeps_no_url_secret(tmp_path: Path) -> None:
    (tmp_path / "command").write_text(json.dumps({"env": {redact.OPENMPI_URL_ENV: SECRET_URL, "HOME": "/root",
                                                          "PIP_INDEX_URL": "https://mirror.example.org/simple?t=SECRET42"}}))
    scrub_artifacts(tmp_path)
    text = (tmp_path / "command").read_text()
    assert not any(secret in text for secret in SECRETS) and "/root" in text
