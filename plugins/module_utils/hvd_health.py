"""Health of a GPU node judged: the thresholds and meanings with their sources, and the rules.

Rules take what the parsers made of the tools' text (hvd_health_gpu: nvidia-smi, NVLink, the kernel log, dcgmi,
Fabric Manager; hvd_health_net: InfiniBand, PCIe ACS, the IOMMU) and what the cluster expects, and return findings,
each ``{item, severity, found, expected, fix, source}``: ``item`` is a stable id (``gpu.pcie_width.0000:07:00.0``),
``severity`` is ``fail`` or ``warn`` (as hvd_preflight's), ``source`` names where the threshold or the meaning comes
from. Numbers with a source live in ``THRESHOLDS``, one row each. A run of nccl-tests is judged in hvd_bandwidth.

Stdlib only and Python 3.9+, without Ansible: it runs on nodes and the CLI imports it.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Optional

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_health_net import (
    ACS_BITS,
    ACS_P2P_BITS,
    parse_cmdline_iommu,
)


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


def threshold(row_id: str) -> dict[str, Any]:
    """THRESHOLDS' row ``row_id`` (KeyError names it when there is none)."""
    for row in THRESHOLDS:
        if row["id"] == row_id:
            return row
    raise KeyError(f"no threshold row {row_id!r}")


def finding(item: str, severity: str, found: str, expected: str, fix: str, source: str) -> dict[str, str]:
    return {"item": item, "severity": severity, "found": found, "expected": expected, "fix": fix, "source": source}

# ------------------------------------------------------------------------------------------ rules: GPUs


def check_gpu_count(smi: dict[str, Any], expected: int) -> list[dict[str, str]]:
    """Fewer (or more) GPUs than the node should have: a GPU that fell off the bus is simply not listed."""
    found = len(smi.get("gpus") or [])
    if found == expected:
        return []
    return [finding("gpu.count", FAIL, f"{found} GPUs", f"{expected} GPUs",
                    "look for Xid 79 in the kernel log and at lspci; reseat or replace the missing GPU",
                    SOURCES["xid_catalog"])]


def check_ecc(smi: dict[str, Any]) -> list[dict[str, str]]:
    """Uncorrectable ECC errors since the driver loaded (volatile) or ever (aggregate)."""
    findings = []
    for gpu in smi.get("gpus") or []:
        counts = gpu["ecc_uncorrectable"]
        if counts["volatile"] or counts["aggregate"]:  # None (not reported) counts as no error
            findings.append(finding(
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
            findings.append(finding(
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
            findings.append(finding(f"gpu.row_remap.{gpu['bus_id']}", FAIL, "row remapping failure occurred",
                                    "no remapping failure", "drain the node and RMA the GPU (no spare rows left)",
                                    SOURCES["row_remap"]))
        elif rows["pending"]:
            findings.append(finding(
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
            findings.append(finding(
                f"gpu.pcie_width.{gpu['bus_id']}", FAIL, f"PCIe x{link['width_current']}", f"x{link['width_max']}",
                "reseat the GPU (or its riser); check the slot is wired for the full width in the board manual",
                SOURCES["pcie_link"]))
        if under_load and link["gen_current"] and link["gen_max"] and link["gen_current"] < link["gen_max"]:
            findings.append(finding(
                f"gpu.pcie_gen.{gpu['bus_id']}", FAIL, f"PCIe Gen{link['gen_current']} under load",
                f"Gen{link['gen_max']}", "check the slot's and BIOS's PCIe speed setting; reseat the GPU",
                SOURCES["pcie_link"]))
    return findings


def check_persistence(smi: dict[str, Any]) -> list[dict[str, str]]:
    """Persistence mode off: the driver state is torn down between jobs (slow starts; dcgmi diag refuses)."""
    return [finding(f"gpu.persistence.{gpu['bus_id']}", WARN, "persistence mode off", "persistence mode on",
                    "enable nvidia-persistenced (systemctl enable --now nvidia-persistenced)", SOURCES["persistence"])
            for gpu in smi.get("gpus") or [] if gpu["persistence_mode"] is False]


def check_nvlink(gpus: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Inactive NVLink links (parse_nvlink_status), or a GPU whose links are all inactive."""
    findings = []
    for gpu in gpus:
        inactive = [link["link"] for link in gpu["links"] if not link["active"]]
        if gpu["all_inactive"] or inactive:
            what = "all links inactive" if gpu["all_inactive"] else "inactive links " + ", ".join(map(str, inactive))
            findings.append(finding(
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
        findings.append(finding(f"gpu.xid.{bus}.{code}", meaning["severity"],
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
        findings.append(finding(
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
    findings = [finding(f"ib.port.{port['ca']}/{port['port']}", FAIL,
                        f"{port['state']} / {port['physical_state']}", "Active / LinkUp",
                        "check the cable and the switch port (ibportstate, the subnet manager's log); "
                        "a Polling port has no link partner", SOURCES["ib_sysfs"])
                for port in ports if port not in active]
    for port in active:
        want = expected_rate or fastest[(port.get("ca_type", ""), port["link_layer"])]
        if (port["rate_gbps"] or 0.0) < want:
            findings.append(finding(f"ib.rate.{port['ca']}/{port['port']}", FAIL, f"{port['rate_gbps'] or 0:g} Gb/s",
                                    f"{want:g} Gb/s", "reseat or replace the cable; check the switch port's speed",
                                    SOURCES["ib_sysfs"]))
    for error in ib.get("errors") or []:
        findings.append(finding("ib.read", FAIL, error, "every adapter readable",
                                "reload the RDMA driver (or reboot); check dmesg for mlx5 errors",
                                SOURCES["ib_sysfs"]))
    return findings


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
    return [finding("gpu.peermem", WARN, f"nvidia_peermem not loaded ({gpus} GPUs, Active ports {names})",
                    "nvidia_peermem loaded", "modprobe nvidia-peermem, and load it at boot "
                    "(echo nvidia-peermem > /etc/modules-load.d/nvidia-peermem.conf)", SOURCES["peermem"])]


def check_fabricmanager(fm: dict[str, Any], driver_version: Optional[str] = None) -> list[dict[str, str]]:
    """Fabric Manager's version must equal the driver's, to the last digit (it refuses to start otherwise)."""
    driver = driver_version or fm.get("driver_version")
    if not fm.get("fm_version") or not driver or fm["fm_version"] == driver:
        return []
    return [finding("fabricmanager.version", FAIL, f"Fabric Manager {fm['fm_version']}, driver {driver}",
                    f"Fabric Manager {driver}",
                    f"install the nvidia-fabricmanager package of version {driver} and hold it with the driver",
                    SOURCES["fabric_manager"])]


def check_dcgm_diag(diag: dict[str, Any]) -> list[dict[str, str]]:
    """One finding per dcgmi diag test that failed, with the first of its messages."""
    return [finding(f"dcgm.diag.{re.sub(r'[^a-z0-9]+', '_', test['name'].lower()).strip('_')}", FAIL,
                    f"{test['name']}: {test['result']}" + (f" ({test['details'][0]})" if test["details"] else ""),
                    "Pass", "fix what the message names, then run dcgmi diag again", SOURCES["dcgm_diag"])
            for test in diag.get("tests") or [] if test["result"].lower().startswith("fail")]


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
    return [finding("pcie.iommu", WARN, f"IOMMU translating DMA ({', '.join(kinds)}) for {', '.join(translated)}; "
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
        findings.append(finding(
            f"pcie.acs.{bridge}", FAIL if peers >= 2 else WARN,
            f"ACSCtl {on} on bridge {bridge} above {', '.join(below)}", "ACS peer-to-peer redirection off (SrcValid-, "
            "ReqRedir-, CmpltRedir-) on the bridges between GPUs and NICs",
            f"turn IO virtualization (VT-d) or ACS off in the BIOS, or as root: setpci -s {bridge} ECAP_ACS+0x6.w=0000 "
            "(again after every boot)", SOURCES["acs"] + "; " + SOURCES["acs_bits"]))
    return findings
