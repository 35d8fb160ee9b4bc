"""hvd_bundle, run as Ansible runs it: the controller's Python without PyYAML.
"""

from __future__ import annotations

import os
from pathlib import Path

from ansible_collections.hvd.cluster.tests.unit.plugins.support import run_module


def test_bundle_module_without_pyyaml_fails_naming_the_library(tmp_path: Path) -> None:
    """The controller's Python without PyYAML: the module loads (the import sanity test) and fails naming it."""
    (tmp_path / "yaml").mkdir()
    (tmp_path / "yaml" / "__init__.py").write_text("raise ImportError('No module named yaml (this test)')\n")
    # the stand-in first, then what this Python was given (under ansible-test units: Ansible's module_utils)
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    result = run_module("hvd_bundle", {"path": str(tmp_path), "cache_dir": str(tmp_path / "cache")},
                        env={**os.environ, "PYTHONPATH": path})
    assert result["failed"] and "Failed to import the required Python library (PyYAML)" in result["msg"]
