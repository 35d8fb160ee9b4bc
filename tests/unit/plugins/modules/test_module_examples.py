"""Every module's documentation (plugins/modules/hvd_*.py), as ansible-doc shows it to operators: the project's own
rule for its EXAMPLES.
"""

from __future__ import annotations

import ast

import pytest

from ansible_collections.hvd.cluster.tests.unit.plugins.support import ROOT


# ------------------------------------------------------------------------------------------ documentation (ansible-doc)


MODULES = sorted(path.stem for path in (ROOT / "plugins" / "modules").glob("hvd_*.py"))


@pytest.mark.parametrize("name", MODULES)
def test_every_modules_examples_call_it_by_its_fqcn(name: str) -> None:
    """The project's own rule for the docs (ansible-doc shows them to operators): EXAMPLES call the module as
    hvd.cluster.<name>, never by its short name. The rest of the docs (they parse, come before the imports, match the
    argument_spec, describe every option and return value) is validate-modules' work, in
    tests/test_static.py::test_ansible_test_sanity_passes_on_the_built_collection."""
    import yaml

    tree = ast.parse((ROOT / "plugins" / "modules" / f"{name}.py").read_text())
    [tasks] = [yaml.safe_load(node.value.value) for node in tree.body if isinstance(node, ast.Assign)
               and getattr(node.targets[0], "id", "") == "EXAMPLES"]
    assert tasks and any(f"hvd.cluster.{name}" in task for task in tasks)
    assert not any(key in MODULES for task in tasks for key in task)  # never the short name
