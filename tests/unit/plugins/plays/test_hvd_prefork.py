"""The hvd_prefork callback (plugins/callback/hvd_prefork.py), which the collection's ansible.cfg enables: before the
workers fork, ansible-playbook has imported the collection's action, filter and lookup plugins and the modules light
actions check arguments against (and only those modules), and has the compiled-template cache installed. A play gives
the same results with it as with it off, and its templates are in the cache folder afterwards.

Under ansible-test units these run in the controller's context (this folder is neither modules/ nor module_utils/).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ansible_collections.hvd.cluster.tests.unit.plugins.support import COLLECTIONS, ROOT
from ansible_collections.hvd.cluster.tests.unit.plugins.support import run_play as run

WARM = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from ansible_collections.hvd.cluster.plugins.callback import hvd_prefork
done = hvd_prefork.warm()
print(json.dumps({"done": done, "loaded": sorted(m for m in sys.modules if m.startswith("ansible_collections.hvd"))}))
"""


def test_warm_imports_the_controller_side_plugins_and_the_light_modules_only():
    proc = subprocess.run([sys.executable, "-c", WARM, str(COLLECTIONS)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout)
    done, loaded = set(found["done"]), set(found["loaded"])
    actions = {f"action.{p.stem}" for p in (ROOT / "plugins" / "action").glob("hvd_*.py")}
    filters = {f"filter.{p.stem}" for p in (ROOT / "plugins" / "filter").glob("hvd_*.py")}
    assert actions | filters | {"lookup.hvd_default", "plugin_utils.hvd_light"} <= done
    assert {"modules.hvd_write", "modules.hvd_node_state", "modules.hvd_run"} <= done
    # no light action, so never imported on the controller: hvd_tree (AnsiballZ only), hvd_role_args (its action is
    # the controller's own work)
    assert not {"modules.hvd_tree", "modules.hvd_role_args"} & done
    assert {f"ansible_collections.hvd.cluster.plugins.{name}" for name in done} <= loaded


TASKS = [
    {"ansible.builtin.set_fact": {
        "members": "{{ ['localhost'] | hvd.cluster.hvd_members(hostvars) | map(attribute='name') | list }}",
                                  "prefix": "{{ lookup('hvd.cluster.hvd_default', 'env_prefix') }}"}},
    {"hvd.cluster.hvd_write": {"files": [{"path": "@DIR@/one", "content": "{{ prefix }}\n", "mode": "0600"}]}},
    {"hvd.cluster.hvd_read": {"paths": ["@DIR@/one"]}},
]


def test_a_play_gives_the_same_results_with_the_callback_and_its_templates_are_cached(tmp_path):
    off_config = tmp_path / "ansible.cfg"  # the collection's, without the callback
    off_config.write_text("".join(line for line in (ROOT / "ansible.cfg").read_text().splitlines(keepends=True)
                                  if not line.startswith("callbacks_enabled")))
    outcomes = []
    for name, env in (("off", {"ANSIBLE_CONFIG": str(off_config), "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS)}),
                      ("first", {}), ("cached", {})):
        folder = tmp_path / name
        folder.mkdir()
        tasks = json.loads(json.dumps(TASKS).replace("@DIR@", str(folder)))
        results, out = run(folder, tasks, "-e", "ansible_pipelining=true",
                           env={"HVDCLUSTER_CACHE": str(tmp_path / "cache"), **env})
        outcomes.append((json.loads(json.dumps(results).replace(str(folder), "@DIR@")), out))
    (off, off_out), (first, first_out), (cached, cached_out) = outcomes
    assert off == first == cached
    assert off[0]["ansible_facts"]["members"] == ["localhost"]
    assert (tmp_path / "off" / "one").read_text() == "/opt/hvd/env\n"
    assert "hvd_prefork: compiled templates" not in off_out
    assert "hvd_prefork: compiled templates from" in first_out and "hvd_prefork" in cached_out
    entries = list((tmp_path / "cache" / "jinja").glob("*/*"))
    assert len(entries) >= 3, entries
    assert all(entry.stat().st_uid == os.geteuid() and not entry.stat().st_mode & 0o077 for entry in entries)
    assert Path(tmp_path / "cached" / "one").read_text() == "/opt/hvd/env\n"
