#!/usr/bin/env python3
"""This node's health read from its real GPU tools and judged by plugins/module_utils/hvd_health.py, the rules
`hvdcluster health` applies (run by run_gpu_checks.sh on a GPU machine; the rest of the suite judges recorded outputs).

    tests/gpu/health_check.py [--nccl-log allreduce.log] [--under-load]

Reads `nvidia-smi -q`, `nvidia-smi nvlink -s`, the kernel log (when readable), /sys/class/infiniband and
/proc/modules; with --nccl-log also the transport NCCL chose in that run. Prints one line per finding; exit 1 when
one of them is a failure.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

# the checkout's collections/ folder: ansible_collections/hvd/cluster is the checkout (stdlib only: no Ansible needed)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "collections"))
from ansible_collections.hvd.cluster.plugins.module_utils import hvd_bandwidth, hvd_health, hvd_health_gpu, hvd_health_net  # noqa: E402


def run(*argv: str) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nccl-log", help="a log of a run with NCCL_DEBUG=INFO")
    parser.add_argument("--under-load", action="store_true", help="judge the PCIe generation too")
    args = parser.parse_args()
    smi = hvd_health_gpu.parse_nvidia_smi_q(run("nvidia-smi", "-q"))
    listed = sum(line.startswith("GPU ") for line in run("nvidia-smi", "-L").splitlines())
    ib = hvd_health_net.parse_ib_sysfs() if Path("/sys/class/infiniband").is_dir() else {"ports": [], "errors": []}
    modules_file = Path("/proc/modules")
    modules = [line.split()[0] for line in (modules_file.read_text() if modules_file.exists() else "").splitlines()
               if line.strip()]
    findings = (hvd_health.check_gpu_count(smi, listed) + hvd_health.check_ecc(smi)
                + hvd_health.check_retired_pages(smi) + hvd_health.check_row_remap(smi)
                + hvd_health.check_pcie(smi, under_load=args.under_load) + hvd_health.check_persistence(smi)
                + hvd_health.check_nvlink(hvd_health_gpu.parse_nvlink_status(run("nvidia-smi", "nvlink", "-s")))
                + hvd_health.check_ib_ports(ib) + hvd_health.check_peermem(ib, modules, listed))
    kernel_log = run("journalctl", "-k", "-b", "--no-pager", "-q") or run("dmesg")
    if kernel_log:
        parsed = hvd_health_gpu.parse_kernel_log(kernel_log)
        findings += hvd_health.check_xid(parsed) + hvd_health.check_sxid(parsed)
    else:
        print("note: the kernel log could not be read (run as root to judge Xid events)")
    if args.nccl_log:
        nccl = hvd_bandwidth.parse_nccl_debug(Path(args.nccl_log).read_text(errors="replace"))
        print(f"nccl: transports {sorted(nccl.get('transports') or [])}")
        findings += hvd_bandwidth.check_nccl_transport(nccl, ib)
    print(f"{len(smi.get('gpus') or [])} GPUs read by nvidia-smi -q, {listed} listed, driver {smi.get('driver_version')}")
    for finding in findings:
        print(f"{finding['severity']} {finding['item']}: {finding['found']} (expected {finding['expected']}) - "
              f"{finding['fix']} [{finding['source']}]")
    failed = [f for f in findings if f["severity"] == "fail"]
    print(f"health: {len(failed)} failures, {len(findings) - len(failed)} warnings")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
