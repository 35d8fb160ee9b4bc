"""Probe documents as hvd_node_state's host look returns them, and hvd_preflight's judge over them: shared by
tests/unit/plugins/filter/test_hvd_preflight.py and tests/unit/test_preflight_compat.py.
"""

from __future__ import annotations

from ansible_collections.hvd.cluster.plugins.filter import hvd_preflight as rules


PLAN = {
    "set_hostname": False, "supported_os": {"Debian": ["12"], "Ubuntu": ["22.04", "24.04"]}, "tmp_dir": "/tmp",
    "min_free_gb": 6.0, "min_shm_mb": 256, "cuda": "", "driver": "", "gcc_max": "", "gpu_rules": [],
    "probe_port": 50123, "ephemeral_ports": [32768, 60999], "max_clock_skew_s": 5, "controller_time": [1000.0, 1003.0],
}


def probe(name: str, peer: str, **changes) -> dict:
    doc = {
        "time": 1001.0, "hostname": name, "uid": 0, "tmp_error": "", "free_gb": {"/opt": 40.0}, "shm_mb": 1024,
        "kernel": {"running": "6.1.0-18-amd64", "newer": [], "headers": True, "headers_candidate": ""},
        "secure_boot": None, "nvidia": {"gpus": [], "pci_devices": 0, "loaded": "", "installed": [], "nouveau": False},
        "gcc": {"gcc": "12", "g++": "12", "host_cxx": ""},
        "interfaces": {"eth0": {"ipv4": "10.0.0.1", "mtu": 1500}}, "ephemeral_ports": [32768, 60999],
        "peers": [{"name": peer, "address": f"{peer}-fab", "route": {"resolved": "10.0.0.2", "local": "10.0.0.1",
                                                                      "iface": "eth0", "mtu": 1500},
                   "ssh": {"port": 22, "error": ""}, "probe": {"port": 50123, "error": ""}}],
        "os": {"distribution": "Debian", "version": "12", "major": "12"}, "container": False, "kernel_module": False,
        "mpi": {"noninteractive": "", "version": "", "login": ""},
    }
    for key, value in changes.items():
        doc[key] = value
    return doc


def judge(a: dict | None = None, b: dict | None = None, **plan) -> dict:
    return rules.hvd_preflight_findings({"a": a or probe("a", "b"), "b": b or probe("b", "a")}, {**PLAN, **plan})


def checks(found: dict, host: str) -> set[str]:
    return {f["check"] for f in found[host]}
