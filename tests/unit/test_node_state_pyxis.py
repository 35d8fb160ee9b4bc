"""hvd_node_state's pyxis items, read from a fake root (tests/unit/plugins/modules/node_tree.py), and the owner
`check` gives them (src/hvdcluster/drift.py).

Here rather than beside the other hvd_node_state tests in tests/unit/plugins/modules: it imports hvdcluster,
which the copy ansible-test units runs in does not hold.
"""

from __future__ import annotations

import json
from pathlib import Path

from ansible_collections.hvd.cluster.tests.unit.plugins.modules.node_tree import look
# a fixture: the test below asks for it by name
from ansible_collections.hvd.cluster.tests.unit.plugins.modules.node_tree import node  # noqa: F401
from ansible_collections.hvd.cluster.tests.unit.plugins.support import write

from ansible_collections.hvd.cluster.plugins.modules import hvd_tree
from ansible_collections.hvd.cluster.plugins.module_utils import hvd_state_stack


# ------------------------------------------------------------------------------------------ enroot and pyxis


PYXIS = "/opt/hvd/pyxis"


def test_pyxis_reads_its_tree_its_plugstack_files_and_its_links_where_its_fact_names_the_prefix(
        node: Path, tmp_path: Path) -> None:
    """hvd_pyxis's tree as hvd_tree unpacks it, Slurm's plugstack files and the /usr/local/bin link of every program in
    <prefix>/bin: each drift named (an edited plugstack, a link turned elsewhere, one removed, a removed plugin),
    nothing where the role never ran."""
    from hvdcluster import drift
    from ansible_collections.hvd.cluster.tests.unit.plugins.support import UNPACK, make_archive

    assert not [key for key in look(node) if key.startswith("pyxis.")]
    tools = ("enroot", "enroot-nsenter", "enroot-mount")
    archive, digest = make_archive(tmp_path, {**{f"bin/{tool}": "#!/bin/bash\n" for tool in tools},
                                              "lib/slurm/spank_pyxis.so": "\x7fELF"})
    prefix = node / PYXIS.lstrip("/")
    hvd_tree.unpack(str(archive), digest, str(prefix), marker_content="pxkey",
                    **{**UNPACK, "marker": hvd_state_stack.PYXIS_MARKER})
    write(node, "/etc/ansible/facts.d/hvd_pyxis.fact", json.dumps({"version": "0.24.0", "prefix": PYXIS}))
    write(node, "/etc/slurm/plugstack.conf", "include /etc/slurm/plugstack.conf.d/*.conf\n")
    write(node, "/etc/slurm/plugstack.conf.d/pyxis.conf", f"required {PYXIS}/lib/slurm/spank_pyxis.so\n")
    links = node / "usr/local/bin"
    links.mkdir(parents=True, exist_ok=True)
    for tool in tools:
        (links / tool).symlink_to(f"{PYXIS}/bin/{tool}")
    state = {key: value for key, value in look(node).items() if key.startswith("pyxis.")}
    assert state.pop("pyxis.config.plugstack.conf") != state.pop("pyxis.config.pyxis.conf") != "absent"
    assert state == {"pyxis.version": "0.24.0", "pyxis.key": "pxkey", "pyxis.files": "ok", "pyxis.links": "ok"}
    before = look(node)["pyxis.config.pyxis.conf"]
    write(node, "/etc/slurm/plugstack.conf.d/pyxis.conf", "optional /tmp/evil.so\n")
    (links / "enroot").unlink()
    (links / "enroot").symlink_to("/tmp/enroot")
    (links / "enroot-mount").unlink()
    (prefix / "lib/slurm/spank_pyxis.so").unlink()
    after = look(node)
    assert after["pyxis.config.pyxis.conf"] != before
    assert after["pyxis.links"] == "missing: enroot-mount; leads elsewhere: enroot -> /tmp/enroot"
    assert after["pyxis.files"] == "missing: lib/slurm/spank_pyxis.so"
    assert drift.owner("pyxis.files") == drift.owner("pyxis.links") == "hvd_pyxis"
