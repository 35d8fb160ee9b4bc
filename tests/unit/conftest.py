"""Fixtures the command's unit tests share."""

from __future__ import annotations

from pathlib import Path

import pytest

from hvdcluster import cli


@pytest.fixture
def hosts(tmp_path: Path) -> Path:
    """A two-node hosts.yaml (cluster c1: gpu01 and gpu02, two slots each)."""
    path = tmp_path / "hosts.yaml"
    path.write_text("cluster: c1\nhosts:\n  - {name: gpu01, address: 10.0.0.1, slots: 2}\n"
                    "  - {name: gpu02, address: 10.0.0.2, slots: 2}\n")
    return path


@pytest.fixture
def rendered(hosts: Path, tmp_path: Path) -> Path:
    """:func:`hosts` rendered by `hvdcluster inventory` into tmp_path/inv (the cluster's folder: inv/c1)."""
    assert cli.main(["inventory", str(hosts), "-o", str(tmp_path / "inv")]) == 0
    return tmp_path / "inv"
