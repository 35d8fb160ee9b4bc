"""hvd_preflight's rules (its filter plugin) and hvdcluster's own judgements agree: a node's hostname against
hosts.yaml's rule, a GPU and its CUDA, the host compiler, as the compatibility matrix (src/hvdcluster/compat)
gives them to the inventory and the resolver reads them.

Here rather than in tests/unit/plugins/filter: they import hvdcluster, which the copy ansible-test units runs
in does not hold. The probe documents and the judge: tests/unit/plugins/filter/preflight_probe.py.
"""

from __future__ import annotations

import pytest

from ansible_collections.hvd.cluster.tests.unit.plugins.filter.preflight_probe import checks, judge, probe


@pytest.mark.parametrize("name, reason", [
    ("node-1", None), ("gpu01.example.org", None), ("GPU01", None), ("node_1", "bad character '_'"),
    ("-node", "starts with a hyphen"), ("node-", "ends with a hyphen"), ("a" * 64, "at most 63"),
    ("10.0.0", "looks like an IPv4 address"), ("node.123", "all digits")])
def test_a_node_hostname_is_judged_by_the_rule_hosts_yaml_names_are(name: str, reason: str | None) -> None:
    """The pre-flight and hosts.yaml's loader apply one RFC 1123 rule (plugins/module_utils/hvd_names.py) and give
    the same reason."""
    from hvdcluster.spec import names

    found = judge(a=probe(name, "b"))["a"]
    hostname = [f for f in found if f["check"] == "hostname-valid"]
    if reason is None:
        assert hostname == []
        assert names.hostname_problem(name.lower()) is None
    else:
        assert reason in hostname[0]["found"] and reason in names.hostname_problem(name.lower())
    assert judge(a=probe(name, "b"), set_hostname=True)["a"] == []  # the converge renames it


def test_gpu_rules_from_the_matrix() -> None:
    from hvdcluster import compat

    gpu_rules = compat.preflight_vars({"cuda": "11.7"})["hvd_preflight_gpu_rules"]
    h100 = {"gpus": ["NVIDIA H100 80GB HBM3"], "pci_devices": 1, "loaded": "", "installed": [], "nouveau": False}
    k80 = dict(h100, gpus=["Tesla K80"])
    found = judge(probe("a", "b", nvidia=h100), probe("b", "a", nvidia=k80), cuda="11.7", driver="550",
                  gpu_rules=gpu_rules)
    assert "gpu-supported" in checks(found, "a") and "11.8" in found["a"][0]["expected"]
    assert {f["expected"] for f in found["b"] if f["check"] == "gpu-supported"} == {"driver branch <= 470"}
    assert "gpu-models" in checks(found, "a") | checks(found, "b")


def test_gcc_newer_than_nvcc_accepts() -> None:
    from hvdcluster import compat

    gcc_max = compat.preflight_vars({"cuda": "11.8"})["hvd_preflight_gcc_max"]
    assert gcc_max == "11"
    found = judge(cuda="11.8", gcc_max=gcc_max)
    assert checks(found, "a") == {"gcc-nvcc"} and "g++-11" in found["a"][0]["fix"]
    pinned = probe("a", "b", gcc={"gcc": "12", "g++": "12", "host_cxx": "11.4.0"})
    assert judge(a=pinned, cuda="11.8", gcc_max=gcc_max)["a"] == []


MODELS = ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "Tesla V100-SXM2-32GB", "NVIDIA L4", "Tesla T4",
          "NVIDIA B200", "NVIDIA GeForce RTX 3090"]


@pytest.mark.parametrize("cuda", ["10.2", "11.0", "11.8", "12.0.1", "12.8", "12.9", "13.0"])
def test_the_pre_flight_and_the_resolver_judge_a_gpu_and_its_cuda_alike(cuda: str) -> None:
    """The matrix's GPU rows as the inventory carries them (compat.preflight_vars) and as the resolver reads them
    (the catalog): one judgement of CUDA and driver branch limits (plugins/module_utils/hvd_limits.py)."""
    from hvdcluster.compat import matrix, rules as resolver

    plan = matrix.preflight_vars({"cuda": cuda})
    catalog = matrix._Catalog(matrix._matrix())
    for model in MODELS:
        for driver in ("535.104.05", "580.65.06", "590.1"):
            node = probe("a", "b", nvidia={"gpus": [model], "pci_devices": 1, "loaded": "", "installed": [],
                                           "nouveau": False})
            found = judge(a=node, cuda=cuda, driver=driver, gpu_rules=plan["hvd_preflight_gpu_rules"])["a"]
            flagged = {f["found"].rsplit(" with ", 1)[1].split()[0] for f in found if f["check"] == "gpu-supported"}
            assert ("CUDA" in flagged) == any(resolver._cuda_vs_gpu(catalog, cuda, (model,))), (model, cuda)
            by_branch = [m for m, _ in resolver._driver_vs_gpu(catalog, driver, (model,)) if "driver branch" in m]
            assert ("driver" in flagged) == bool(by_branch), (model, driver)


@pytest.mark.parametrize("gcc, cuda", [("12.2.0", "11.8"), ("11.4.0", "11.8"), ("13.1.0", "12.4"), ("12.3.0", "12.4")])
def test_the_pre_flight_and_the_resolver_judge_the_host_compiler_alike(gcc: str, cuda: str) -> None:
    from hvdcluster.compat import matrix, rules as resolver

    plan = matrix.preflight_vars({"cuda": cuda})
    node = probe("a", "b", gcc={"gcc": gcc, "g++": gcc, "host_cxx": ""})
    found = judge(a=node, cuda=cuda, gcc_max=plan.get("hvd_preflight_gcc_max", ""))["a"]
    catalog = matrix._Catalog(matrix._matrix())
    assert ("gcc-nvcc" in {f["check"] for f in found}) == any(resolver._cuda_vs_gcc(catalog, cuda, gcc)), (gcc, cuda)
