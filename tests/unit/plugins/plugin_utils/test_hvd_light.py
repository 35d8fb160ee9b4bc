"""What a light run sends (plugins/plugin_utils/hvd_light.py): for every module whose action runs it light, the module
and exactly the collection's module_utils it imports, transitively, as Python's own parser finds them (the controller's
quick scan is held to it); nothing of Ansible's imported on the node but where hvd_module asks for it outside a light
run; and each such module hands its AnsibleModule nothing the controller's check of ARGUMENT_SPEC would not apply.

Under ansible-test units these run in the controller's context (this folder is neither modules/ nor module_utils/).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ansible_collections.hvd.cluster.plugins.plugin_utils import hvd_light
from ansible_collections.hvd.cluster.tests.unit.plugins.support import ROOT

PACKAGE = "ansible_collections.hvd.cluster.plugins"
LIGHT = sorted(path.stem for path in (ROOT / "plugins" / "action").glob("hvd_*.py")
               if "LightAction" in path.read_text() or "LightRunner" in path.read_text())


def _imports(name: str) -> list[tuple[str, int]]:
    """(imported module, line) for every import in the module ``name``, at any depth, by Python's parser."""
    tree = ast.parse((ROOT / "plugins" / Path(*name[len(PACKAGE) + 1:].split("."))).with_suffix(".py").read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == f"{PACKAGE}.module_utils":
                found += [(f"{node.module}.{alias.name}", node.lineno) for alias in node.names]
            else:
                found.append((node.module, node.lineno))
        elif isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
    return found


def _closure(module: str) -> set[str]:
    seen, todo = set(), [f"{PACKAGE}.modules.{module}", f"{PACKAGE}.module_utils.hvd_module"]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += [imported for imported, dummy in _imports(name) if imported.startswith(f"{PACKAGE}.module_utils.")]
    return seen


def test_the_hot_modules_run_light() -> None:
    assert {"hvd_node_state", "hvd_write", "hvd_dist_record", "hvd_resolve", "hvd_packages", "hvd_artifact",
            "hvd_run"} <= set(LIGHT), LIGHT


@pytest.mark.parametrize("module", LIGHT)
def test_the_payload_is_the_module_and_every_module_util_it_imports(module: str) -> None:
    assert set(hvd_light.sources(module)) == _closure(module)


@pytest.mark.parametrize("module", LIGHT)
def test_nothing_of_ansible_is_imported_on_the_node_but_by_hvd_modules_own_switch(module: str) -> None:
    for name in hvd_light.sources(module):
        for imported, line in _imports(name):
            if imported.split(".")[0] == "ansible":
                assert (name, imported) == (f"{PACKAGE}.module_utils.hvd_module", "ansible.module_utils.basic"), (
                    f"{name}:{line} imports {imported}: a light run has no Ansible on the node")


@pytest.mark.parametrize("module", LIGHT)
def test_the_module_gives_its_ansiblemodule_the_spec_the_controller_checks_and_nothing_more(module: str) -> None:
    tree = ast.parse((ROOT / "plugins" / "modules" / f"{module}.py").read_text())
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
             and getattr(node.func, "id", "") == "AnsibleModule"]
    assert len(calls) == 1, module
    keywords = {keyword.arg: keyword.value for keyword in calls[0].keywords}
    assert set(keywords) <= {"argument_spec", "supports_check_mode", None} and not calls[0].args, module
    if None in keywords:  # **ARGUMENT_CHECKS: what the controller's check takes beside the spec
        assert getattr(keywords[None], "id", "") == "ARGUMENT_CHECKS", module
    assert getattr(keywords["argument_spec"], "id", "") == "ARGUMENT_SPEC", module
    imported = [node for node in tree.body if isinstance(node, ast.ImportFrom)
                and any(alias.name == "AnsibleModule" for alias in node.names)]
    assert [node.module for node in imported] == [f"{PACKAGE}.module_utils.hvd_module"], module
