"""Parsers of a node's fabric: InfiniBand ports (``ibstat`` or ``/sys/class/infiniband``), PCIe Access Control
Services (``lspci -vvv`` or a device's config space) and the kernel command line's IOMMU settings, into plain dicts
that hvd_health's rules judge.

Stdlib only and Python 3.9+, without Ansible: it runs on nodes (plugins/modules/hvd_health_read.py) and the CLI
imports it.
"""

from __future__ import annotations

import os
import re
from typing import Any, Optional

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_health_gpu import bus_id


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
