"""hvdcluster's per-run YAML reads (src/hvdcluster/yamlread.py): libyaml's parser where PyYAML has it, the same data
as PyYAML's pure-Python safe loader for every file the runs read that way."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
import yaml

from hvdcluster import yamlread

ROOT = Path(__file__).resolve().parents[2]
READ_PER_RUN = sorted([*ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("roles/*/defaults/main.yml"),
                       *ROOT.glob("playbooks/*.yml")])


def test_the_c_parser_is_used_where_pyyaml_has_it() -> None:
    assert yamlread.Loader is (yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader)


@pytest.mark.parametrize("path", READ_PER_RUN, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_file_read_per_run_gives_the_pure_python_loaders_data(path: Path) -> None:
    text = path.read_text()
    assert yamlread.safe_load(text) == yaml.safe_load(text)


def test_the_version_matrix_gives_the_same_data() -> None:
    text = resources.files("hvdcluster.data").joinpath("compat.yaml").read_text(encoding="utf-8")
    assert yamlread.safe_load(text) == yaml.safe_load(text)


def test_it_constructs_only_plain_data() -> None:
    """The safe constructors either way: a Python object tag is refused."""
    with pytest.raises(yaml.constructor.ConstructorError):
        yamlread.safe_load("!!python/object/apply:os.system ['true']")
