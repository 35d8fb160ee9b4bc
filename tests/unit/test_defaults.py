"""The shared defaults (env prefix, artifact folder, controller cache) have one home,
plugins/module_utils/hvd_defaults.py: the roles read them through the hvd.cluster.hvd_default lookup (run here by
Ansible itself), the command imports them, and no role, playbook or command module writes them again."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hvdcluster import jobs, launch, paths
from hvdcluster.compat import resolver

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_defaults

ROOT = Path(__file__).resolve().parents[2]


def ask_ansible(*terms: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    quoted = ", ".join(f"'{term}'" for term in terms)
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), "localhost", "-m", "ansible.builtin.debug",
         "-a", json.dumps({"msg": f"{{{{ query('hvd.cluster.hvd_default', {quoted}) | to_json }}}}"})],
        cwd=ROOT, capture_output=True, text=True, check=False,
        env={**env, "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json"})


@pytest.mark.parametrize("cache", [None, "/srv/hvd-cache"])
def test_the_lookup_and_the_command_name_the_same_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          cache: str | None) -> None:
    """Ansible (the lookup) and the command (paths) in the same environment: HOME here, HVDCLUSTER_CACHE set or not."""
    monkeypatch.setenv("HOME", str(tmp_path))
    if cache:
        monkeypatch.setenv("HVDCLUSTER_CACHE", cache)
    else:
        monkeypatch.delenv("HVDCLUSTER_CACHE", raising=False)
    proc = ask_ansible("env_prefix", "artifact_dir", "controller_cache", "run_dir", env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = json.loads(json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]["msg"])
    assert said == [launch.DEFAULT_PREFIX, hvd_defaults.ARTIFACT_DIR, str(paths.controller_cache()), jobs.DIR]
    assert said[2] == (cache or str(tmp_path / ".cache" / "hvdcluster"))
    assert resolver.DEFAULT_PREFIX == said[0] == "/opt/hvd/env"


def test_an_unknown_default_fails_naming_the_known_ones() -> None:
    proc = ask_ansible("env_prefx", env=dict(os.environ))
    assert proc.returncode != 0
    assert "unknown default 'env_prefx' (known: env_prefix, artifact_dir, run_dir, nvidia_pci_vendor, controller_cache)" in proc.stdout + proc.stderr


def test_no_role_or_playbook_writes_a_shared_default_again() -> None:
    """Comments, descriptions and READMEs may name the values; no task, default, var, spec default or play does."""
    literals = ("/opt/hvd/env", ".cache/hvdcluster", "HVDCLUSTER_CACHE", "/run/hvdcluster")
    found = []
    for path in [*ROOT.glob("roles/*/defaults/*.yml"), *ROOT.glob("roles/*/vars/*.yml"),
                 *ROOT.glob("roles/*/meta/argument_specs.yml"),
                 *ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("playbooks/*.yml")]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if path.name == "argument_specs.yml" and not code.strip().startswith("default:"):
                continue  # the specs' descriptions are documentation
            found += [f"{path.relative_to(ROOT)}:{number}: {literal}" for literal in literals if literal in code]
    assert found == []


def test_the_command_writes_the_env_prefix_in_no_module_but_the_shared_one() -> None:
    """Messages may show the prefix as an example ("e.g. /opt/hvd/env"); no value is the bare literal."""
    bare = [f"{path.relative_to(ROOT)}" for path in ROOT.glob("src/hvdcluster/**/*.py")
            if re.search(r"""(['"])/opt/hvd/env\1""", path.read_text())]
    assert bare == []
