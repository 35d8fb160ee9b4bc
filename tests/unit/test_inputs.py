"""Which roles a change of the inputs reaches (hvdcluster.inputs), on an inventory rendered by `hvdcluster inventory`
and the checkout's own Ansible content."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hvdcluster import cli, inputs, paths
from hvdcluster.drift import ROLES


@pytest.fixture
def root(hosts: Path, tmp_path: Path) -> Path:
    assert cli.main(["inventory", str(hosts), "-o", str(tmp_path / "inv")]) == 0
    return tmp_path / "inv" / "c1"


def change(root: Path, **files: str) -> inputs.Change | None:
    """Record the inputs, write ``files`` (relative path with '/' as '__' -> text), and ask what changed."""
    recorded = inputs.parts(root)
    for name, text in files.items():
        path = root / name.replace("__", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return inputs.change(root, recorded)


def test_the_digest_and_the_parts_follow_meaning_not_layout(root: Path) -> None:
    before, parts = inputs.digest(root), inputs.parts(root)
    cluster = root / "group_vars" / "all" / "cluster.yml"
    text = cluster.read_text()
    assert "hvd_cluster_name: c1\n" in text
    cluster.write_text("# a comment\n" + text.replace("hvd_cluster_name: c1\n", "hvd_cluster_name:   'c1'  # quoted\n"))
    assert inputs.digest(root) == before and inputs.parts(root) == parts
    assert "group_vars/all/stack.yml:hvd_pyenv_packages" in parts["variables"]
    assert change(root) is None  # nothing changed: nothing to say (the digest decides about the fast path)


@pytest.mark.parametrize(("text", "first"), [
    ("hvd_pyenv_packages: [torch, six]\n", "hvd_pyenv"),
    ("hvd_horovod_frameworks: [pytorch, tensorflow]\n", "hvd_horovod"),
    ("hvd_base_ca_bundle: /etc/ssl/corp.pem\n", "hvd_base"),
    ("hvd_ssh_mesh_user: ops\n", "hvd_ssh_mesh"),
    ("hvd_openmpi_source: source\n", "hvd_openmpi"),
    ("hvd_fabric_interface: ib0\n", "hvd_verify"),  # read by `run` (launch.py), by no role
    ("my_packages: [six]\nhvd_pyenv_packages: '{{ my_packages }}'\n", "hvd_pyenv"),
])
def test_a_changed_variable_starts_the_converge_at_the_first_role_that_reads_it(root: Path, text: str,
                                                                               first: str) -> None:
    found = change(root, group_vars__all__local_yml=text)
    assert found is not None and found.first_role == first, found
    assert set(found.variables) == set(yaml.safe_load(text))


def test_a_variable_named_by_another_changes_with_it(root: Path) -> None:
    """hvd_pyenv_packages names my_packages (Jinja): when only my_packages changes, hvd_pyenv_packages did too."""
    (root / "group_vars" / "all" / "local.yml").write_text("my_packages: [six]\n"
                                                           "hvd_pyenv_packages: '{{ my_packages }}'\n")
    found = change(root, group_vars__all__local_yml="my_packages: [six, attrs]\n"
                                                    "hvd_pyenv_packages: '{{ my_packages }}'\n")
    assert found is not None and found.first_role == "hvd_pyenv"
    assert found.variables == ["hvd_pyenv_packages", "my_packages"]


@pytest.mark.parametrize("why", ["preflight", "ansible", "hosts", "key", "not-a-mapping", "removed-file", "no-parts"])
def test_every_role_runs_when_a_change_reaches_the_pre_flight_or_lies_outside_the_variables(root: Path,
                                                                                           why: str) -> None:
    recorded = inputs.parts(root)
    if why == "preflight":  # a variable the pre-flight reads (and so every role after it)
        (root / "group_vars" / "all" / "local.yml").write_text("hvd_set_hostname: true\n")
    elif why == "ansible":  # Ansible reads ansible_* by itself: no role names them
        (root / "group_vars" / "all" / "local.yml").write_text("ansible_port: 2222\n")
    elif why == "hosts":
        hosts = root / "hosts.yml"
        hosts.write_text(hosts.read_text().replace("10.0.0.2", "10.0.0.3"))
    elif why == "key":
        (root / "ssh").mkdir(exist_ok=True)
        (root / "ssh" / "id_ed25519.pub").write_text("ssh-ed25519 AAAAC3Nza hvdcluster@c1\n")
    elif why == "not-a-mapping":
        (root / "group_vars" / "all" / "local.yml").write_text("- a list, not variables\n")
    elif why == "removed-file":  # every variable of it gone, the pre-flight's among them
        (root / "group_vars" / "all" / "cluster.yml").unlink()
    else:
        recorded = {}  # recorded by a version that kept only the digest
    assert inputs.change(root, recorded) is None


def test_the_readers_follow_the_roles_own_variables() -> None:
    """Each role's documented variables (meta/argument_specs.yml) are read by that role or an earlier one; a
    variable of every play header (hvd_become) reaches the pre-flight; the read-back (state.yml) counts nowhere."""
    home = paths.ansible_home()
    read = inputs.readers(home)
    for n, role in enumerate(ROLES):
        specs = yaml.safe_load((home / "roles" / role / "meta" / "argument_specs.yml").read_text())
        for name in specs["argument_specs"]["main"].get("options", {}):
            assert read.get(name, len(ROLES)) <= n, (role, name)
    assert read["hvd_become"] == 0 and read["hvd_pyenv_packages"] == ROLES.index("hvd_pyenv")
    # hvd_fanout (included by the cached builds) takes the place of the earliest role that includes it
    assert read["hvd_fanout_entry"] == min(ROLES.index(r) for r in ROLES
                                           if "hvd_fanout" in "".join(p.read_text() for p in
                                                                      (home / "roles" / r).rglob("*.yml")))
