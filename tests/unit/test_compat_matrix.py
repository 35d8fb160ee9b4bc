"""The version matrix (src/hvdcluster/data/compat.yaml): every row carries a source from the reviewed hosts, every
artifact a sha256, every rule id is unique; GPU names as nvidia-smi prints them find their architecture."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest

from hvdcluster.compat import RULES, gpu_row, load_matrix, resolve, sdist_sha256
from tests.unit.compat_helpers import _gpu_node


def _rows(node, path=""):
    """Every mapping that holds a scalar (a row of facts), with its path in the document."""
    if isinstance(node, dict):
        if any(not isinstance(v, (dict, list)) for v in node.values()):
            yield path, node
        for key, value in node.items():
            yield from _rows(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _rows(value, f"{path}[{index}]")


def test_every_matrix_row_carries_an_http_source():
    matrix = load_matrix()
    sources = matrix.pop("sources")
    matrix.pop("artifacts")  # pinned digests: their source is the release they were published with (below)
    assert all(url.startswith("https://") for url in sources.values())
    rows = list(_rows(matrix))
    assert len(rows) > 150
    for path, row in rows:
        assert str(row.get("source", "")).startswith(("https://", "http://")), f"{path} has no http(s) source"


def test_every_artifact_pins_a_sha256_and_names_its_release_without_a_registry_address():
    artifacts = load_matrix()["artifacts"]
    rows = [row for name, package in artifacts.items() if name != "nvidia_wheels" for row in package]
    assert rows
    for row in rows:
        assert re.fullmatch(r"[0-9a-f]{64}", row["sha256"]), row
        assert row["file"].endswith(".tar.gz") and row["version"] in row["file"]
        assert row["source"] and "://" not in row["source"]  # a description, never a registry address
    wheels = artifacts["nvidia_wheels"]
    assert wheels
    for row in wheels:  # one digest per file the release publishes (x86_64, aarch64)
        assert row["sha256"] and all(re.fullmatch(r"[0-9a-f]{64}", d) for d in row["sha256"]), row
        assert re.fullmatch(r"nvidia-[a-z]+-cu1[0-9]", row["name"]) and row["version"] in row["source"], row
        assert "://" not in row["source"], row


def test_the_horovod_sdist_digest_is_the_matrix_pin_and_empty_for_a_release_without_one():
    assert sdist_sha256("0.28.1") == "92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0"
    assert sdist_sha256("0.27.0") == "" and sdist_sha256(None) == ""


SOURCE_HOSTS = {
    "docs.nvidia.com",
    "developer.download.nvidia.com",
    "gitlab.com",
    "github.com",
    "reviews.llvm.org",
    "www.tensorflow.org",
    "open-mpi.org",
    "tracker.debian.org",
    "docs.python.org",
}


def test_matrix_sources_come_from_the_reviewed_hosts():
    matrix = load_matrix()
    hosts = {urlsplit(url).hostname for url in matrix.pop("sources").values()}
    hosts |= {urlsplit(row["source"]).hostname for _, row in _rows(matrix)}
    assert hosts - {None} <= SOURCE_HOSTS


def test_load_matrix_returns_a_private_copy():
    load_matrix()["cuda_driver"]["toolkits"].clear()
    assert load_matrix()["cuda_driver"]["toolkits"]


def test_every_rule_id_is_unique_per_field_pair():
    pairs = [(rule.id, rule.fields) for rule in RULES]
    assert len(pairs) == len(set(pairs))


@pytest.mark.parametrize(
    ("name", "arch"),
    [
        ("Tesla K80", "kepler"),
        ("Tesla P100-PCIE-16GB", "pascal"),
        ("Tesla V100-SXM2-32GB", "volta"),
        ("Tesla T4", "turing"),
        ("NVIDIA A100-SXM4-80GB", "ampere"),
        ("NVIDIA A10", "ampere"),
        ("NVIDIA L40S", "ada"),
        ("NVIDIA GeForce RTX 4090", "ada"),
        ("NVIDIA H100 80GB HBM3", "hopper"),
        ("NVIDIA GH200 480GB", "hopper"),
        ("NVIDIA B200", "blackwell"),
    ],
)
def test_gpu_names_as_nvidia_smi_prints_them_find_their_architecture(name, arch):
    assert gpu_row(name)["arch"] == arch


def test_a_gpu_model_the_matrix_does_not_list_is_not_checked():
    assert gpu_row("NVIDIA A10G") is None and gpu_row("Quadro K4000") is None
    assert resolve({"cuda": "12.4"}, _gpu_node("NVIDIA A10G")).stack["cuda"] == "12.4"
