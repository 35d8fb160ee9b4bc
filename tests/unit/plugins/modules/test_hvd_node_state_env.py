"""hvd_node_state's env items (its files against hvd_tree's manifest and the RECORDs, the distributions, Horovod),
read from a fake root (real files in tmp_path, modules/node_tree.py).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from ansible_collections.hvd.cluster.tests.unit.plugins.modules.node_tree import PREFIX, SITE, look, make_dist
# a fixture: the tests below ask for it by name
from ansible_collections.hvd.cluster.tests.unit.plugins.modules.node_tree import node  # noqa: F401
from ansible_collections.hvd.cluster.tests.unit.plugins.support import write

from ansible_collections.hvd.cluster.plugins.modules import hvd_tree
from ansible_collections.hvd.cluster.plugins.module_utils import hvd_state_env


# ------------------------------------------------------------------------------------------ the env


def test_a_deleted_and_an_edited_file_show(node: Path) -> None:
    site = node / SITE.lstrip("/")
    (site / "filelock/_api.py").unlink()
    (site / "cloudpickle/__init__.py").write_text("version = '3.0.0'  # edited\n")
    (node / PREFIX.lstrip("/") / "bin/horovodrun").unlink()  # Horovod's files are checked too
    assert look(node)["env.files"] == ("missing: bin/horovodrun; missing: filelock/_api.py; "
                                       "changed: cloudpickle/__init__.py")


def test_an_env_without_its_manifest_is_not_taken_as_installed(node: Path) -> None:
    """With no manifest nothing says what belongs in the env: that is named, and RECORDs are still checked."""
    (node / PREFIX.lstrip("/") / ".hvd-manifest").unlink()
    (node / SITE.lstrip("/") / "filelock/_api.py").write_text("x = 2\n")  # same size: only deep sees it
    assert look(node)["env.files"] == "missing: .hvd-manifest"
    assert look(node, deep=True)["env.files"] == "missing: .hvd-manifest; changed: filelock/_api.py"
    assert look(node)["env.manifest"] == "absent"


def test_with_hvd_trees_manifest_a_same_size_edit_shows_by_its_time(node: Path) -> None:
    prefix = node / PREFIX.lstrip("/")
    hvd_tree.write_manifest(str(prefix), {".hvdcluster", ".hvd-env-key"})
    assert look(node)["env.files"] == "ok"
    api = prefix / "lib/python3.11/site-packages/filelock/_api.py"
    before = api.stat()
    api.write_text("x = 2\n")
    os.utime(api, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    (prefix / "pyvenv.cfg").unlink()  # listed by the manifest only: named relative to the prefix
    assert look(node)["env.files"] == "missing: pyvenv.cfg; changed: filelock/_api.py"
    os.utime(api, ns=(before.st_atime_ns, before.st_mtime_ns))  # the time put back: only deep sees it
    assert look(node)["env.files"] == "missing: pyvenv.cfg"
    assert look(node, deep=True)["env.files"] == "missing: pyvenv.cfg; changed: filelock/_api.py"


def test_many_problems_are_cut_short(node: Path) -> None:
    make_dist(node, "many", "1.0", {f"many/m{i:02}.py": "x\n" for i in range(14)})
    files = look(node)["env.files"]
    # a distribution added since the env was installed: its 14 files, its METADATA and RECORD (16 in all)
    assert files.startswith("added: many-1.0.dist-info/METADATA; ") and files.endswith("; +6 more"), files


def test_a_record_line_the_manifest_never_listed_is_not_a_problem(node: Path) -> None:
    """A conda package's entry points replace the scripts pip wrote (its RECORD still lists bin/pip3.11): the
    manifest, made when the env was installed, is what the env is held to; only a distribution installed later
    (Horovod) is judged by its RECORD."""
    assert look(node)["env.files"] == "ok"
    record = next(p for p in (node / SITE.lstrip("/")).glob("*.dist-info/RECORD") if "horovod" not in p.parent.name.lower())
    with record.open("a") as handle:
        handle.write("../../../bin/never-installed,sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,0\n")
    os.utime(record, ns=(record.stat().st_atime_ns, record.stat().st_mtime_ns))
    files = look(node)["env.files"]
    assert "never-installed" not in files and files.startswith("changed: ") and "RECORD" in files, files


def test_another_version_of_a_distribution_shows_in_its_item_and_in_the_files(node: Path) -> None:
    before = look(node)
    site = node / SITE.lstrip("/")
    for path in sorted(site.glob("filelock-*.dist-info/*")):
        path.unlink()
    (site / "filelock-3.13.1.dist-info").rmdir()
    make_dist(node, "filelock", "3.13.2", {"filelock/__init__.py": "from ._api import x\n",
                                           "filelock/_api.py": "x = 1  # 3.13.2\n"})
    after = look(node)
    assert after["env.dist.filelock"].startswith("3.13.2 ")
    assert after["env.dist.filelock"] != before["env.dist.filelock"]
    assert "missing: filelock-3.13.1.dist-info/RECORD" in after["env.files"]
    assert "added: filelock-3.13.2.dist-info/METADATA" in after["env.files"]
    assert {k for k in before if before[k] != after[k]} == {"env.dist.filelock", "env.files"}


# One addition each that runs code in every rank (or shadows what was installed): none of them may pass as in sync.
ADDITIONS = {
    "a distribution": ("extra_pkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: extra-pkg\nVersion: 1.0\n"),
    "a module": ("evil.py", "import os\n"),
    "a .pth file": ("zz-hook.pth", "import os; os.system('true')\n"),
    "sitecustomize": ("sitecustomize.py", "print('every interpreter start')\n"),
    "usercustomize": ("usercustomize.py", "print('every interpreter start')\n"),
    "a planted byte cache": ("filelock/__pycache__/_api.cpython-311.pyc", "\xa7\r\r\n planted"),
    "a script": ("../../../bin/helper", "#!/bin/sh\n"),
}


@pytest.mark.parametrize("kind", list(ADDITIONS))
def test_anything_added_to_the_env_is_named(node: Path, kind: str) -> None:
    rel, text = ADDITIONS[kind]
    before = look(node)
    assert before["env.files"] == "ok"
    write(node, os.path.normpath(os.path.join(SITE, rel)), text)
    name = os.path.relpath(os.path.normpath(os.path.join(SITE, rel)), PREFIX) if rel.startswith("..") else rel
    assert look(node)["env.files"] == f"added: {name}"


def test_files_horovod_and_hvdcluster_put_there_later_are_not_additions(node: Path) -> None:
    """Horovod's RECORD (byte caches without a hash included) and the markers account for what came after."""
    write(node, SITE + "/horovod/__pycache__/x.cpython-311.pyc", b"compiled")  # listed by Horovod's RECORD
    assert look(node)["env.files"] == "ok"
    write(node, SITE + "/horovod/__pycache__/y.cpython-311.pyc", b"compiled")  # not listed
    assert look(node)["env.files"] == "added: horovod/__pycache__/y.cpython-311.pyc"


def test_the_manifest_digest_ignores_times_and_names_an_edited_manifest(node: Path) -> None:
    prefix = node / PREFIX.lstrip("/")
    before = look(node)
    manifest = json.loads((prefix / ".hvd-manifest").read_text())
    for entry in manifest.values():
        if entry[0] != "link":
            entry[1] += 1  # another node unpacked the same archive at another moment
    (prefix / ".hvd-manifest").write_text(json.dumps(manifest))
    assert look(node)["env.manifest"] == before["env.manifest"]
    write(node, SITE + "/sitecustomize.py", "print('x')\n")
    hvd_tree.write_manifest(str(prefix), {".hvdcluster", ".hvd-env-key"})  # the manifest made to vouch for it
    after = look(node)
    assert after["env.manifest"] != before["env.manifest"]


def test_horovod_is_reported_apart_from_the_distributions(node: Path) -> None:
    state = look(node)
    assert not any("horovod" in key for key in state if key.startswith("env.dist."))
    info = next((node / SITE.lstrip("/")).glob("Horovod-*.dist-info"))
    assert state["horovod.record"] == hashlib.sha256((info / "RECORD").read_bytes()).hexdigest()[:16]
    (info / "RECORD").write_text((info / "RECORD").read_text() + "horovod/extra.py,,\n")
    assert look(node)["horovod.record"] != state["horovod.record"]


def test_a_distribution_name_is_normalized(node: Path) -> None:
    make_dist(node, "Typing_Extensions", "4.9.0", {"typing_extensions.py": "x\n"})
    assert look(node)["env.dist.typing-extensions"].startswith("4.9.0 ")
    assert hvd_state_env.canonical("zope.interface") == "zope-interface" and hvd_state_env.canonical("A__B-c") == "a-b-c"
