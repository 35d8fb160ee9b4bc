"""hvd_preflight's rules (its filter plugin), fed with probe documents as hvd_node_state's host look returns them.

The GPU, kernel, Secure Boot, MTU and clock cases cannot be provoked in a container here (no GPU, one shared
kernel and clock, one bridge): these tests feed the judge what such nodes report instead.

The rules held to hvdcluster's own (the compatibility matrix, hosts.yaml's names): tests/unit/test_preflight_compat.py.
"""

from __future__ import annotations

import copy

from ansible_collections.hvd.cluster.tests.unit.plugins.filter.preflight_probe import PLAN, checks, judge, probe

from ansible_collections.hvd.cluster.plugins.filter import hvd_preflight as rules


def test_healthy_pair_has_no_findings() -> None:
    assert judge() == {"a": [], "b": []}
    assert rules.hvd_preflight_report({"a": [], "b": []}) == ["all 2 nodes passed every pre-flight check"]


def test_every_finding_names_host_check_found_expected_fix() -> None:
    b = probe("b", "a", shm_mb=64, tmp_error="Read-only file system", uid=1000, hostname="a")
    found = judge(b=b)
    assert {"shm-size", "tmp-writable", "become-root", "hostname-unique"} <= checks(found, "b")
    for finding in found["b"]:
        assert set(finding) == {"host", "check", "severity", "found", "expected", "fix"}
        assert all(finding.values())
    line = rules.hvd_preflight_line(found["b"][0])
    assert line.startswith(found["b"][0]["check"] + ": found ") and "; fix: " in line


def test_kernel_checks_apply_only_when_a_module_is_built() -> None:
    k = {"running": "6.1.0-18-amd64", "newer": ["6.1.0-21-amd64"], "headers": False, "headers_candidate": ""}
    plain = judge(b=probe("b", "a", kernel=k, secure_boot=True))
    assert [f["severity"] for f in plain["b"]] == ["warn"] and checks(plain, "b") == {"kernel-booted"}
    module = judge(b=probe("b", "a", kernel=k, secure_boot=True, kernel_module=True))
    assert checks(module, "b") == {"kernel-booted", "kernel-headers", "secure-boot"}
    assert all(f["severity"] == "fail" for f in module["b"])
    installable = dict(k, newer=[], headers_candidate="6.1.76-1")
    assert judge(b=probe("b", "a", kernel=installable, kernel_module=True))["b"] == []


def test_driver_library_mismatch() -> None:
    nv = {"gpus": ["NVIDIA H100 80GB HBM3"], "pci_devices": 1, "loaded": "535.104.05", "installed": ["550.54.15"],
          "nouveau": False}
    found = judge(b=probe("b", "a", nvidia=nv))
    assert checks(found, "b") == {"driver-loaded"}
    assert "mismatch" in found["b"][0]["expected"]


def test_peer_ports_are_judged_on_the_target() -> None:
    a = probe("a", "b")
    a["peers"][0]["ssh"]["error"] = "Connection refused"
    a["peers"][0]["probe"]["error"] = "timed out"
    found = judge(a=a)
    assert found["a"] == []
    assert checks(found, "b") == {"peer-reachable", "peer-port"}
    port = next(f for f in found["b"] if f["check"] == "peer-port")
    assert "a cannot connect to b-fab:50123" in port["found"] and "32768-60999" in port["fix"]


def test_unresolvable_fabric_name() -> None:
    a = probe("a", "b")
    a["peers"][0] = {"name": "b", "address": "b-fab", "route": {"resolved": "", "error": "name does not resolve"}}
    found = judge(a=a)
    assert checks(found, "b") == {"peer-reachable"}


def test_fabric_interface_and_mtu_across_nodes() -> None:
    b = probe("b", "a")
    b["peers"][0]["route"] = {"resolved": "10.0.0.1", "local": "10.0.0.2", "iface": "ib0", "mtu": 2044}
    found = judge(b=b)
    assert checks(found, "a") == {"fabric-interface"}
    assert checks(found, "b") == {"fabric-interface", "mtu"} and "1500" in found["b"][1]["expected"]


def test_clock_skew_against_the_controller() -> None:
    found = judge(b=probe("b", "a", time=1030.0))
    assert checks(found, "b") == {"clock-skew"} and "+27.0 s" in found["b"][0]["found"]
    assert judge(b=probe("b", "a", time=1007.9))["b"] == []


def test_mpi_on_login_path_only_and_different_mpis() -> None:
    b = probe("b", "a", mpi={"noninteractive": "", "version": "", "login": "/opt/ompi/bin/mpirun"})
    found = judge(b=b)
    assert checks(found, "b") == {"mpi-path"} and "/opt/ompi/bin" in found["b"][0]["fix"]
    c = probe("a", "b", mpi={"noninteractive": "/usr/bin/mpirun", "version": "mpirun (Open MPI) 4.1.4", "login": ""})
    d = probe("b", "a", mpi={"noninteractive": "/usr/bin/mpirun", "version": "mpirun (Open MPI) 3.1.3", "login": ""})
    found = judge(c, d)
    assert "mpi-same" in checks(found, "a") | checks(found, "b")


def test_set_hostname_forgives_names_that_are_about_to_change() -> None:
    found = judge(b=probe("b", "a", hostname="a_b"), set_hostname=True)
    assert found == {"a": [], "b": []}


def test_unsupported_os_and_small_disk() -> None:
    found = judge(b=probe("b", "a", os={"distribution": "CentOS", "version": "7", "major": "7"},
                          free_gb={"/opt": 2.5}))
    assert checks(found, "b") == {"os-supported", "disk-free"}


def test_a_plan_held_to_one_archive_names_why_with_the_node_it_refuses() -> None:
    """gpu_repo distro: the resolver planned Debian 12's CUDA package, so an Ubuntu node is refused, saying why."""
    ubuntu = probe("b", "a", os={"distribution": "Ubuntu", "version": "22.04", "major": "22"})
    found = judge(b=ubuntu, supported_os={"Debian": ["12"]},
                  supported_os_why="stack.gpu_repo distro plans that archive's cuda 11.8")
    assert checks(found, "a") == set() and checks(found, "b") == {"os-supported"}
    assert found["b"][0]["expected"] == "Debian 12 (stack.gpu_repo distro plans that archive's cuda 11.8)"


def test_the_host_look_runs_here_as_the_module_runs_it_and_gives_what_the_judge_reads(tmp_path) -> None:
    """The real look (hvd_node_state with ``look``, run as Ansible runs a module), on this machine, against a
    loopback peer whose ports are closed."""
    from ansible_collections.hvd.cluster.tests.unit.plugins.support import run_module

    args = {"peers": [{"name": "lo", "address": "127.0.0.1", "port": 1, "probe_port": 2}],
            "paths": [str(tmp_path)], "tmp_dir": str(tmp_path), "host_cxx": ""}
    result = run_module("hvd_node_state", {"cluster": "lab", "root": str(tmp_path / "none"), "look": args})
    assert not result.get("failed"), result
    doc = result["host"]
    assert doc["tmp_error"] == "" and doc["free_gb"][str(tmp_path)] > 0 and doc["shm_mb"] > 0
    assert doc["release"]["id"] and doc["python"].count(".") == 2 and doc["kernel"]["running"]
    assert doc["peers"][0]["route"]["iface"] == "lo"
    assert "refused" in doc["peers"][0]["ssh"]["error"].lower()
    assert sorted(doc["mpi"]) == ["noninteractive", "version"]
    live = copy.deepcopy(doc)
    live.update(os={"distribution": "Debian", "version": "12", "major": "12"}, mpi={}, kernel_module=False)
    found = rules.hvd_preflight_findings({"here": live}, {**PLAN, "controller_time": []})
    assert "peer-reachable" in {f["check"] for f in found["lo"]}
