"""`hvdcluster plan --probe`: what the nodes' host looks (hvd_node_state's ``host``) become for the resolver, and
how a node that cannot be read is refused. The reads themselves are the module's (tests/unit/plugins/modules/test_hvd_node_state*.py,
tests/unit/plugins/filter/test_hvd_preflight.py) and run against real nodes in tests/cluster/test_preflight.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from hvdcluster import compat, nodestate, probe, spec
from hvdcluster.errors import HvdError


def look(os_id: str = "debian", version: str = "12", gcc: str = "12.2.0", python: str = "3.11.2",
         gpus: tuple[str, ...] = (), driver: str = "") -> dict:
    return {"release": {"id": os_id, "version": version}, "kernel": {"running": "6.1.0-18-amd64"},
            "gcc": {"gcc": gcc, "g++": gcc.split(".")[0], "host_cxx": ""}, "python": python,
            "nvidia": {"gpus": list(gpus), "loaded": driver, "installed": [], "pci_devices": len(gpus)}}


DEBIAN = look()
GPU = look(gpus=("NVIDIA H100 80GB HBM3",) * 2, driver="550.54.15")


def test_from_look_reads_every_field() -> None:
    facts = probe.from_look("a", GPU)
    assert facts == probe.NodeFacts("a", "debian", "12", "6.1.0-18-amd64", "12.2.0", "3.11.2",
                                    ("NVIDIA H100 80GB HBM3",) * 2, "550.54.15")
    assert "2x NVIDIA H100 80GB HBM3" in probe.describe(facts) and "driver 550.54.15" in probe.describe(facts)


def test_merge_feeds_the_resolver_the_nodes_python_gcc_and_gpus() -> None:
    node = probe.merge([probe.from_look("a", GPU), probe.from_look("b", DEBIAN)])
    assert (node.os_id, node.os_version, node.gcc, node.python) == ("debian", "12", "12.2.0", "3.11.2")
    assert node.gpus == ("NVIDIA H100 80GB HBM3",) and node.driver_loaded == "550.54.15"
    plan = compat.resolve({}, node)
    assert plan.stack["gpu"] is True and plan.stack["python"]["version"] == "3.11"
    assert any("the node's python 3.11.2" in note for note in plan.notes)


@pytest.mark.parametrize("other, field", [(look(os_id="ubuntu", version="22.04"), "os id"),
                                          (look(gcc="11.4.0"), "gcc"),
                                          (look(python="3.10.12"), "python")])
def test_nodes_that_would_need_different_builds_are_refused(other: dict, field: str) -> None:
    with pytest.raises(HvdError, match=f"nodes differ in {field} \\(a: .*, b: .*\\)"):
        probe.merge([probe.from_look("a", DEBIAN), probe.from_look("b", other)])


def test_an_empty_look_leaves_the_resolver_free() -> None:
    assert probe.merge([probe.from_look("a", {})]) == compat.NodeInfo(gpus=())


def test_a_node_cannot_put_terminal_escapes_into_what_is_printed() -> None:
    facts = probe.from_look("a", look(gpus=("NVIDIA \x1b]0;owned\x07H100\x1b[2J",)))
    assert facts.gpus == ("NVIDIA ]0;ownedH100[2J",)
    assert "\x1b" not in probe.describe(facts)


def two_nodes(tmp_path: Path) -> spec.ClusterSpec:
    path = tmp_path / "hosts.yaml"
    path.write_text("cluster: lab\nhosts:\n  - {name: a, address: 10.0.0.1}\n  - {name: b, address: 10.0.0.2}\n")
    return spec.load(path)


def test_probe_merges_what_every_node_answered(tmp_path: Path) -> None:
    cluster = two_nodes(tmp_path)
    reading = nodestate.Reading(found={"a": {}, "b": {}}, looks={"a": DEBIAN, "b": DEBIAN})
    node, facts = probe.probe(cluster, tmp_path / "inv", read=lambda c, d: reading)
    assert [f.host for f in facts] == ["a", "b"] and node.python == "3.11.2"


def test_a_node_that_gives_no_look_is_refused_by_name(tmp_path: Path) -> None:
    cluster = two_nodes(tmp_path)
    reading = nodestate.Reading(looks={"a": DEBIAN}, unreachable={"b": "unreachable: Connection timed out"})
    with pytest.raises(HvdError, match=r"^b \(10\.0\.0\.2:22\): cannot probe: unreachable: Connection timed out"):
        probe.probe(cluster, tmp_path / "inv", read=lambda c, d: reading)


def test_a_changed_host_key_is_refused_with_how_to_forget_the_old_one(tmp_path: Path) -> None:
    cluster = two_nodes(tmp_path)
    why = "unreachable: @@@ WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED! @@@ ... Host key verification failed."
    reading = nodestate.Reading(looks={"a": DEBIAN}, unreachable={"b": why})
    with pytest.raises(HvdError, match=r"b \(10\.0\.0\.2:22\): host key changed since it was pinned in .*ssh-keygen"):
        probe.probe(cluster, tmp_path / "inv", read=lambda c, d: reading)


def test_nodes_behind_a_bastion_that_refuses_are_refused_naming_the_bastion(tmp_path: Path) -> None:
    """A real ssh to a loopback port where nothing listens stands for the bastion."""
    key = Path(__file__).parent / "bad_hosts" / "fixtures" / "id_test.pub"
    public = key.read_text().split()
    path = tmp_path / "hosts.yaml"
    path.write_text("cluster: lab\nssh:\n  proxy_jump: {host: 127.0.0.1, port: 1, host_key: '"
                    f"{public[0]} {public[1]}'}}\nhosts: [10.0.0.1]\n")
    cluster = spec.load(path)
    reading = nodestate.Reading(unreachable={"ip-10-0-0-1": "unreachable: Connection closed by UNKNOWN port 65535"})
    (tmp_path / "inv" / "ssh").mkdir(parents=True)
    with pytest.raises(HvdError, match=r"^cannot probe the nodes: the bastion 127\.0\.0\.1:1 refused or failed the "
                                       r"login \(.*(refused|Connection)"):
        probe.probe(cluster, tmp_path / "inv", read=lambda c, d: reading)
