"""The byte cache of compiled templates (plugins/plugin_utils/hvd_jinja_cache.py): a template renders the same with it
as without it, from a fresh process that only reads it; settings that change the generated code (delimiters, Ansible's
escape-backslashes switch) never share an entry; a folder or an entry another user could have written is never used,
and a corrupt entry is compiled again. Each case runs in a process of its own (the cache wraps Jinja's compile for the
whole process, as it does in ansible-playbook)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.hvd.cluster.tests.unit.plugins.support import COLLECTIONS

# Renders templates through Ansible's engine and plain Jinja; prints the results, the folder used and the counts.
RENDER = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from ansible_collections.hvd.cluster.plugins.plugin_utils import hvd_jinja_cache as cache
folder = cache.install(sys.argv[2])
import jinja2
from ansible._internal._templating._engine import TemplateEngine, TemplateOptions
from ansible._internal._datatag._tags import TrustedAsTemplate
engine = TemplateEngine(variables={"a": 41, "names": ["x", "y"]})
def ansible(text, **options):
    return engine.template(TrustedAsTemplate().tag(text), options=TemplateOptions(**options))
out = {
    "sum": ansible("{{ a + 1 }}"),
    "join": ansible("{{ names | join(',') }}-{{ a }}"),
    "escaped": ansible("{{ 'a\\nb' }}"),
    "unescaped": ansible("{{ 'a\\nb' }}", escape_backslashes=False),
    "curly": jinja2.Environment().from_string("[[ 1 ]]{{ 2 }}").render(),
    "square": jinja2.Environment(variable_start_string="[[", variable_end_string="]]").from_string(
        "[[ 1 ]]{{ 2 }}").render(),
}
print(json.dumps({"out": out, "folder": str(folder) if folder else None, "stats": cache.stats()}))
"""


def render(cache_root: Path, **env: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", RENDER, str(COLLECTIONS), str(cache_root)], capture_output=True,
                          text=True, env={**os.environ, **env}, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_a_template_renders_the_same_from_the_cache_as_compiled(tmp_path):
    plain = render(tmp_path / "off", HVDCLUSTER_JINJA_CACHE="off")
    assert plain["folder"] is None and plain["stats"]["misses"] == 0
    first = render(tmp_path / "cache")
    second = render(tmp_path / "cache")
    assert first["out"] == second["out"] == plain["out"]
    assert first["out"]["sum"] == 42 and first["out"]["join"] == "x,y-41"
    assert first["out"]["curly"] == "[[ 1 ]]2" and first["out"]["square"] == "1{{ 2 }}"
    assert first["out"]["escaped"] != first["out"]["unescaped"]  # the switch changes the code: two entries
    assert first["stats"]["misses"] >= 6 and first["stats"]["written"] == first["stats"]["misses"]
    assert second["stats"]["misses"] == 0 and second["stats"]["hits"] == first["stats"]["misses"]
    folder = Path(first["folder"])
    assert folder.is_relative_to(tmp_path / "cache" / "jinja")
    assert oct(folder.stat().st_mode & 0o777) == "0o700"
    assert all(oct(entry.stat().st_mode & 0o777) == "0o600" for entry in folder.iterdir())


def test_an_entry_others_could_write_is_never_run_and_a_corrupt_one_is_compiled_again(tmp_path):
    first = render(tmp_path)
    folder = Path(first["folder"])
    planted = compile("environment = None\ndef root(context, missing=None, environment=None):\n"
                      "    yield 'PLANTED'\nblocks = {}\ndebug_info = ''\n", "<planted>", "exec")
    import marshal

    entries = sorted(folder.iterdir())
    for entry in entries:
        entry.write_bytes(marshal.dumps(planted))
        entry.chmod(0o666)
    after = render(tmp_path)
    assert after["out"] == first["out"]  # nothing planted ran
    assert after["stats"]["hits"] == 0
    for entry in entries:
        entry.write_bytes(b"\x00not marshal")
        entry.chmod(0o600)
    again = render(tmp_path)
    assert again["out"] == first["out"] and again["stats"]["hits"] == 0 and again["stats"]["written"] > 0


def test_a_folder_others_could_write_turns_the_cache_off(tmp_path):
    first = render(tmp_path)
    folder = Path(first["folder"])
    folder.chmod(0o777)
    try:
        shared = render(tmp_path)
    finally:
        folder.chmod(0o700)
    assert shared["folder"] is None and shared["stats"]["hits"] == 0 and shared["out"] == first["out"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give an entry to another user")
def test_an_entry_of_another_user_is_never_run(tmp_path):
    first = render(tmp_path)
    for entry in Path(first["folder"]).iterdir():
        os.chown(entry, 65534, 65534)
    assert render(tmp_path)["stats"]["hits"] == 0
