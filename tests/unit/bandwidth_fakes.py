"""What the bandwidth tests share (test_bandwidth.py, test_pcie_acs_iommu.py, test_bandwidth_cli.py): the names of
our own GPU and fabric tool outputs (tests/unit/plugins/fixtures/gpu, its README says what each stands for) and
their reader, the links a node reports, and a stand-in for the SSH to the first node of an nccl-tests run."""

from __future__ import annotations

import shlex

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_bandwidth
from ansible_collections.hvd.cluster.tests.unit.plugins.support import own_gpu_fixture

H100_Q = "nvidia-smi-q_h100-sxm-2gpu_550.144.03.txt"
L4_Q = "nvidia-smi-q_l4_555.42.06_pcie-gen1-of-4_x8-of-x16.txt"
A100_4_Q = "nvidia-smi-q_a100-sxm4-4gpu_450.80.02_single-double-bit-ecc-layout.txt"
NVLINK_A100 = "nvidia-smi-nvlink-s_a100-sxm4-2gpu_12x25GBs.txt"
IB_NDR = "ibstat_cx7-ndr400-2ib-active_eth-bond-up_2eth-down.txt"
IB_HDR4 = "ibstat_cx6-hdr200-4ib-active.txt"
LSPCI_ACS = "lspci-D-vvv_2gpu-1nic-pex8747_acs-redirect-on-2-ports.txt"
LSPCI_DENIED = "lspci-D-vvv_as-login-user_capabilities-access-denied.txt"
CMDLINE_ON = "proc-cmdline_intel-iommu-on_without-pt.txt"
CMDLINE_PT = "proc-cmdline_amd-iommu-on_iommu-pt.txt"


def read(name: str) -> str:
    return own_gpu_fixture(name).read_text(encoding="utf-8")


def perf(nodes: int, kind: str) -> str:
    """Our nccl-tests output over ``nodes`` 1-GPU nodes: healthy (net-ib-gdrdma), slow, or socket."""
    names = {"healthy": "net-ib-gdrdma", "slow": "net-ib_one-slow-node", "socket": "nccl-socket-fallback"}
    return read(f"all_reduce_perf_{nodes}node-1gpu_{names[kind]}_to-64M.txt")


def nvlinks(count: int, gbs: float = 25.0) -> list[dict]:
    """parse_nvlink_status's shape for GPUs of ``count`` active links each."""
    return [{"index": i, "name": "GPU", "uuid": "", "all_inactive": False,
             "links": [{"link": n, "speed_gbs": gbs, "active": True} for n in range(count)]} for i in range(2)]


def ib(*rates: float) -> dict:
    return {"ports": [{"ca": f"mlx5_{i}", "port": 1, "state": "Active", "physical_state": "LinkUp", "rate_gbps": r,
                       "link_layer": "InfiniBand"} for i, r in enumerate(rates)], "errors": []}


def cpu_links(gpus: int = 1) -> dict:
    """A node whose links the read cannot see (a container): only its ranks."""
    return hvd_bandwidth.node_links({"gpus": []}, [], None, False, [], gpus)


def runner(outputs: dict[int, str] | None = None, slow: str | None = None, kind: str = "healthy", rc: int = 0):
    """Stands in for the SSH to the first node: our recorded output for the run's rank count, slow where ``slow`` is
    among its -H hosts. Records (first node, shell)."""
    calls: list[tuple[str, str]] = []

    def execute(first: str, shell: str) -> tuple[int, str, float]:
        calls.append((first, shell))
        hosts = shlex.split(shell.split("exec ", 1)[1])[6]
        ranks = len(hosts.split(","))
        which = "slow" if slow and f"{slow}:" in hosts else kind
        return rc, (outputs or {}).get(ranks, perf(ranks, which) if ranks in (2, 3) else ""), 0.25

    return execute, calls
