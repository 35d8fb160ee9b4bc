"""hvd_env_prune: what was added to an installed env taken out, where that is all that differs, on a fake root's env
(real files in tmp_path, modules/node_tree.py) read back with hvd_node_state's own reader.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ansible_collections.hvd.cluster.tests.unit.plugins.modules.node_tree import PREFIX, SITE, look
# a fixture: the tests below ask for it by name
from ansible_collections.hvd.cluster.tests.unit.plugins.modules.node_tree import node  # noqa: F401
from ansible_collections.hvd.cluster.tests.unit.plugins.modules.test_hvd_node_state_env import ADDITIONS
from ansible_collections.hvd.cluster.tests.unit.plugins.support import run_module, write

from ansible_collections.hvd.cluster.plugins.modules import hvd_env_prune


def env_of(node: Path) -> Path:
    return node / PREFIX.lstrip("/")


def snapshot(prefix: Path) -> dict[str, tuple[int, int, int]]:
    """Every path below the env with its inode, and each file's size and modification time (a folder's own time moves
    with what is added to it and taken out): what a prune must leave as it was."""
    out = {}
    for folder, dirs, files in os.walk(prefix):
        for entry in dirs:
            out[os.path.relpath(os.path.join(folder, entry), prefix)] = (os.lstat(os.path.join(folder, entry)).st_ino,
                                                                          0, 0)
        for entry in files:
            info = os.lstat(os.path.join(folder, entry))
            out[os.path.relpath(os.path.join(folder, entry), prefix)] = (info.st_ino, info.st_size, info.st_mtime_ns)
    return out


@pytest.mark.parametrize("kind", list(ADDITIONS))
def test_an_addition_alone_is_taken_out_and_nothing_installed_is_touched(node: Path, kind: str) -> None:
    rel, text = ADDITIONS[kind]
    before = snapshot(env_of(node))
    added = write(node, os.path.normpath(os.path.join(SITE, rel)), text)
    assert look(node)["env.files"] != "ok"
    result = hvd_env_prune.prune(str(env_of(node)))
    name = os.path.relpath(added, env_of(node)) if rel.startswith("..") else rel
    assert result == {"pruned": [name], "files": "ok"}
    assert not added.exists() and look(node)["env.files"] == "ok"
    # the folders an addition brought are gone with it; everything installed is the same inode, size and time
    assert snapshot(env_of(node)) == before


def test_an_added_distribution_goes_whole_and_the_reader_no_longer_lists_it(node: Path) -> None:
    site = node / SITE.lstrip("/")
    write(node, SITE + "/extra_pkg/__init__.py", "import os\n")
    write(node, SITE + "/extra_pkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: extra-pkg\nVersion: 1.0\n")
    assert "env.dist.extra-pkg" in look(node)
    result = hvd_env_prune.prune(str(env_of(node)))
    assert result["pruned"] == ["extra_pkg-1.0.dist-info/METADATA", "extra_pkg/__init__.py"], result
    assert not (site / "extra_pkg").exists() and not (site / "extra_pkg-1.0.dist-info").exists()
    state = look(node)
    assert "env.dist.extra-pkg" not in state and state["env.files"] == "ok"


def test_an_addition_beside_a_changed_file_is_left_for_the_whole_env_to_be_installed_again(node: Path) -> None:
    added = write(node, SITE + "/zz-hook.pth", "import os\n")
    (node / SITE.lstrip("/") / "cloudpickle/__init__.py").write_text("version = '3.0.1'  # edited\n")
    result = hvd_env_prune.prune(str(env_of(node)))
    assert result == {"pruned": [], "files": "changed: cloudpickle/__init__.py; added: zz-hook.pth"}
    assert added.exists()


def test_an_env_without_its_manifest_is_never_pruned(node: Path) -> None:
    """With no manifest nothing says what belongs in the env: nothing is an addition, nothing is removed."""
    (env_of(node) / ".hvd-manifest").unlink()
    added = write(node, SITE + "/zz-hook.pth", "import os\n")
    assert hvd_env_prune.prune(str(env_of(node))) == {"pruned": [], "files": "missing: .hvd-manifest"}
    assert added.exists()


def test_an_added_link_is_removed_itself_never_what_it_points_at(node: Path, tmp_path: Path) -> None:
    outside = tmp_path / "precious"
    outside.write_text("keep me\n")
    folder = tmp_path / "a-folder"
    (folder / "inside").mkdir(parents=True)
    os.symlink(outside, node / SITE.lstrip("/") / "evil.py")
    os.symlink(folder, node / SITE.lstrip("/") / "evil_pkg")  # a linked folder: one link, never entered
    result = hvd_env_prune.prune(str(env_of(node)))
    assert result == {"pruned": ["evil.py", "evil_pkg"], "files": "ok"}
    assert outside.read_text() == "keep me\n" and (folder / "inside").is_dir()


def test_an_addition_inside_an_installed_folder_leaves_the_folder(node: Path) -> None:
    added = write(node, SITE + "/filelock/extra.py", "x = 1\n")
    assert hvd_env_prune.prune(str(env_of(node)))["pruned"] == ["filelock/extra.py"]
    assert not added.exists() and (node / SITE.lstrip("/") / "filelock/_api.py").exists()


def test_as_ansible_runs_it_check_mode_names_and_removes_nothing_then_a_run_removes(node: Path) -> None:
    added = write(node, SITE + "/sitecustomize.py", "print(1)\n")
    args = {"prefix": str(env_of(node))}
    checked = run_module("hvd_env_prune", args, check=True)
    assert checked["changed"] is True and checked["pruned"] == ["sitecustomize.py"] and added.exists()
    done = run_module("hvd_env_prune", args)
    assert done["changed"] is True and done["files"] == "ok" and not added.exists()
    again = run_module("hvd_env_prune", args)
    assert again["changed"] is False and again["pruned"] == [] and again["files"] == "ok"


def test_a_folder_swapped_for_a_link_after_the_read_never_leads_the_removal_outside(node: Path, tmp_path: Path) -> None:
    """Between the read and the removal someone who can write in the env swaps the added file's folder for a link to
    another folder holding a file of the same name: the removal walks down without following links and removes
    nothing there."""
    site = node / SITE.lstrip("/")
    write(node, SITE + "/evil_pkg/x.py", "import os\n")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "x.py").write_text("keep me\n")
    rel = os.path.relpath(site / "evil_pkg" / "x.py", env_of(node))
    (site / "evil_pkg").rename(site / "evil_real")
    os.symlink(outside, site / "evil_pkg")
    hvd_env_prune.remove(str(env_of(node)), rel, {str(env_of(node)), str(site)})
    assert (outside / "x.py").read_text() == "keep me\n" and (site / "evil_pkg").is_symlink()


def test_env_files_names_additions_last_which_hvd_pyenv_reads_to_skip_a_mixed_drift() -> None:
    """hvd_pyenv runs this module only where env.files starts with an addition: that holds nothing else because the
    description puts missing and changed files first, whatever the order found and however many are cut."""
    from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import describe_problems  # noqa: PLC0415

    many = [("added", f"a{i:02}.py") for i in range(20)] + [("changed", "zz.py")]
    assert describe_problems(many).startswith("changed: zz.py; added: ")
    assert describe_problems([("added", "b.pth"), ("missing", "c.py")]).startswith("missing: c.py")
    assert describe_problems([("added", "b.pth"), ("added", "a.py")]) == "added: a.py; added: b.pth"
