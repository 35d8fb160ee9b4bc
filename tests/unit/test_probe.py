"""`hvdcluster plan --probe`: what the node probe's output becomes for the resolver."""

from __future__ import annotations

import pytest

from hvdcluster import compat, probe
from hvdcluster.errors import HvdError

DEBIAN = "os=debian 12\nkernel=6.1.0-18-amd64\ngcc=12.2.0\npython=3.11.2\n"
GPU = DEBIAN + "gpu=NVIDIA H100 80GB HBM3\ngpu=NVIDIA H100 80GB HBM3\ndriver=550.54.15\n"


def test_parse_reads_every_tag_and_ignores_noise() -> None:
    facts = probe.parse("a", "Welcome!\n" + GPU + "gpu=\n")
    assert facts == probe.NodeFacts("a", "debian", "12", "6.1.0-18-amd64", "12.2.0", "3.11.2",
                                    ("NVIDIA H100 80GB HBM3",) * 2, "550.54.15")
    assert "2x NVIDIA H100 80GB HBM3" in probe.describe(facts) and "driver 550.54.15" in probe.describe(facts)


def test_merge_feeds_the_resolver_the_nodes_python_gcc_and_gpus() -> None:
    node = probe.merge([probe.parse("a", GPU), probe.parse("b", DEBIAN)])
    assert (node.os_id, node.os_version, node.gcc, node.python) == ("debian", "12", "12.2.0", "3.11.2")
    assert node.gpus == ("NVIDIA H100 80GB HBM3",) and node.driver_loaded == "550.54.15"
    plan = compat.resolve({}, node)
    assert plan.stack["gpu"] is True and plan.stack["python"]["version"] == "3.11"
    assert any("the node's python 3.11.2" in note for note in plan.notes)


@pytest.mark.parametrize("other, field", [("os=ubuntu 22.04\ngcc=12.2.0\npython=3.11.2\n", "os id"),
                                          ("os=debian 12\ngcc=11.4.0\npython=3.11.2\n", "gcc"),
                                          ("os=debian 12\ngcc=12.2.0\npython=3.10.12\n", "python")])
def test_nodes_that_would_need_different_builds_are_refused(other: str, field: str) -> None:
    with pytest.raises(HvdError, match=f"nodes differ in {field} \\(a: .*, b: .*\\)"):
        probe.merge([probe.parse("a", DEBIAN), probe.parse("b", other)])


def test_an_empty_probe_leaves_the_resolver_free() -> None:
    assert probe.merge([probe.parse("a", "")]) == compat.NodeInfo(gpus=())


def test_a_node_cannot_put_terminal_escapes_into_what_is_printed() -> None:
    facts = probe.parse("a", "os=debian 12\ngpu=NVIDIA \x1b]0;owned\x07H100\x1b[2J\n")
    assert facts.gpus == ("NVIDIA ]0;ownedH100[2J",)
    assert "\x1b" not in probe.describe(facts)

