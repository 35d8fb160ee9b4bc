#!/usr/bin/env python3
"""What a GPU node really has, read the way hvd_nvidia_driver, hvd_cuda, hvd_cudnn and hvd_nccl read it.

Standard library only (and the checkout's hvd_driver reader), so it runs with the node's own python3:

    python3 tests/gpu/collect_facts.py [--env /opt/hvd/env] [--check]

Prints one JSON document: the driver (kernel module loaded per /proc/driver/nvidia/version, user space installed
per the libnvidia-ml.so.<version> file name, nvidia-smi's GPUs with names and compute capabilities), CUDA (nvcc
--version, else CUDART_VERSION), cuDNN (cudnn_version.h), NCCL (nccl.h and its version code), the Python env's
view (torch's CUDA/NCCL/cuDNN, Horovod's nccl_built()) and the facts the roles recorded in /etc/ansible/facts.d.
With --check it exits 1 and names every disagreement (e.g. "Driver/library version mismatch").
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys

FACTS_DIR = "/etc/ansible/facts.d"
# the driver's versions are read by the product's own reader (standard library only), from this checkout
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "collections"))
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_driver import (  # noqa: E402
    find_nvml, installed_versions, loaded_version)


def run(cmd: list[str], timeout: int = 120) -> tuple[int, str]:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return proc.returncode, proc.stdout + proc.stderr


def read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def first_existing(paths: list[str]) -> str:
    return next((p for p in paths if os.path.exists(p)), "")


def header_version(path: str, prefix: str, fields: tuple[str, str, str]) -> str:
    text = read(path)
    parts = [re.search(rf"#define {prefix}{f}\s+(\d+)", text) for f in fields]
    return ".".join(m.group(1) for m in parts) if all(parts) else ""


def driver() -> dict:
    loaded_v = loaded_version(read("/proc/driver/nvidia/version"))
    installed = installed_versions(find_nvml("/"))
    gpus = []
    if shutil.which("nvidia-smi"):
        rc, out = run(["nvidia-smi", "--query-gpu=index,name,compute_cap,driver_version,memory.total,pci.bus_id",
                       "--format=csv,noheader"])
        if rc == 0:
            for line in out.strip().splitlines():
                f = [x.strip() for x in line.split(",")]
                if len(f) == 6:
                    gpus.append(dict(zip(("index", "name", "compute_cap", "driver", "memory", "pci_bus_id"), f)))
        else:
            gpus = [{"error": out.strip()[-300:]}]
    pci = sorted(os.path.basename(os.path.dirname(p)) for p in glob.glob("/sys/bus/pci/devices/*/vendor")
                 if read(p).strip() == "0x10de")
    return {
        "loaded": loaded_v,
        "installed": installed,
        "mismatch": bool(loaded_v and installed and loaded_v not in installed),
        "device_nodes": sorted(os.path.basename(p) for p in glob.glob("/dev/nvidia[0-9]*")),
        "pci_devices": pci,
        "gpus": gpus,
        "gpu_count": len([g for g in gpus if "name" in g]),
        "cuda_cc_list": ",".join(sorted({g["compute_cap"].replace(".", "") for g in gpus
                                         if re.match(r"^\d+\.\d+$", g.get("compute_cap", ""))})),
    }


def cuda(recorded: dict) -> dict:
    nvcc = first_existing([p for p in (recorded.get("nvcc", ""), shutil.which("nvcc") or "",
                                       "/usr/local/cuda/bin/nvcc") if p])
    version = ""
    if nvcc:
        m = re.search(r"release \S+, V(\d+(?:\.\d+)+)", run([nvcc, "--version"])[1])
        version = m.group(1) if m else ""
    if not version:
        home = recorded.get("home") or "/usr/local/cuda"
        m = re.search(r"#define CUDART_VERSION\s+(\d+)", read(os.path.join(home, "include", "cuda_runtime_api.h")))
        version = f"{int(m.group(1)) // 1000}.{int(m.group(1)) % 1000 // 10}" if m else ""
    return {"nvcc": nvcc, "version": version}


def nccl(recorded: dict) -> dict:
    header = first_existing([p for p in (recorded.get("header", ""), "/usr/include/nccl.h",
                                         "/usr/local/cuda/include/nccl.h", "/opt/hvd/nccl/include/nccl.h") if p])
    version = header_version(header, "NCCL_", ("MAJOR", "MINOR", "PATCH")) if header else ""
    code = 0
    if version:
        x, y, z = (int(v) for v in version.split("."))
        code = x * (10000 if (x, y) >= (2, 9) else 1000) + y * 100 + z
    libs = re.findall(r"libnccl\.so\.2 \([^)]*\) => (\S+)", run(["/sbin/ldconfig", "-p"])[1])
    return {"header": header, "version": version, "version_code": code, "ldconfig": libs}


def cudnn(recorded: dict) -> dict:
    arch = os.uname().machine
    header = first_existing([p for p in (recorded.get("header", ""), "/usr/include/cudnn_version.h",
                                         f"/usr/include/{arch}-linux-gnu/cudnn_version_v9.h",
                                         f"/usr/include/{arch}-linux-gnu/cudnn_version_v8.h",
                                         "/opt/hvd/cudnn/include/cudnn_version.h") if p])
    return {"header": header,
            "version": header_version(header, "CUDNN_", ("MAJOR", "MINOR", "PATCHLEVEL")) if header else ""}


ENV_PROBE = r"""
import json
out = {}
try:
    import torch
    out["torch"] = torch.__version__
    out["torch_cuda"] = torch.version.cuda
    out["cuda_available"] = torch.cuda.is_available()
    out["device_count"] = torch.cuda.device_count() if out["cuda_available"] else 0
    try:
        out["torch_nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception as exc:
        out["torch_nccl_error"] = str(exc)
    out["torch_cudnn"] = torch.backends.cudnn.version()
except Exception as exc:
    out["torch_error"] = str(exc)
try:
    import horovod.torch as hvd
    out["horovod_nccl_built"] = int(hvd.nccl_built())
except Exception as exc:
    out["horovod_error"] = str(exc)
print(json.dumps(out))
"""


def env(prefix: str) -> dict:
    python = os.path.join(prefix, "bin", "python")
    if not os.path.exists(python):
        return {"error": f"no env at {prefix}"}
    rc, out = run([python, "-c", ENV_PROBE])
    try:
        return json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": out.strip()[-500:]}


def recorded_facts() -> dict:
    facts = {}
    for path in sorted(glob.glob(os.path.join(FACTS_DIR, "hvd_*.fact"))):
        try:
            facts[os.path.basename(path)[:-5]] = json.loads(read(path))
        except ValueError:
            facts[os.path.basename(path)[:-5]] = {"error": "not JSON"}
    return facts


def problems(node: dict) -> list[str]:
    out = []
    drv, rec = node["driver"], node["recorded"]
    if not drv["pci_devices"] and not drv["device_nodes"]:
        out.append("no NVIDIA device (no PCI vendor 0x10de, no /dev/nvidia<N>)")
    if not drv["loaded"]:
        out.append("no NVIDIA kernel module loaded (/proc/driver/nvidia/version)")
    if drv["mismatch"]:
        out.append(f"Driver/library version mismatch: module {drv['loaded']} loaded, user space {drv['installed']}")
    if len(drv["installed"]) > 1:
        out.append(f"more than one driver user space installed: {drv['installed']}")
    if drv["gpu_count"] == 0:
        out.append(f"nvidia-smi lists no GPU: {drv['gpus']}")
    if rec.get("hvd_nvidia_driver", {}).get("reboot_required"):
        out.append("hvd_nvidia_driver recorded reboot_required")
    for name, live, fact in (("CUDA", node["cuda"]["version"], rec.get("hvd_cuda", {}).get("version")),
                             ("NCCL", node["nccl"]["version"], rec.get("hvd_nccl", {}).get("version")),
                             ("cuDNN", node["cudnn"]["version"], rec.get("hvd_cudnn", {}).get("version"))):
        if fact and live != fact:
            out.append(f"{name}: the node has {live or 'none'}, the role recorded {fact}")
    e = node["env"]
    if "error" in e or "torch_error" in e:
        out.append(f"env: {e}")
    else:
        if not e.get("cuda_available"):
            out.append("torch.cuda.is_available() is False")
        if e.get("horovod_nccl_built") != node["nccl"]["version_code"]:
            out.append(f"Horovod was built with NCCL code {e.get('horovod_nccl_built')}, "
                       f"nccl.h says {node['nccl']['version_code']}")
        if e.get("torch_nccl") and e["torch_nccl"] != node["nccl"]["version"]:
            out.append(f"PyTorch uses NCCL {e['torch_nccl']}, Horovod's nccl.h is {node['nccl']['version']}")
        if e.get("torch_cuda") and node["cuda"]["version"] and \
                e["torch_cuda"].split(".")[0] != node["cuda"]["version"].split(".")[0]:
            out.append(f"PyTorch is built for CUDA {e['torch_cuda']}, the toolkit is {node['cuda']['version']}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="/opt/hvd/env", help="the Python env hvd_pyenv made")
    parser.add_argument("--check", action="store_true", help="exit 1 naming every disagreement")
    args = parser.parse_args()
    rec = recorded_facts()
    node = {"host": os.uname().nodename, "recorded": rec, "driver": driver(),
            "cuda": cuda(rec.get("hvd_cuda", {})), "nccl": nccl(rec.get("hvd_nccl", {})),
            "cudnn": cudnn(rec.get("hvd_cudnn", {})), "env": env(args.env)}
    node["problems"] = problems(node)
    print(json.dumps(node, indent=2, sort_keys=True))
    if args.check and node["problems"]:
        for line in node["problems"]:
            print(f"collect_facts: {node['host']}: {line}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
