"""Health of a GPU node read from its tools' text: parsers, rules and the all_reduce bandwidth floor.

Parsers turn what ``nvidia-smi -q`` (text or ``-x`` XML), ``nvidia-smi nvlink -s``, the kernel log, ``ibstat`` or
``/sys/class/infiniband``, nccl-tests' ``all_reduce_perf``, an ``NCCL_DEBUG=INFO`` log, ``dcgmi diag``, the Fabric
Manager journal print into plain dicts and lists. Rules take those (and what the cluster expects)
and return findings, each ``{item, severity, found, expected, fix, source}``: ``item`` is a stable id
(``gpu.pcie_width.0000:07:00.0``), ``severity`` is ``fail`` or ``warn`` (as hvd_preflight's), ``source`` names where
the threshold or the meaning comes from. Numbers with a source live in ``THRESHOLDS``, one row each.

Stdlib only and Python 3.9+, without Ansible: it runs on nodes and the CLI loads it by path.
"""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from typing import Any, Iterable, Optional

FAIL = "fail"
WARN = "warn"

# Where the meanings and thresholds below come from (one short name each, like compat.yaml's anchors).
SOURCES = {
    "xid_catalog": "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html",
    "fabric_manager": "https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html",
    "page_retirement": "https://docs.nvidia.com/deploy/dynamic-page-retirement/index.html",
    "row_remap": "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html",
    "persistence": "https://docs.nvidia.com/deploy/driver-persistence/index.html",
    "pcie_link": "nvidia-smi(1) GPU Link Info; fixtures-gpu SOURCES.md, L4 row (Gen1 of 4 when idle is power saving)",
    "pcie_rates": "https://github.com/torvalds/linux/blob/master/drivers/pci/pci.h (PCIE_SPEED2MBS_ENC)",
    "ib_sysfs": "https://github.com/torvalds/linux/blob/master/drivers/infiniband/core/sysfs.c (state_show, rate_show)",
    "nvlink_a100": "fixtures-gpu/nvidia-smi-nvlink-s_a100-sxm4-80gb-8gpu_12x25GBs.txt (12 links x 25 GB/s)",
    "nvlink_h100": "https://docs.nvidia.com/health-validation/reference/checks/nvlink (H100: 18 links x 26562 MB/s);"
                   " https://github.com/NVIDIA/nccl-tests/issues/212 (NVLink4: 450 GB/s line rate, 18 links)",
    "nvlink_v100": "fixtures-gpu/nvidia-smi-nvlink-s_v100-sxm2-32gb_2-links-inactive_excerpt.txt (25.781 GB/s a link)",
    "nvlink_5": "https://www.nvidia.com/en-us/data-center/nvlink/ (NVLink 5: 1.8 TB/s a GPU over 18 links)",
    "busbw": "https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md",
    "busbw_nvlink": "https://github.com/NVIDIA/nccl-tests/issues/175 (8 x A100: 232.5 GB/s of 300);"
                    " https://github.com/NVIDIA/nccl-tests/issues/212 (8 x H100: ~370 ring, ~480 NVLS of 450)",
    "busbw_net": "https://github.com/NVIDIA/nccl-tests/issues/119 (24 GB/s a 200G NIC, 96% of line);"
                 " https://github.com/NVIDIA/nccl-tests/issues/29 (12.2 GB/s a 100G NIC)",
    "busbw_pcie": "https://github.com/NVIDIA/nccl/issues/1639 (8 x RTX 5090 on PCIe Gen5 x16: 28 GB/s, 44% of line)",
    "busbw_large": "https://github.com/NVIDIA/nccl-tests/issues/212 ('256M is too small to reach peak')",
    "nccl_net": "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html",
    "dcgm_diag": "https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html",
    "peermem": "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/1.9.1/gpu-operator-rdma.html"
               " (nvidia-peermem: GPUDirect RDMA for InfiniBand HCAs, in the driver since R470)",
    "nvlink_speeds": "https://docs.nvidia.com/health-validation/reference/checks/nvlink (nvlink_bandwidth_count_speed:"
                     " 18 links a GPU, H100 26562 MB/s a link, GB200 and GB300 53125 MB/s)",
    "nvswitch": "https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html (NVSwitch systems: every"
                " GPU reaches every other over all its NVLinks at once, through the NVSwitches)",
    "nvlink_mesh": "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting/gpu_troubleshooting.html"
                   " (without NVSwitch, GPU pairs without an NVLink between them talk over PCIe: nvidia-smi topo -m)",
    "acs": "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html#pci-access-control-services-acs"
           " (ACS redirects PCI peer-to-peer traffic to the CPU root complex: lspci -vvv | grep ACSCtl, SrcValid+)",
    "acs_bits": "https://github.com/pciutils/pciutils/blob/master/ls-ecaps.c (cap_acs: ACSCtl bits SrcValid, TransBlk,"
                " ReqRedir, CmpltRedir, UpstreamFwd, EgressCtrl, DirectTrans = bits 0-6 of the control register at +6)",
    "iommu": "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html#pci-access-control-services-acs"
             " (IO virtualization, VT-d or IOMMU, can interfere with GPU Direct); "
             "https://www.kernel.org/doc/html/latest/admin-guide/kernel-parameters.html (intel_iommu=, amd_iommu=,"
             " iommu=pt: DMA passthrough)",
    "iommu_groups": "https://www.kernel.org/doc/Documentation/ABI/testing/sysfs-kernel-iommu_groups"
                    " (/sys/kernel/iommu_groups/<n>/type: identity is passthrough, DMA and DMA-FQ translate)",
    "nccl_gdr": "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-net-gdr-level-formerly-nccl-ib"
                "-gdr-level (NCCL uses GPUDirect RDMA only where GPU and NIC are close enough: NCCL_NET_GDR_LEVEL)",
}


def _pcie_lane(gen: int, mega_transfers: int, payload: int, coded: int) -> dict[str, Any]:
    """A PCIe generation's lane rate row: Mb/s as the kernel computes it (MT/s x line code, integer), in GB/s."""
    return {"id": f"pcie.{gen}.lane_gbs", "value": mega_transfers * payload // coded / 8000, "unit": "GB/s a lane",
            "source": SOURCES["pcie_rates"]}


# The threshold table: every number a rule or the floor uses, with where it comes from.
THRESHOLDS: list[dict[str, Any]] = [
    {"id": "nvlink.2.link_gbs", "value": 25.0, "unit": "GB/s each way", "source": SOURCES["nvlink_v100"]},
    {"id": "nvlink.3.link_gbs", "value": 25.0, "unit": "GB/s each way", "source": SOURCES["nvlink_a100"]},
    {"id": "nvlink.4.link_gbs", "value": 25.0, "unit": "GB/s each way", "source": SOURCES["nvlink_h100"]},
    {"id": "nvlink.5.link_gbs", "value": 50.0, "unit": "GB/s each way", "source": SOURCES["nvlink_5"]},
    *(_pcie_lane(gen, rate, payload, coded) for gen, rate, payload, coded in
      [(1, 2500, 8, 10), (2, 5000, 8, 10), (3, 8000, 128, 130), (4, 16000, 128, 130), (5, 32000, 128, 130)]),
    {"id": "net.gbit_to_gbyte", "value": 1 / 8, "unit": "GB/s per Gb/s", "source": SOURCES["ib_sysfs"]},
    # Efficiencies sit below what healthy runs in the sources reached: a gate against a degraded path (a link down,
    # a fallback to sockets), not a tuning target.
    {"id": "efficiency.nvlink", "value": 0.7, "unit": "busbw / line rate", "source": SOURCES["busbw_nvlink"]},
    {"id": "efficiency.net", "value": 0.8, "unit": "busbw / line rate", "source": SOURCES["busbw_net"]},
    {"id": "efficiency.pcie", "value": 0.3, "unit": "busbw / line rate", "source": SOURCES["busbw_pcie"]},
    {"id": "busbw.large_bytes", "value": 1 << 30, "unit": "bytes", "source": SOURCES["busbw_large"]},
]

# NVIDIA's Xid catalog (SOURCES["xid_catalog"]; Volta and older: https://docs.nvidia.com/deploy/xid-errors/):
# code -> what it means and the usual action. `warn`: usually the application's; `fail`: the GPU needs a reset,
# a reboot or a replacement.
XID_MEANING: dict[int, dict[str, str]] = {
    13: {"name": "Graphics Engine Exception", "severity": WARN,
         "meaning": "a kernel hit an illegal instruction or address (usually the application)",
         "action": "restart the application; if it recurs with other jobs on this GPU only, run dcgmi diag -r 3"},
    31: {"name": "GPU memory page fault", "severity": WARN,
         "meaning": "an illegal memory access by the application (MMU fault)",
         "action": "restart the application; if it recurs with other jobs on this GPU only, run dcgmi diag -r 3"},
    43: {"name": "GPU stopped processing", "severity": WARN,
         "meaning": "a channel of the application faulted and was stopped",
         "action": "restart the application"},
    45: {"name": "Preemptive cleanup, due to previous errors", "severity": WARN,
         "meaning": "the driver tore down channels after an earlier error or a killed process",
         "action": "read the Xid logged before it; none needed by itself"},
    48: {"name": "Double Bit ECC Error", "severity": FAIL,
         "meaning": "an uncorrectable (double bit) memory error",
         "action": "drain the GPU and reset it (nvidia-smi -r) or reboot; RMA if DBEs recur"},
    61: {"name": "Internal micro-controller breakpoint/warning", "severity": FAIL,
         "meaning": "the GPU's internal micro-controller stopped at a breakpoint",
         "action": "reset the GPU or reboot; report it to NVIDIA if it recurs"},
    62: {"name": "Internal micro-controller halt", "severity": FAIL,
         "meaning": "the GPU's internal micro-controller halted",
         "action": "reset the GPU or reboot; update the driver and report it if it recurs"},
    63: {"name": "ECC page retirement or row remapping recording event", "severity": WARN,
         "meaning": "a page was retired or a row marked for remapping; it takes effect at the next GPU reset",
         "action": "reset the GPU (or reboot) once its jobs end, so the remap takes effect"},
    64: {"name": "ECC page retirement or row remapper recording failure", "severity": FAIL,
         "meaning": "a page could not be retired or the bank has no spare rows left",
         "action": "drain the GPU and reset it; if Xid 64 comes back, the GPU needs an RMA"},
    68: {"name": "NVDEC0 Exception", "severity": WARN,
         "meaning": "the video decoder engine faulted",
         "action": "restart the application; run dcgmi diag if it recurs"},
    69: {"name": "Graphics Engine class error", "severity": WARN,
         "meaning": "the application sent the graphics engine an invalid command",
         "action": "restart the application"},
    74: {"name": "NVLink Error", "severity": FAIL,
         "meaning": "an NVLink link error (CRC, replay or a link gone down)",
         "action": "reset the GPU; check nvidia-smi nvlink -s and -e; reseat or RMA if links stay down"},
    79: {"name": "GPU has fallen off the bus", "severity": FAIL,
         "meaning": "the GPU no longer answers on PCIe",
         "action": "drain the node and reboot it; check the slot, power and cooling; RMA if it recurs"},
    92: {"name": "High single-bit ECC error rate", "severity": WARN,
         "meaning": "correctable memory errors at a high rate",
         "action": "watch the counters; run dcgmi diag -r 3; RMA if the rate persists"},
    94: {"name": "Contained ECC error", "severity": WARN,
         "meaning": "an uncorrectable memory error, contained to the application that touched it",
         "action": "restart the affected application; reset the GPU when its jobs end to remap the row"},
    95: {"name": "Uncontained ECC error", "severity": FAIL,
         "meaning": "an uncorrectable memory error that could not be contained: every process on the GPU is hit",
         "action": "drain the GPU and reset it (or reboot); RMA if it recurs"},
    119: {"name": "GSP RPC Timeout", "severity": FAIL,
          "meaning": "the GPU System Processor firmware stopped answering the driver",
          "action": "reset the GPU or reboot; update the driver if it recurs"},
    120: {"name": "GSP Error", "severity": FAIL,
          "meaning": "the code running on the GPU System Processor failed",
          "action": "reset the GPU or reboot; update the driver if it recurs"},
    154: {"name": "GPU Recovery Action Changed", "severity": FAIL,
          "meaning": "the driver names the recovery the GPU now needs (in the message)",
          "action": "do what the message names (reset the GPU, reboot the node, or drain and reset)"},
}

_NA = ("N/A", "", "[N/A]", "Not Supported", "[Not Supported]")


def threshold(row_id: str) -> dict[str, Any]:
    """THRESHOLDS' row ``row_id`` (KeyError names it when there is none)."""
    for row in THRESHOLDS:
        if row["id"] == row_id:
            return row
    raise KeyError(f"no threshold row {row_id!r}")


def _finding(item: str, severity: str, found: str, expected: str, fix: str, source: str) -> dict[str, str]:
    return {"item": item, "severity": severity, "found": found, "expected": expected, "fix": fix, "source": source}


def _int(value: Any) -> Optional[int]:
    """The leading integer of a reading ("16x" -> 16, "4" -> 4); None for N/A and the like."""
    match = re.match(r"\s*(\d+)", str(value)) if value is not None else None
    return int(match.group(1)) if match else None


def _flag(value: Any) -> Optional[bool]:
    """Yes/Enabled -> True, No/Disabled -> False, N/A (or missing) -> None."""
    text = str(value or "").strip().lower()
    if text in ("yes", "enabled", "true", "1"):
        return True
    if text in ("no", "disabled", "false", "0"):
        return False
    return None


def bus_id(text: str) -> str:
    """A PCI address in one spelling, lower case: ``0000:07:00.0`` from ``00000000:07:00.0``, ``PCI:0000:0f:00``."""
    match = re.search(r"([0-9a-fA-F]+):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.([0-7]))?", text)
    if not match:
        return text.strip().lower()
    domain, bus, device, function = match.groups()
    return f"{int(domain, 16):04x}:{bus.lower()}:{device.lower()}.{function or '0'}"


# ------------------------------------------------------------------------------------------ nvidia-smi -q


def _indent_tree(lines: Iterable[str]) -> dict[str, Any]:
    """``Key : value`` lines nested by indentation into dicts (a section is a key without a value; first one wins)."""
    root: dict[str, Any] = {}
    stack: list[tuple[int, dict[str, Any]]] = [(-1, root)]
    for raw in lines:
        body = raw.strip()
        if not body:
            continue
        indent = len(raw) - len(raw.lstrip())
        while stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        key, sep, value = body.partition(" : ") if " : " in body else body.partition(":")
        if sep:
            parent.setdefault(key.strip(), value.strip())
            continue
        child: dict[str, Any] = {}
        if body not in parent:
            parent[body] = child
        stack.append((indent, child))
    return root


def _get(tree: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(tree, dict):
            return None
        tree = tree.get(key)
    return tree


def _uncorrectable(section: Any) -> Optional[int]:
    """The sum of a volatile/aggregate ECC section's uncorrectable counters (None when all are N/A)."""
    if not isinstance(section, dict):
        return None
    if "Double Bit" in section:  # drivers before the SRAM/DRAM split
        return _int(_get(section, "Double Bit", "Total"))
    counts = [_int(value) for key, value in section.items() if "Uncorrectable" in key and not isinstance(value, dict)]
    counts = [count for count in counts if count is not None]
    return sum(counts) if counts else None


def _gpu_from_text(header: str, tree: dict[str, Any]) -> dict[str, Any]:
    link = _get(tree, "PCI", "GPU Link Info") or {}
    retired = tree.get("Retired Pages") or {}
    remap = tree.get("Remapped Rows")
    return {
        "bus_id": bus_id(_get(tree, "PCI", "Bus Id") or header),
        "name": tree.get("Product Name"),
        "persistence_mode": _flag(tree.get("Persistence Mode")),
        "ecc_mode": _get(tree, "ECC Mode", "Current"),
        "ecc_uncorrectable": {"volatile": _uncorrectable(_get(tree, "ECC Errors", "Volatile")),
                              "aggregate": _uncorrectable(_get(tree, "ECC Errors", "Aggregate"))},
        "retired_pages": {"single_bit": _int(retired.get("Single Bit ECC")),
                          "double_bit": _int(retired.get("Double Bit ECC")),
                          "pending": _flag(retired.get("Pending Page Blacklist") or retired.get("Pending"))},
        "remapped_rows": {"correctable": _int(_get(remap, "Correctable Error")),
                          "uncorrectable": _int(_get(remap, "Uncorrectable Error")),
                          "pending": _flag(_get(remap, "Pending")),
                          "failure": _flag(_get(remap, "Remapping Failure Occurred"))},
        "pcie": {"gen_current": _int(_get(link, "PCIe Generation", "Current")),
                 "gen_max": _int(_get(link, "PCIe Generation", "Max")),
                 "width_current": _int(_get(link, "Link Width", "Current")),
                 "width_max": _int(_get(link, "Link Width", "Max"))},
    }


def parse_nvidia_smi_q(text: str) -> dict[str, Any]:
    """``nvidia-smi -q`` (or ``-a``, or ``-q -d SECTION``): driver and CUDA versions and one dict per GPU.

    A GPU: bus_id, name, persistence_mode (bool), ecc_mode, ecc_uncorrectable {volatile, aggregate},
    retired_pages {single_bit, double_bit, pending}, remapped_rows {correctable, uncorrectable, pending, failure},
    pcie {gen_current, gen_max, width_current, width_max}; None where the output says N/A or lacks the section.
    """
    head: list[str] = []
    blocks: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("="):
            continue
        if line.startswith("GPU "):
            blocks.append((line[4:].strip(), []))
        elif blocks:
            blocks[-1][1].append(line)
        else:
            head.append(line)
    top = _indent_tree(head)
    return {"driver_version": top.get("Driver Version"), "cuda_version": top.get("CUDA Version"),
            "attached_gpus": _int(top.get("Attached GPUs")),
            "gpus": [_gpu_from_text(header, _indent_tree(lines)) for header, lines in blocks]}


def _xml_text(node: Optional[ET.Element], path: str) -> Optional[str]:
    found = node.find(path) if node is not None else None
    return found.text.strip() if found is not None and found.text else None


def _xml_uncorrectable(section: Optional[ET.Element]) -> Optional[int]:
    if section is None:
        return None
    if section.find("double_bit") is not None:
        return _int(_xml_text(section, "double_bit/total"))
    counts = [_int(child.text) for child in section if "uncorrectable" in child.tag]
    counts = [count for count in counts if count is not None]
    return sum(counts) if counts else None


def _gpu_from_xml(gpu: ET.Element) -> dict[str, Any]:
    link = gpu.find("pci/pci_gpu_link_info")
    retired = gpu.find("retired_pages")
    remap = gpu.find("remapped_rows")
    return {
        "bus_id": bus_id(_xml_text(gpu, "pci/pci_bus_id") or gpu.get("id", "")),
        "name": _xml_text(gpu, "product_name"),
        "persistence_mode": _flag(_xml_text(gpu, "persistence_mode")),
        "ecc_mode": _xml_text(gpu, "ecc_mode/current_ecc"),
        "ecc_uncorrectable": {"volatile": _xml_uncorrectable(gpu.find("ecc_errors/volatile")),
                              "aggregate": _xml_uncorrectable(gpu.find("ecc_errors/aggregate"))},
        "retired_pages": {"single_bit": _int(_xml_text(retired, "multiple_single_bit_retirement/retired_count")),
                          "double_bit": _int(_xml_text(retired, "double_bit_retirement/retired_count")),
                          "pending": _flag(_xml_text(retired, "pending_retirement")
                                           or _xml_text(retired, "pending_blacklist"))},
        "remapped_rows": {"correctable": _int(_xml_text(remap, "remapped_row_corr")),
                          "uncorrectable": _int(_xml_text(remap, "remapped_row_unc")),
                          "pending": _flag(_xml_text(remap, "remapped_row_pending")),
                          "failure": _flag(_xml_text(remap, "remapped_row_failure"))},
        "pcie": {"gen_current": _int(_xml_text(link, "pcie_gen/current_link_gen")),
                 "gen_max": _int(_xml_text(link, "pcie_gen/max_link_gen")),
                 "width_current": _int(_xml_text(link, "link_widths/current_link_width")),
                 "width_max": _int(_xml_text(link, "link_widths/max_link_width"))},
    }


def parse_nvidia_smi_q_xml(text: str) -> dict[str, Any]:
    """``nvidia-smi -q -x``: the same shape as parse_nvidia_smi_q."""
    root = ET.fromstring(re.sub(r"<!DOCTYPE[^>]*>", "", text, count=1))
    return {"driver_version": _xml_text(root, "driver_version"), "cuda_version": _xml_text(root, "cuda_version"),
            "attached_gpus": _int(_xml_text(root, "attached_gpus")),
            "gpus": [_gpu_from_xml(gpu) for gpu in root.findall("gpu")]}


# ------------------------------------------------------------------------------------------ nvidia-smi nvlink -s

_NVLINK_GPU = re.compile(r"^GPU (\d+): (.*?)\s*\(UUID: ([^)]*)\)")
_NVLINK_LINK = re.compile(r"^\s+Link (\d+): (?:([\d.]+) GB/s|<inactive>)")


def parse_nvlink_status(text: str) -> list[dict[str, Any]]:
    """``nvidia-smi nvlink -s``: per GPU {index, name, uuid, links: [{link, speed_gbs, active}], all_inactive}.

    ``all_inactive`` is set when NVML says it cannot read NVLink because every link is inactive.
    """
    gpus: list[dict[str, Any]] = []
    for line in text.splitlines():
        head = _NVLINK_GPU.match(line)
        link = _NVLINK_LINK.match(line)
        if head:
            gpus.append({"index": int(head.group(1)), "name": head.group(2), "uuid": head.group(3), "links": [],
                         "all_inactive": False})
        elif link and gpus:
            speed = float(link.group(2)) if link.group(2) else None
            gpus[-1]["links"].append({"link": int(link.group(1)), "speed_gbs": speed, "active": speed is not None})
        elif "all links are inactive" in line and gpus:
            gpus[-1]["all_inactive"] = True
    return gpus


# ------------------------------------------------------------------------------------------ kernel log

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+), (.*)$")
_SXID = re.compile(r"(nvidia-nvswitch\d*): SXid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+), (.*)$")
_PID = re.compile(r"pid=([^,]*), name=([^,]*), (.*)$")


def parse_kernel_log(text: str) -> dict[str, list[dict[str, Any]]]:
    """Xid and SXid events in dmesg or journal lines.

    ``xid``: [{bus_id, code, pid, process, message}]; ``sxid``: [{switch, bus_id, code, severity, message}] where
    severity is ``Fatal``/``Non-fatal`` when the line says so (NVSwitch detail lines say neither: None).
    """
    xids: list[dict[str, Any]] = []
    sxids: list[dict[str, Any]] = []
    for line in text.splitlines():
        sxid = _SXID.search(line)
        xid = _XID.search(line)
        if sxid:
            message = sxid.group(4)
            severity = next((word for word in ("Non-fatal", "Fatal") if message.startswith(word + ",")), None)
            sxids.append({"switch": sxid.group(1), "bus_id": bus_id(sxid.group(2)), "code": int(sxid.group(3)),
                          "severity": severity, "message": message})
        elif xid:
            pid = _PID.match(xid.group(3))
            xids.append({"bus_id": bus_id(xid.group(1)), "code": int(xid.group(2)),
                         "pid": pid.group(1).strip("'") if pid else None, "process": pid.group(2) if pid else None,
                         "message": pid.group(3) if pid else xid.group(3)})
    return {"xid": xids, "sxid": sxids}


# ------------------------------------------------------------------------------------------ InfiniBand


def _port(ca: str, port: int, state: str, physical: str, rate: Optional[float], layer: str) -> dict[str, Any]:
    return {"ca": ca, "port": port, "state": state, "physical_state": physical, "rate_gbps": rate,
            "link_layer": layer}


def parse_ibstat(text: str) -> dict[str, list]:
    """``ibstat``: {ports: [{ca, port, state, physical_state, rate_gbps, link_layer, ca_type}], errors: [lines]}.

    ``errors`` holds ibstat's own complaints (``ibpanic: ...``), after which its output is partial.
    """
    ports: list[dict[str, Any]] = []
    errors: list[str] = []
    ca, ca_type, fields = "", "", {}
    for line in text.splitlines():
        body = line.strip()
        head = re.match(r"CA '([^']+)'", body)
        if head:
            ca, ca_type = head.group(1), ""
        elif body.startswith("CA type:"):
            ca_type = body.partition(":")[2].strip()
        elif re.match(r"Port \d+:$", body):
            fields = {"port": int(body[5:-1])}
        elif ":" in body and "port" in fields and not body.startswith("ibpanic"):
            key, dummy, value = body.partition(":")
            fields[key.strip()] = value.strip()
            if key.strip() == "Link layer":
                ports.append(dict(_port(ca, fields["port"], fields.get("State", ""),
                                        fields.get("Physical state", ""), _float(fields.get("Rate")), value.strip()),
                                  ca_type=ca_type))
                fields = {}
        if body.startswith("ibpanic") or "failed:" in body:
            errors.append(body)
    return {"ports": ports, "errors": errors}


def _float(value: Any) -> Optional[float]:
    match = re.match(r"\s*([\d.]+)", str(value)) if value is not None else None
    return float(match.group(1)) if match else None


# sysfs spells states as "4: ACTIVE"; ibstat as "Active". The physical states are the same words in both.
_SYSFS_STATE = {"DOWN": "Down", "INIT": "Initializing", "ARMED": "Armed", "ACTIVE": "Active",
                "ACTIVE_DEFER": "ActiveDefer", "NOP": "Nop"}


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def parse_ib_sysfs(root: str = "/sys/class/infiniband") -> dict[str, list]:
    """``/sys/class/infiniband/<ca>/ports/<n>/{state,phys_state,rate,link_layer}``: parse_ibstat's shape.

    The files read ``4: ACTIVE``, ``5: LinkUp``, ``400 Gb/sec (4X NDR)``, ``InfiniBand`` (SOURCES["ib_sysfs"]).
    """
    ports: list[dict[str, Any]] = []
    errors: list[str] = []
    if not os.path.isdir(root):
        return {"ports": ports, "errors": [f"{root} is missing (no RDMA driver loaded)"]}
    for ca in sorted(os.listdir(root)):
        port_dir = os.path.join(root, ca, "ports")
        for port in sorted(os.listdir(port_dir), key=int) if os.path.isdir(port_dir) else []:
            base = os.path.join(port_dir, port)
            state = _read(os.path.join(base, "state")).partition(": ")[2]
            physical = _read(os.path.join(base, "phys_state")).partition(": ")[2]
            ports.append(_port(ca, int(port), _SYSFS_STATE.get(state, state), physical,
                               _float(_read(os.path.join(base, "rate"))), _read(os.path.join(base, "link_layer"))))
    return {"ports": ports, "errors": errors}


# ------------------------------------------------------------------------------------------ nccl-tests

_MPI_TAG = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:")
_RANK = re.compile(r"^#\s+Rank\s+(\d+)\s.*?Pid\s+\d+ on\s+(\S+) device\s+(\d+) \[([^\]]*)\] (.*)$")
_AVG = re.compile(r"^# Avg bus bandwidth\s*:\s*([\d.]+)")
_OOB = re.compile(r"^# Out of bounds values\s*:\s*(\d+)\s+(\w+)")


def _strip_tag(line: str) -> str:
    """A line without mpirun's ``[1,0]<stdout>:`` prefix."""
    return _MPI_TAG.sub("", line)


def _perf_row(tokens: list[str]) -> Optional[dict[str, Any]]:
    """One size row: 13 columns with ``root`` (nccl-tests 2.10+), 12 without."""
    if len(tokens) not in (12, 13) or not (tokens[0].isdigit() and tokens[1].isdigit()):
        return None
    rest = tokens[5:] if len(tokens) == 13 else tokens[4:]
    try:
        out_busbw, in_busbw = float(rest[2]), float(rest[6])
    except ValueError:
        return None
    return {"size": int(tokens[0]), "count": int(tokens[1]), "type": tokens[2], "redop": tokens[3],
            "busbw_out": out_busbw, "busbw_in": in_busbw, "algbw_out": float(rest[1]), "algbw_in": float(rest[5]),
            "wrong": sum(_int(value) or 0 for value in (rest[3], rest[7]))}


def parse_all_reduce_perf(text: str) -> dict[str, Any]:
    """nccl-tests' ``all_reduce_perf`` output (any rank count, mpirun-tagged or not).

    {rows: [{size, count, type, redop, algbw_out, busbw_out, algbw_in, busbw_in, wrong}], avg_busbw,
    ranks: [{rank, host, device, bus_id, name}], out_of_bounds_ok, errors: [lines]}. ``errors``: the test's
    failure lines (``Test CUDA failure ...``, ``NCCL WARN``, a FAILED bounds check); a run with none and no
    ``Avg bus bandwidth`` line did not finish.
    """
    result: dict[str, Any] = {"rows": [], "avg_busbw": None, "ranks": [], "out_of_bounds_ok": None, "errors": []}
    for raw in text.splitlines():
        line = _strip_tag(raw).rstrip()
        rank, avg, oob = _RANK.match(line), _AVG.match(line), _OOB.match(line)
        row = None if line.startswith("#") else _perf_row(line.split())
        if rank:
            result["ranks"].append({"rank": int(rank.group(1)), "host": rank.group(2), "device": int(rank.group(3)),
                                    "bus_id": rank.group(4), "name": rank.group(5).strip()})
        elif avg:
            result["avg_busbw"] = float(avg.group(1))
        elif oob:
            result["out_of_bounds_ok"] = oob.group(2) == "OK"
            if oob.group(2) != "OK":
                result["errors"].append(line)
        elif row:
            result["rows"].append(row)
        elif not line.startswith("#") and re.search(r"failure|FAILED|NCCL WARN|\berror\b", line):
            result["errors"].append(line.strip())
    return result


def measured_bus_bandwidth(result: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The bus bandwidth a run reached at large sizes: {busbw, size}, or None without rows.

    "Avg bus bandwidth" averages every size, small ones too, so it understates a link; this takes the best busbw
    of the rows at least ``busbw.large_bytes`` big, or of the largest size when the run stopped below it.
    """
    rows = result.get("rows") or []
    if not rows:
        return None
    large = [row for row in rows if row["size"] >= threshold("busbw.large_bytes")["value"]]
    if not large:
        biggest = max(row["size"] for row in rows)
        large = [row for row in rows if row["size"] == biggest]
    best = max(large, key=lambda row: max(row["busbw_out"], row["busbw_in"]))
    return {"busbw": max(best["busbw_out"], best["busbw_in"]), "size": best["size"]}


# ------------------------------------------------------------------------------------------ NCCL_DEBUG=INFO

_VIA = re.compile(r"\bvia (\S+)")


def _transport(via: str) -> str:
    """``NET/IB/1/GDRDMA`` -> ``NET/IB``; ``P2P/IPC/read`` -> ``P2P/IPC``; ``SHM/direct/direct`` -> ``SHM``."""
    parts = via.split("/")
    if parts[0] == "NET" and len(parts) > 1:
        return "NET/" + parts[1]
    if parts[0] == "P2P" and len(parts) > 1:
        return "P2P/" + parts[1]
    return parts[0]


def parse_nccl_debug(text: str) -> dict[str, Any]:
    """An ``NCCL_DEBUG=INFO`` log: which network and transports NCCL chose, and whether it found IB.

    {version, network ("IB", "Socket", a plugin's name; None when not logged), ib_detected, ib_devices,
    ib_no_device, transports (sorted: NET/IB, NET/Socket, P2P/IPC, SHM, NVLS ...), gdrdma, nvls_available,
    warnings: [NCCL WARN lines]}.
    """
    info: dict[str, Any] = {"version": None, "network": None, "ib_detected": False, "ib_devices": [],
                            "ib_no_device": False, "transports": [], "gdrdma": False, "nvls_available": False,
                            "warnings": []}
    transports: set[str] = set()
    for raw in text.splitlines():
        line = _strip_tag(raw)
        version = re.search(r"NCCL version (\S+)", line)
        network = re.search(r"NCCL INFO Using network (.+?)\s*$", line)
        ib_using = re.search(r"NET/IB ?: Using (.*?)(?: \[RO\])?;", line)
        if version:
            info["version"] = version.group(1)
        if network:
            info["network"] = network.group(1)
        if ib_using:
            info["ib_detected"] = True
            info["ib_devices"] = re.findall(r"\[\d+\](\S+)", ib_using.group(1))
        if "NET/IB : No device found" in line:
            info["ib_no_device"] = True
        if "NVLS multicast support is available" in line:
            info["nvls_available"] = True
        if "Connected NVLS" in line:
            transports.add("NVLS")
        for via in _VIA.findall(line):
            transports.add(_transport(via))
            info["gdrdma"] = info["gdrdma"] or "/GDRDMA" in via
        if "NCCL WARN" in line:
            info["warnings"].append(line.strip())
    if info["network"]:
        transports.add("NET/" + info["network"])
    info["transports"] = sorted(transports)
    return info


# ------------------------------------------------------------------------------------------ DCGM diagnostics

_DETAIL_ROWS = ("Error", "Warning", "Info")


def _dcgm_cell(cell: str) -> str:
    """A result cell's text without its padding (one space before, two after: dcgmi wraps at a fixed width)."""
    return cell[1:-2] if len(cell) > 3 else cell.strip()


def _dcgm_rows(text: str) -> list[tuple[str, str, str]]:
    """(category, name, value) per table row, wrapped values joined back."""
    rows: list[list[str]] = []
    category = ""
    for line in text.splitlines():
        header = re.match(r"^[|+]-+\s+(\w[\w ]*?)\s+-+\+", line)
        if header:
            category = header.group(1)
            continue
        cells = line.split("|")
        if len(cells) != 4 or line.startswith("+"):
            continue
        name, value = cells[1].strip(), _dcgm_cell(cells[2])
        if name:
            rows.append([category, name, value])
        elif rows:
            rows[-1][2] += value
    return [(category, name, " ".join(value.split())) for category, name, value in rows]


def _diag_result(tests: list[dict[str, Any]], metadata: dict[str, str]) -> dict[str, Any]:
    failed = [test for test in tests if test["result"].lower().startswith("fail")]
    return {"passed": bool(tests) and not failed, "metadata": metadata, "tests": tests,
            "failed": [test["name"] for test in failed]}


def parse_dcgmi_diag(text: str) -> dict[str, Any]:
    """``dcgmi diag -r N`` (the table): {passed, metadata, tests: [{category, name, result, details}], failed}.

    ``details`` are the Error/Warning/Info rows printed under a test. A table printed twice counts once.
    """
    metadata: dict[str, str] = {}
    tests: dict[tuple[str, str], dict[str, Any]] = {}
    last: Optional[dict[str, Any]] = None
    for category, name, value in _dcgm_rows(text):
        if category == "Metadata":
            metadata[name] = value
        elif name in _DETAIL_ROWS and last is not None:
            last["details"].append(f"{name}: {value}")
        elif name != "Diagnostic":
            last = {"category": category, "name": name, "result": value, "details": []}
            tests[(category, name)] = last
    return _diag_result(list(tests.values()), metadata)


def _json_details(result: dict[str, Any]) -> list[str]:
    details = []
    for key in ("warnings", "info"):
        for entry in result.get(key) or []:
            text = entry.get("warning") or entry.get("info") if isinstance(entry, dict) else entry
            details.append(f"{key}: {text}")
    return details


def parse_dcgmi_diag_json(text: str) -> dict[str, Any]:
    """``dcgmi diag -r N -j`` (DCGM 3.x shape, anything before the first ``{`` skipped): parse_dcgmi_diag's shape.

    A test's result is its worst status over its per-GPU results (FAIL > WARN > PASS > SKIP).
    """
    document = json.loads(text[text.index("{"):])
    body = document.get("DCGM GPU Diagnostic", document)
    order = ["SKIP", "PASS", "WARN", "FAIL"]
    tests = []
    for category in body.get("test_categories") or []:
        for test in category.get("tests") or []:
            if not test:
                continue
            results = [result for result in test.get("results") or [] if result]
            statuses = [str(result.get("status", "")).upper() for result in results]
            worst = max(statuses, key=lambda status: order.index(status) if status in order else 0, default="")
            tests.append({"category": category.get("category", ""), "name": test.get("name", ""),
                          "result": worst.capitalize(),
                          "details": [detail for result in results for detail in _json_details(result)]})
    return _diag_result(tests, {"DCGM Version": body.get("version", "")})


# ------------------------------------------------------------------------------------------ Fabric Manager

_FM_MISMATCH = re.compile(r"driver interface version (\S+) don't match with driver version ([^\s.]+(?:\.\d+)*)")


def parse_fabricmanager_log(text: str) -> dict[str, Any]:
    """Fabric Manager journal or log lines: {fm_version, driver_version, mismatch, failed, errors: [lines]}.

    ``driver_version`` is only known from a mismatch line; ``failed``: the unit exited with a failure.
    """
    info: dict[str, Any] = {"fm_version": None, "driver_version": None, "mismatch": False, "failed": False,
                            "errors": []}
    for line in text.splitlines():
        mismatch = _FM_MISMATCH.search(line)
        running = re.search(r"Fabric Manager version (\S+) is running", line)
        if mismatch:
            info.update(fm_version=mismatch.group(1), driver_version=mismatch.group(2), mismatch=True)
        elif running:
            info["fm_version"] = running.group(1)
        if "status=1/FAILURE" in line or "Failed to start" in line:
            info["failed"] = True
        if mismatch or "[ERROR]" in line or "failed with error" in line:
            info["errors"].append(line.strip())
    return info


# ------------------------------------------------------------------------------------------ rules: GPUs


def check_gpu_count(smi: dict[str, Any], expected: int) -> list[dict[str, str]]:
    """Fewer (or more) GPUs than the node should have: a GPU that fell off the bus is simply not listed."""
    found = len(smi.get("gpus") or [])
    if found == expected:
        return []
    return [_finding("gpu.count", FAIL, f"{found} GPUs", f"{expected} GPUs",
                     "look for Xid 79 in the kernel log and at lspci; reseat or replace the missing GPU",
                     SOURCES["xid_catalog"])]


def check_ecc(smi: dict[str, Any]) -> list[dict[str, str]]:
    """Uncorrectable ECC errors since the driver loaded (volatile) or ever (aggregate)."""
    findings = []
    for gpu in smi.get("gpus") or []:
        counts = gpu["ecc_uncorrectable"]
        if counts["volatile"] or counts["aggregate"]:  # None (not reported) counts as no error
            findings.append(_finding(
                f"gpu.ecc.{gpu['bus_id']}", FAIL,
                f"uncorrectable ECC errors: volatile {counts['volatile']}, aggregate {counts['aggregate']}",
                "0 uncorrectable ECC errors",
                "drain the GPU and reset it so the rows are remapped or the pages retired; RMA if the count grows",
                SOURCES["row_remap"]))
    return findings


def check_retired_pages(smi: dict[str, Any]) -> list[dict[str, str]]:
    """Pages waiting to be retired (before Ampere): they are retired only at the next driver load."""
    findings = []
    for gpu in smi.get("gpus") or []:
        pages = gpu["retired_pages"]
        if pages["pending"]:
            findings.append(_finding(
                f"gpu.retired_pages.{gpu['bus_id']}", FAIL,
                f"pages pending retirement ({pages['single_bit']} single, {pages['double_bit']} double bit retired)",
                "no page pending retirement", "reset the GPU or reboot the node to retire the pending pages",
                SOURCES["page_retirement"]))
    return findings


def check_row_remap(smi: dict[str, Any]) -> list[dict[str, str]]:
    """Ampere and newer: a row remap pending (needs a GPU reset) or a remap that failed (RMA)."""
    findings = []
    for gpu in smi.get("gpus") or []:
        rows = gpu["remapped_rows"]
        if rows["failure"]:
            findings.append(_finding(f"gpu.row_remap.{gpu['bus_id']}", FAIL, "row remapping failure occurred",
                                     "no remapping failure", "drain the node and RMA the GPU (no spare rows left)",
                                     SOURCES["row_remap"]))
        elif rows["pending"]:
            findings.append(_finding(
                f"gpu.row_remap.{gpu['bus_id']}", FAIL,
                f"row remap pending ({rows['uncorrectable']} rows for uncorrectable errors)", "no row remap pending",
                "reset the GPU (nvidia-smi -r) or reboot once its jobs end, so the remap takes effect",
                SOURCES["row_remap"]))
    return findings


def check_pcie(smi: dict[str, Any], under_load: bool = False) -> list[dict[str, str]]:
    """PCIe link below what GPU and slot support: width always; gen only on a reading taken ``under_load``.

    An idle GPU trains its link down to Gen1 to save power, so a low gen on an idle reading means nothing.
    """
    findings = []
    for gpu in smi.get("gpus") or []:
        link = gpu["pcie"]
        if link["width_current"] and link["width_max"] and link["width_current"] < link["width_max"]:
            findings.append(_finding(
                f"gpu.pcie_width.{gpu['bus_id']}", FAIL, f"PCIe x{link['width_current']}", f"x{link['width_max']}",
                "reseat the GPU (or its riser); check the slot is wired for the full width in the board manual",
                SOURCES["pcie_link"]))
        if under_load and link["gen_current"] and link["gen_max"] and link["gen_current"] < link["gen_max"]:
            findings.append(_finding(
                f"gpu.pcie_gen.{gpu['bus_id']}", FAIL, f"PCIe Gen{link['gen_current']} under load",
                f"Gen{link['gen_max']}", "check the slot's and BIOS's PCIe speed setting; reseat the GPU",
                SOURCES["pcie_link"]))
    return findings


def check_persistence(smi: dict[str, Any]) -> list[dict[str, str]]:
    """Persistence mode off: the driver state is torn down between jobs (slow starts; dcgmi diag refuses)."""
    return [_finding(f"gpu.persistence.{gpu['bus_id']}", WARN, "persistence mode off", "persistence mode on",
                     "enable nvidia-persistenced (systemctl enable --now nvidia-persistenced)", SOURCES["persistence"])
            for gpu in smi.get("gpus") or [] if gpu["persistence_mode"] is False]


def check_nvlink(gpus: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Inactive NVLink links (parse_nvlink_status), or a GPU whose links are all inactive."""
    findings = []
    for gpu in gpus:
        inactive = [link["link"] for link in gpu["links"] if not link["active"]]
        if gpu["all_inactive"] or inactive:
            what = "all links inactive" if gpu["all_inactive"] else "inactive links " + ", ".join(map(str, inactive))
            findings.append(_finding(
                f"gpu.nvlink.{gpu['index']}", FAIL, f"GPU {gpu['index']} ({gpu['name']}): {what}",
                "every NVLink link up",
                "on NVSwitch systems start nvidia-fabricmanager; reset the GPU; reseat or RMA if a link stays down",
                SOURCES["xid_catalog"] + " (Xid 74)"))
    return findings


def check_xid(log: dict[str, list[dict[str, Any]]]) -> list[dict[str, str]]:
    """One finding per GPU and Xid code, judged by XID_MEANING (an unknown code is a warning to look up)."""
    counts: dict[tuple[str, int], int] = {}
    for event in log.get("xid") or []:
        key = (event["bus_id"], event["code"])
        counts[key] = counts.get(key, 0) + 1
    findings = []
    for (bus, code), count in sorted(counts.items()):
        meaning = XID_MEANING.get(code, {"name": "unknown Xid", "severity": WARN, "meaning": "not in this table",
                                         "action": "look the code up in NVIDIA's Xid catalog"})
        findings.append(_finding(f"gpu.xid.{bus}.{code}", meaning["severity"],
                                 f"Xid {code} x{count} ({meaning['name']}: {meaning['meaning']})", "no Xid event",
                                 meaning["action"], SOURCES["xid_catalog"]))
    return findings


def check_sxid(log: dict[str, list[dict[str, Any]]]) -> list[dict[str, str]]:
    """NVSwitch SXid errors, one finding per switch and code: fatal ones fail, the rest warn."""
    events: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for event in log.get("sxid") or []:
        events.setdefault((event["bus_id"], event["code"]), []).append(event)
    findings = []
    for (bus, code), group in sorted(events.items()):
        fatal = any(event["severity"] == "Fatal" for event in group)
        first = next((event for event in group if event["severity"]), group[0])  # not a detail line
        findings.append(_finding(
            f"nvswitch.sxid.{bus}.{code}", FAIL if fatal else WARN,
            f"SXid {code} on {first['switch']} x{len(group)}: {first['message']}",
            "no SXid event", "fatal: drain the node and reset the NVSwitch tray (reboot); non-fatal: watch the rate",
            SOURCES["fabric_manager"]))
    return findings


# ------------------------------------------------------------------------------------------ rules: fabric


def check_ib_ports(ib: dict[str, list], expected_rate: Optional[float] = None,
                   link_layers: Iterable[str] = ("InfiniBand",)) -> list[dict[str, str]]:
    """Ports of ``link_layers`` not Active/LinkUp, or Active below ``expected_rate`` (Gb/s).

    Without ``expected_rate`` an Active port is judged against the fastest Active port of the same adapter model
    (``ca_type``) and link layer: a cable or port that trained down stands out from its siblings.
    """
    layers = set(link_layers)
    ports = [port for port in ib.get("ports") or [] if port["link_layer"] in layers]
    active = [port for port in ports if port["state"] == "Active" and port["physical_state"] == "LinkUp"]
    fastest: dict[tuple[str, str], float] = {}
    for port in active:
        key = (port.get("ca_type", ""), port["link_layer"])
        fastest[key] = max(fastest.get(key, 0.0), port["rate_gbps"] or 0.0)
    findings = [_finding(f"ib.port.{port['ca']}/{port['port']}", FAIL,
                         f"{port['state']} / {port['physical_state']}", "Active / LinkUp",
                         "check the cable and the switch port (ibportstate, the subnet manager's log); "
                         "a Polling port has no link partner", SOURCES["ib_sysfs"])
                for port in ports if port not in active]
    for port in active:
        want = expected_rate or fastest[(port.get("ca_type", ""), port["link_layer"])]
        if (port["rate_gbps"] or 0.0) < want:
            findings.append(_finding(f"ib.rate.{port['ca']}/{port['port']}", FAIL, f"{port['rate_gbps'] or 0:g} Gb/s",
                                     f"{want:g} Gb/s", "reseat or replace the cable; check the switch port's speed",
                                     SOURCES["ib_sysfs"]))
    for error in ib.get("errors") or []:
        findings.append(_finding("ib.read", FAIL, error, "every adapter readable",
                                 "reload the RDMA driver (or reboot); check dmesg for mlx5 errors",
                                 SOURCES["ib_sysfs"]))
    return findings


def check_nccl_transport(nccl: dict[str, Any], ib: dict[str, list]) -> list[dict[str, str]]:
    """NCCL fell back to TCP sockets although an InfiniBand port is Active (check_run_transport's rule, judged against
    one node's ports)."""
    active = [port for port in ib.get("ports") or []
              if port["link_layer"] == "InfiniBand" and port["state"] == "Active"]
    if not active:
        return []
    names = ", ".join(f"{port['ca']}/{port['port']}" for port in active)
    return [f for f in check_run_transport(nccl, "IB", False, expected_text=f"NET/IB over the Active ports ({names})")
            if f["item"] == "nccl.transport"]


def check_peermem(ib: dict[str, list], modules: Iterable[str], gpus: int) -> list[dict[str, str]]:
    """GPUs and an Active InfiniBand port but no nvidia_peermem loaded: no GPUDirect RDMA through it.

    A warning, not a failure: NCCL then stages through host memory (slower), or uses DMA-BUF where the open kernel
    modules and a recent kernel offer it. ``modules``: the names /proc/modules lists.
    """
    active = [port for port in ib.get("ports") or []
              if port["link_layer"] == "InfiniBand" and port["state"] == "Active"]
    if not gpus or not active or "nvidia_peermem" in set(modules):
        return []
    names = ", ".join(f"{port['ca']}/{port['port']}" for port in active)
    return [_finding("gpu.peermem", WARN, f"nvidia_peermem not loaded ({gpus} GPUs, Active ports {names})",
                     "nvidia_peermem loaded", "modprobe nvidia-peermem, and load it at boot "
                     "(echo nvidia-peermem > /etc/modules-load.d/nvidia-peermem.conf)", SOURCES["peermem"])]


def check_fabricmanager(fm: dict[str, Any], driver_version: Optional[str] = None) -> list[dict[str, str]]:
    """Fabric Manager's version must equal the driver's, to the last digit (it refuses to start otherwise)."""
    driver = driver_version or fm.get("driver_version")
    if not fm.get("fm_version") or not driver or fm["fm_version"] == driver:
        return []
    return [_finding("fabricmanager.version", FAIL, f"Fabric Manager {fm['fm_version']}, driver {driver}",
                     f"Fabric Manager {driver}",
                     f"install the nvidia-fabricmanager package of version {driver} and hold it with the driver",
                     SOURCES["fabric_manager"])]


def check_dcgm_diag(diag: dict[str, Any]) -> list[dict[str, str]]:
    """One finding per dcgmi diag test that failed, with the first of its messages."""
    return [_finding(f"dcgm.diag.{re.sub(r'[^a-z0-9]+', '_', test['name'].lower()).strip('_')}", FAIL,
                     f"{test['name']}: {test['result']}" + (f" ({test['details'][0]})" if test["details"] else ""),
                     "Pass", "fix what the message names, then run dcgmi diag again", SOURCES["dcgm_diag"])
            for test in diag.get("tests") or [] if test["result"].lower().startswith("fail")]


# ------------------------------------------------------------------------------------------ bandwidth floor


def _link_line_rate(link: dict[str, Any]) -> float:
    """GB/s one way over one link entry: {kind: nvlink, generation | gbs_per_link, count}; {kind: pcie,
    generation, width}; {kind: net, rate_gbps, count} (rate as ibstat prints it)."""
    kind = link["kind"]
    if kind == "nvlink":
        per_link = link["gbs_per_link"] if "gbs_per_link" in link else threshold(
            f"nvlink.{link['generation']}.link_gbs")["value"]
        return per_link * link.get("count", 1)
    if kind == "pcie":
        return threshold(f"pcie.{link['generation']}.lane_gbs")["value"] * link["width"]
    if kind == "net":
        return link["rate_gbps"] * threshold("net.gbit_to_gbyte")["value"] * link.get("count", 1)
    raise ValueError(f"unknown link kind {kind!r} (nvlink, pcie or net)")


def bus_bandwidth_floor(links: list[dict[str, Any]]) -> dict[str, Any]:
    """The all_reduce busbw a healthy run should reach over ``links``: {floor_gbs, bottleneck, terms}.

    Pass the links the run crosses: inside a node a GPU's NVLink (or, without NVLink, its PCIe link); between nodes
    the network ports a node's ranks use (several entries of one kind add up). nccl-tests' busbw measures the
    slowest of these (SOURCES["busbw"]), so each kind gives line rate x its efficiency row, and the floor is the
    lowest. Each term names its rate and efficiency rows' sources.

    An entry may name its ``node`` (entries add up per kind and node: run_floor's terms), what it is (``what``) and
    the source of its rate (``source``, put before the efficiency row's).
    """
    terms: dict[tuple[str, Any], dict[str, Any]] = {}
    for link in links:
        term = terms.setdefault((link["kind"], link.get("node")), {"kind": link["kind"], "line_gbs": 0.0})
        term["line_gbs"] += _link_line_rate(link)
        for key in ("node", "what", "source"):
            if key in link and key not in term:
                term[key] = link[key]
    if not terms:
        raise ValueError("no links: pass the NVLink, PCIe or network links the all_reduce crosses")
    for term in terms.values():
        row = threshold("efficiency." + term["kind"])
        term.update(line_gbs=round(term["line_gbs"], 3), efficiency=row["value"],
                    floor_gbs=round(term["line_gbs"] * row["value"], 2),
                    source=f"{term['source']}; {row['source']}" if term.get("source") else row["source"])
    slowest = min(terms.values(), key=lambda term: term["floor_gbs"])
    return {"floor_gbs": slowest["floor_gbs"], "bottleneck": slowest["kind"], "terms": list(terms.values())}


def nvlink_links(gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """parse_nvlink_status -> the NVLink entry of the GPU with the least active bandwidth (it bounds the ring).

    None when that GPU has no active link: its traffic goes over PCIe, so pass its PCIe link instead.
    """
    if not gpus:
        return []
    slowest = min(gpus, key=lambda gpu: sum(link["speed_gbs"] or 0.0 for link in gpu["links"]))
    active = [link["speed_gbs"] for link in slowest["links"] if link["active"]]
    return [{"kind": "nvlink", "gbs_per_link": min(active), "count": len(active)}] if active else []


def net_links(ib: dict[str, list], link_layers: Iterable[str] = ("InfiniBand",)) -> list[dict[str, Any]]:
    """parse_ibstat/parse_ib_sysfs -> one network entry per Active port of ``link_layers``."""
    layers = set(link_layers)
    return [{"kind": "net", "rate_gbps": port["rate_gbps"], "count": 1} for port in ib.get("ports") or []
            if port["link_layer"] in layers and port["state"] == "Active" and port["rate_gbps"]]


def check_bus_bandwidth(result: dict[str, Any], floor: dict[str, Any]) -> list[dict[str, str]]:
    """An all_reduce_perf run that failed, saw wrong values, or stayed below ``floor`` (bus_bandwidth_floor)."""
    if result.get("errors") or not result.get("rows"):
        first = (result.get("errors") or ["no result rows"])[0]
        return [_finding("nccl.all_reduce", FAIL, f"the run failed: {first}", "a complete run",
                         "fix the error named (a CUDA failure: driver, Fabric Manager, GPU state), then run it again",
                         SOURCES["busbw"])]
    wrong = sum(row["wrong"] for row in result["rows"])
    if wrong:
        return [_finding("nccl.all_reduce", FAIL, f"{wrong} wrong values", "0 wrong values",
                         "run dcgmi diag -r 3 on every node; look for Xid events", SOURCES["busbw"])]
    measured = measured_bus_bandwidth(result)
    if measured["busbw"] >= floor["floor_gbs"]:
        return []
    term = next(term for term in floor["terms"] if term["kind"] == floor["bottleneck"])
    return [_finding("nccl.busbw", FAIL, f"{measured['busbw']:g} GB/s busbw at {measured['size']} bytes",
                     f">= {floor['floor_gbs']:g} GB/s ({term['line_gbs']:g} GB/s {term['kind']} line rate"
                     f" x {term['efficiency']:g})",
                     "find the slow link: NCCL_DEBUG=INFO for the transport, nvidia-smi -q for PCIe, nvlink -s, ibstat",
                     term["source"])]


# ------------------------------------------------------------------------------------------ floors from the links found
#
# What `hvdcluster health --full` judges a run's bus bandwidth by: the links found on its nodes (node_links), turned into
# one term per link kind and node (run_floor, through bus_bandwidth_floor), each its line rate (THRESHOLDS' rate rows, or the speed the tool
# printed) times its efficiency row. nccl-tests' busbw is a per-rank figure that measures the slowest link a ring
# crosses (SOURCES["busbw"]): inside a node a GPU's NVLink (through NVSwitch, or between two GPUs), else its PCIe link;
# between nodes the RDMA ports a node's ranks use, together (every ring crosses a node's boundary through one of
# them). The floor is the lowest term, named with its node.


def node_links(smi: dict[str, Any], nvlink: list[dict[str, Any]], ib: Optional[dict[str, list]], nvswitch: bool,
               modules: Optional[Iterable[str]], gpus: int) -> dict[str, Any]:
    """The links one node's ranks use, from its readings: parse_nvidia_smi_q (``smi``), parse_nvlink_status
    (``nvlink``), parse_ib_sysfs (``ib``, None without /sys/class/infiniband), NVSwitches on its bus, its loaded modules
    and ``gpus`` (the ranks it runs).

    {gpus, nvlink: {per_link_gbs, count} of the GPU with the least active NVLink (None: no active link), nvswitch,
    pcie: {generation, width} of the GPU with the slowest PCIe link as GPU and slot support it (Max: an idle link
    trains down, check_pcie), net: [Active RDMA ports, fastest first], peermem}.
    """
    links = nvlink_links(nvlink)
    pcie = None
    rated = [gpu["pcie"] for gpu in smi.get("gpus") or [] if gpu["pcie"]["gen_max"] and gpu["pcie"]["width_max"]]
    if rated:
        slowest = min(rated, key=lambda link: threshold_or(f"pcie.{link['gen_max']}.lane_gbs") * link["width_max"])
        pcie = {"generation": slowest["gen_max"], "width": slowest["width_max"]}
    ports = [port for port in (ib or {}).get("ports") or []
             if port["state"] == "Active" and port.get("physical_state", "LinkUp") == "LinkUp" and port["rate_gbps"]]
    return {"gpus": int(gpus), "nvswitch": bool(nvswitch), "pcie": pcie,
            "nvlink": {"per_link_gbs": links[0]["gbs_per_link"], "count": links[0]["count"]} if links else None,
            "net": sorted(({"ca": port["ca"], "port": port["port"], "rate_gbps": port["rate_gbps"],
                            "link_layer": port["link_layer"]} for port in ports), key=lambda port: -port["rate_gbps"]),
            "peermem": "nvidia_peermem" in set(modules or ())}


def threshold_or(row_id: str, default: float = 0.0) -> float:
    """THRESHOLDS' value of ``row_id``, ``default`` where there is no such row (a PCIe generation not in the table)."""
    try:
        return float(threshold(row_id)["value"])
    except KeyError:
        return default


def _intra_links(node: str, links: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """A node's GPU-to-GPU link entry (it runs two ranks or more), or ([], why none can be derived)."""
    nvlink, pcie = links["nvlink"], links["pcie"]
    if nvlink and (links["nvswitch"] or links["gpus"] == 2):
        how = "through NVSwitch" if links["nvswitch"] else "between its 2 GPUs"
        source = SOURCES["nvswitch"] if links["nvswitch"] else SOURCES["nvlink_speeds"]
        return [{"kind": "nvlink", "gbs_per_link": nvlink["per_link_gbs"], "count": nvlink["count"], "node": node,
                 "what": f"{nvlink['count']} NVLink links x {nvlink['per_link_gbs']:g} GB/s {how}",
                 "source": source}], ""
    if pcie and threshold_or(f"pcie.{pcie['generation']}.lane_gbs"):
        what = f"PCIe Gen{pcie['generation']} x{pcie['width']}"
        source = threshold(f"pcie.{pcie['generation']}.lane_gbs")["source"]
        if nvlink:  # a ring among more than two GPUs without NVSwitch may cross PCIe: judged by the slower path
            what += f" (NVLink without NVSwitch among {links['gpus']} GPUs: rings may cross PCIe)"
            source += f"; {SOURCES['nvlink_mesh']}"
        return [{"kind": "pcie", "generation": pcie["generation"], "width": pcie["width"], "node": node,
                 "what": what, "source": source}], ""
    return [], f"{node}: neither NVLink nor a PCIe link rate was read for its GPUs"


def _net_links(node: str, links: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """A node's network entries: its fastest Active RDMA ports, one a rank at most (NCCL gives each GPU its nearest
    NIC: counting more ports than ranks would set the floor above what the run can use)."""
    used = links["net"][:max(links["gpus"], 1)]
    if not used:
        return [], (f"{node}: no Active InfiniBand or RoCE port (/sys/class/infiniband): the network floor cannot "
                    "be derived (an Ethernet NIC's speed is not read)")
    rates = sorted({port["rate_gbps"] for port in used}, reverse=True)
    what = " + ".join(f"{sum(1 for port in used if port['rate_gbps'] == rate)} x {rate:g} Gb/s" for rate in rates)
    first = {"node": node, "what": f"{what} RDMA port{'s' if len(used) > 1 else ''}", "source": SOURCES["ib_sysfs"]}
    return [{"kind": "net", "rate_gbps": port["rate_gbps"], "count": 1, **(first if i == 0 else {"node": node})}
            for i, port in enumerate(used)], ""


def run_floor(nodes: dict[str, dict[str, Any]], given: Optional[float] = None) -> dict[str, Any]:
    """The busbw floor of a run over ``nodes`` (node -> node_links): {floor_gbs, bottleneck, terms, given,
    not_applicable}, from bus_bandwidth_floor over every node's link entries.

    ``floor_gbs`` is the lowest term's (``bottleneck``: that term's kind and node); None with ``not_applicable`` saying
    why: fewer than two ranks (an all_reduce over one rank moves nothing: busbw = algbw x 2(n-1)/n = 0), or a link no
    term can be derived for. ``given``: an operator's floor in GB/s (``--floor``), used instead of the derived one
    (the terms are still listed).
    """
    ranks = sum(links["gpus"] for links in nodes.values())
    out: dict[str, Any] = {"floor_gbs": None, "bottleneck": None, "terms": [], "given": given, "not_applicable": None}
    if ranks < 2:
        out["not_applicable"] = (f"{ranks} rank{'s' if ranks != 1 else ''}: an all_reduce over one GPU moves no data "
                                 "(busbw = algbw x 2(n-1)/n = 0), so nothing can be judged; the quick read judges "
                                 "that GPU")
        return out
    entries, missing = [], []
    for node, links in nodes.items():
        for wanted, derive in ((links["gpus"] >= 2, _intra_links), (len(nodes) > 1, _net_links)):
            if wanted:
                found, why = derive(node, links)
                entries += found
                missing += [why] if why else []
    out["terms"] = bus_bandwidth_floor(entries)["terms"] if entries else []
    if given is not None:
        out.update(floor_gbs=round(float(given), 2), bottleneck={"kind": "given", "node": None})
        return out
    if missing:
        out["not_applicable"] = "; ".join(missing) + " (give --floor to judge the run against a floor of your own)"
        return out
    slowest = min(out["terms"], key=lambda term: term["floor_gbs"])
    out.update(floor_gbs=slowest["floor_gbs"], bottleneck={"kind": slowest["kind"], "node": slowest["node"]})
    return out


def bottleneck_term(floor: dict[str, Any]) -> Optional[dict[str, Any]]:
    """run_floor's term that sets the floor (None for a given floor or none)."""
    want = floor.get("bottleneck") or {}
    return next((t for t in floor.get("terms") or [] if (t["kind"], t["node"]) == (want.get("kind"), want.get("node"))),
                None)


def largest_size_busbw(result: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The bus bandwidth of a perf run's largest size (out-of-place or in-place, the better): {busbw, size}."""
    rows = result.get("rows") or []
    if not rows:
        return None
    biggest = max(rows, key=lambda row: row["size"])
    return {"busbw": max(biggest["busbw_out"], biggest["busbw_in"]), "size": biggest["size"]}


# nccl-tests prints the same table for every collective (src/common.cu): one parser reads them all.
parse_nccl_perf = parse_all_reduce_perf


def check_run(result: dict[str, Any], floor: dict[str, Any], collective: str = "all_reduce") -> list[dict[str, str]]:
    """A perf run (parse_nccl_perf) that failed, saw wrong values, or whose largest size stayed below ``floor``
    (run_floor; not judged where the floor is not applicable)."""
    item = f"nccl.{collective}"
    if result.get("errors") or not result.get("rows"):
        first = (result.get("errors") or ["no result rows"])[0]
        return [_finding(item, FAIL, f"the run failed: {first}", "a complete run",
                         "fix the error named (a CUDA failure: driver, Fabric Manager, GPU state), then run it again",
                         SOURCES["busbw"])]
    wrong = sum(row["wrong"] for row in result["rows"])
    if wrong:
        return [_finding(item, FAIL, f"{wrong} wrong values", "0 wrong values",
                         "run dcgmi diag -r 3 on every node; look for Xid events", SOURCES["busbw"])]
    measured = largest_size_busbw(result)
    if floor.get("floor_gbs") is None or measured["busbw"] >= floor["floor_gbs"]:
        return []
    if floor["bottleneck"]["kind"] == "given":
        expected, source = f">= {floor['floor_gbs']:g} GB/s (--floor)", "the operator's --floor"
    else:
        term = bottleneck_term(floor)
        expected = (f">= {floor['floor_gbs']:g} GB/s ({term['node']}: {term['what']}, {term['line_gbs']:g} GB/s line "
                    f"rate x {term['efficiency']:g})")
        source = term["source"]
    return [_finding(f"nccl.busbw.{collective}", FAIL, f"{measured['busbw']:g} GB/s busbw at {measured['size']} bytes",
                     expected, "find the slow node or link (health --full names it): NCCL_DEBUG=INFO for the "
                     "transport, nvidia-smi -q for PCIe, nvidia-smi nvlink -s, ibstat", source)]


def check_ranks(result: dict[str, Any], expected: int) -> list[dict[str, str]]:
    """A run whose ``# Rank`` lines name another number of ranks than one per GPU of its nodes."""
    ranks = len(result.get("ranks") or [])
    if not result.get("rows") or not ranks or ranks == expected:
        return []
    return [_finding("nccl.ranks", FAIL, f"{ranks} ranks reported", f"{expected} ranks (one per GPU)",
                     "check every node's GPUs are visible (nvidia-smi, CUDA_VISIBLE_DEVICES)", SOURCES["busbw"])]


def check_run_transport(nccl: dict[str, Any], expected: Optional[str], gdr: bool, nvlink: bool = False,
                        expected_text: Optional[str] = None) -> list[dict[str, str]]:
    """What NCCL used (parse_nccl_debug) against what the nodes offer.

    ``expected``: the network every node of a multi-node run offers ("IB" where each has an Active InfiniBand or RoCE
    port, or what the operator gave with --transport; None: not judged). Another network is a failure that names both.
    ``gdr``: GPUs and nvidia_peermem on every node, so GPUDirect RDMA is there to use: IB without it is a warning (NCCL
    skips it where GPU and NIC are far apart). ``nvlink``: one node's GPUs share NVLink, so NCCL should go GPU to GPU
    (P2P); only host memory (SHM) is a warning (ACS or a container without the GPUs' peer access).
    """
    findings: list[dict[str, str]] = []
    if not nccl.get("version") and not nccl.get("transports"):
        if expected or nvlink:
            findings.append(_finding("nccl.debug", WARN, "no NCCL INFO line in the run's output",
                                     "NCCL_DEBUG=INFO lines naming the network and transports",
                                     "check NCCL_DEBUG is not overridden in /etc/nccl.conf or ~/.nccl.conf",
                                     SOURCES["nccl_net"]))
        return findings
    used = nccl.get("network") or next((t[4:] for t in nccl.get("transports") or [] if t.startswith("NET/")), None)
    if expected and used and used != expected:
        said = f"NCCL used NET/{used}" + (" (NET/IB : No device found)" if nccl.get("ib_no_device") else "")
        wanted = expected_text or f"NET/{expected}, which every node offers"
        findings.append(_finding("nccl.transport", FAIL, said, wanted,
                                 "make /dev/infiniband and libibverbs visible to the job (containers: --device "
                                 "/dev/infiniband); unset NCCL_IB_DISABLE; check NCCL_IB_HCA names the Active ports",
                                 SOURCES["nccl_net"]))
    elif expected == "IB" and used == "IB" and gdr and not nccl.get("gdrdma"):
        findings.append(_finding("nccl.gdrdma", WARN, "NCCL used NET/IB without GPUDirect RDMA",
                                 "via NET/IB/<n>/GDRDMA (nvidia_peermem is loaded on every node)",
                                 "check nvidia-smi topo -m (GPU and NIC under one PCIe switch), NCCL_NET_GDR_LEVEL, and "
                                 "ACS on the bridges between them", SOURCES["nccl_gdr"]))
    transports = set(nccl.get("transports") or [])
    if nvlink and "SHM" in transports and not any(t.startswith("P2P") or t == "NVLS" for t in transports):
        findings.append(_finding("nccl.p2p", WARN, "NCCL moved GPU-to-GPU data through host memory (SHM)",
                                 "P2P over NVLink", "check ACS (health's pcie.acs items), NCCL_P2P_DISABLE, and that "
                                 "a container sees every GPU", SOURCES["acs"]))
    return findings


# ------------------------------------------------------------------------------------------ PCIe ACS and the IOMMU
#
# IO virtualization (VT-d, the IOMMU) and PCI Access Control Services on the bridges between GPUs and NICs can send
# their peer-to-peer traffic up to the CPU's root complex: slow, or a hang (SOURCES["acs"]). ``lspci -vvv`` shows the
# ACS control register as ``ACSCtl: SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-``
# (SOURCES["acs_bits"]); it needs root to read a device's extended capabilities (as the login user it prints
# ``Capabilities: <access denied>``), as does /sys/bus/pci/devices/*/config past its first 64 bytes.

ACS_BITS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")
# The bits that send peer-to-peer traffic up (redirect) or mark ACS as enforced (NCCL's doc: SrcValid+).
ACS_P2P_BITS = ("SrcValid", "ReqRedir", "CmpltRedir")
ACS_CAP_ID = 0x000D
_LSPCI_DEVICE = re.compile(r"^((?:[0-9a-fA-F]{4,}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(.*)$")


def parse_lspci_acs(text: str) -> dict[str, Any]:
    """``lspci -vvv`` (``-D`` or not): {devices: {bus id: {name, acsctl: {bit: bool} | None, denied}}}.

    ``acsctl`` is None where the device has no ACS capability listed; ``denied`` where lspci could not read its
    capabilities (``Capabilities: <access denied>``: not root).
    """
    devices: dict[str, dict[str, Any]] = {}
    current: Optional[dict[str, Any]] = None
    for line in text.splitlines():
        head = _LSPCI_DEVICE.match(line)
        if head:
            current = {"name": head.group(2).strip(), "acsctl": None, "denied": False}
            devices[bus_id(head.group(1) if head.group(1).count(":") == 2 else "0000:" + head.group(1))] = current
            continue
        if current is None:
            continue
        body = line.strip()
        if body.startswith("Capabilities:") and "<access denied>" in body:
            current["denied"] = True
        elif body.startswith("ACSCtl:"):
            current["acsctl"] = {name: sign == "+" for name, sign in re.findall(r"(\w+)([+-])", body[7:])}
    return {"devices": devices}


def parse_pci_config_acs(config: bytes) -> Optional[dict[str, bool]]:
    """A device's PCI config space (``/sys/bus/pci/devices/<id>/config``, read as root: 4096 bytes): its ACS control
    bits, walking the extended capability list from 0x100; None without an ACS capability or past what was read."""
    offset, seen = 0x100, set()
    while 0x100 <= offset <= len(config) - 8 and offset not in seen:
        seen.add(offset)
        header = int.from_bytes(config[offset:offset + 4], "little")
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == ACS_CAP_ID:
            control = int.from_bytes(config[offset + 6:offset + 8], "little")
            return {name: bool(control >> bit & 1) for bit, name in enumerate(ACS_BITS)}
        offset = (header >> 20) & 0xFFC
    return None


def parse_cmdline_iommu(cmdline: str) -> dict[str, Optional[str]]:
    """/proc/cmdline's IOMMU settings: {intel_iommu, amd_iommu, iommu} as written (None: not on the command line)."""
    found: dict[str, Optional[str]] = {"intel_iommu": None, "amd_iommu": None, "iommu": None}
    for word in cmdline.split():
        key, dummy, value = word.partition("=")
        if key in found:
            found[key] = value
    return found


def check_iommu(cmdline: Optional[str], groups: dict[str, Optional[str]]) -> list[dict[str, str]]:
    """The IOMMU translating the DMA of the node's GPUs and NICs: ``groups`` is device -> its IOMMU group's type
    (identity, DMA, DMA-FQ; None: in no group, the IOMMU off for it). A warning naming the kernel's settings: VMs and
    SR-IOV need the IOMMU, and passthrough (iommu=pt) keeps it on without translating."""
    translated = sorted(dev for dev, kind in groups.items() if kind and kind != "identity")
    if not translated:
        return []
    params = parse_cmdline_iommu(cmdline or "")
    said = " ".join(f"{k}={v}" for k, v in params.items() if v is not None) or "no IOMMU setting"
    kinds = sorted({groups[dev] for dev in translated})
    return [_finding("pcie.iommu", WARN, f"IOMMU translating DMA ({', '.join(kinds)}) for {', '.join(translated)}; "
                     f"kernel command line: {said}", "iommu=pt (passthrough) or the IOMMU off on a GPU node",
                     "add iommu=pt to the kernel command line (GRUB_CMDLINE_LINUX, then update-grub and reboot), or "
                     "intel_iommu=off / amd_iommu=off, or VT-d / AMD-Vi off in the BIOS where no VM or SR-IOV needs it",
                     SOURCES["iommu"] + "; " + SOURCES["iommu_groups"])]


def check_acs(acs: dict[str, Any], paths: dict[str, list[str]], peers: int) -> list[dict[str, str]]:
    """ACS enabled on a bridge above a GPU or RDMA NIC (``paths``: device -> the bridges above it, root port first;
    ``acs``: parse_lspci_acs). ``peers``: the GPUs and RDMA NICs of the node: with two or more, their peer-to-peer
    traffic is sent up to the root complex, a failure; with one there is no peer on the node, a warning."""
    devices = acs.get("devices") or {}
    findings = []
    flagged: dict[str, list[str]] = {}
    for device, bridges in sorted(paths.items()):
        for bridge in bridges:
            ctl = (devices.get(bridge) or {}).get("acsctl") or {}
            if any(ctl.get(bit) for bit in ACS_P2P_BITS):
                flagged.setdefault(bridge, []).append(device)
    for bridge, below in sorted(flagged.items()):
        ctl = devices[bridge]["acsctl"]
        on = " ".join(f"{bit}+" for bit in ACS_BITS if ctl.get(bit))
        findings.append(_finding(
            f"pcie.acs.{bridge}", FAIL if peers >= 2 else WARN,
            f"ACSCtl {on} on bridge {bridge} above {', '.join(below)}", "ACS peer-to-peer redirection off (SrcValid-, "
            "ReqRedir-, CmpltRedir-) on the bridges between GPUs and NICs",
            f"turn IO virtualization (VT-d) or ACS off in the BIOS, or as root: setpci -s {bridge} ECAP_ACS+0x6.w=0000 "
            "(again after every boot)", SOURCES["acs"] + "; " + SOURCES["acs_bits"]))
    return findings
