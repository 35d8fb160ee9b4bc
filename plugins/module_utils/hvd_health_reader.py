"""The raw material of ``hvdcluster health`` on one node, read-only, as the login user (plugins/modules/hvd_health_read.py,
and hvd_node_state's ``health`` option: `up`'s read-back reads health in the same module run).

It asks the GPU and fabric tools and reads a few kernel files, each tool with a short timeout; a tool that is
missing, refused or slow is recorded (``<key>: null`` and ``<key>_error``), never an error. The texts come back as the
tools printed them (the kernel log cut to the lines that can name a GPU or an NVSwitch); the controller parses and
judges them with hvd_health*.py (src/hvdcluster/health.py). Only the InfiniBand ports and the ACS registers are
parsed here, with hvd_health_net.py's parse_ib_sysfs and parse_lspci_acs.

Stdlib only and Python 3.9+, without Ansible: it runs on nodes.
"""

from __future__ import annotations

import getpass
import os
import re
import shutil
import subprocess
from typing import Any, Optional

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_fabric import GPU_CLASSES, nvidia_pci, rdma_devices
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_fabric import loaded_modules as fabric_loaded_modules
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import read_text, resolve, under
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_health_net import (
    parse_ib_sysfs,
    parse_lspci_acs,
    parse_pci_config_acs,
)

# The kernel log lines that can name a GPU or an NVSwitch (Xid, SXid and the driver's own lines): the rest of a
# long uptime's log is not sent back.
_KERNEL_LINES = re.compile(r"NVRM|SXid|nvidia|nvswitch", re.I)
KERNEL_LINES_KEPT = 5000
# Seconds each tool may take (dcgmi diag ten times as long): hvd_health_read's default, hvd_node_state's health read.
TIMEOUT = 15


def run_tool(argv: list[str], search: str, timeout: float) -> tuple[Optional[str], str]:
    """(what ``argv``, found on ``search``, printed on stdout, why it is not a clean answer): ``(None, why)`` when it
    is not installed, timed out or printed nothing; a non-zero exit keeps what it printed (``dcgmi diag`` with a
    failed test, ``systemctl is-active`` of a stopped unit) and says the status with the first line it printed."""
    exe = shutil.which(argv[0], path=search)
    if exe is None:
        return None, f"{argv[0]}: not installed"
    try:
        proc = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, errors="replace", timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        return None, f"{' '.join(argv)}: no answer in {timeout:g} s"
    except OSError as exc:
        return None, f"{' '.join(argv)}: {exc.strerror or exc}"
    if proc.returncode == 0:
        return proc.stdout, ""
    said = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
    return proc.stdout or None, f"{' '.join(argv)}: exit {proc.returncode}" + (f": {said[0][:300]}" if said else "")


def kernel_log(search: str, timeout: float) -> dict[str, Any]:
    """The kernel log since boot: the journal's, else dmesg's. An empty journal counts as unreadable (a user outside
    the adm and systemd-journal groups sees none of the kernel's lines, and -q hides the hint that says so)."""
    errors = []
    for source, argv in (("journalctl", ["journalctl", "-k", "-b", "--no-pager", "-q"]), ("dmesg", ["dmesg"])):
        text, error = run_tool(argv, search, timeout)
        if text and text.strip():
            lines = [line for line in text.splitlines() if _KERNEL_LINES.search(line)]
            return {"kernel_log": "\n".join(lines[-KERNEL_LINES_KEPT:]), "kernel_log_source": source,
                    "kernel_log_lines": len(text.splitlines()), "kernel_log_error": ""}
        errors.append(error or f"{' '.join(argv)}: printed nothing (not allowed to read the kernel's lines?)")
    return {"kernel_log": None, "kernel_log_source": "", "kernel_log_lines": 0, "kernel_log_error": "; ".join(errors)}


def loaded_modules(root: str) -> tuple[Optional[list[str]], str]:
    """The loaded kernel modules named nvidia* (/proc/modules), or (None, why)."""
    names = fabric_loaded_modules(root)
    if names is None:
        return None, "/proc/modules: not readable"
    return sorted(name for name in names if name.startswith("nvidia")), ""


_BDF = re.compile(r"^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
ACS_ROOT = ("the bridges' ACS registers are in the PCI extended capabilities, which lspci -vvv and "
            "/sys/bus/pci/devices/*/config show to root only: run as root, or read them with sudo lspci -vvv | grep ACSCtl")


def pcie_paths(root: str, pci: list[dict[str, str]]) -> dict[str, list[str]]:
    """Each NVIDIA GPU and RDMA adapter -> the PCI bridges above it, root port first: the bus ids in its /sys/devices
    path (/sys/bus/pci/devices/<id> links there), the device's own left out."""
    devices = [dev["address"] for dev in pci if dev.get("class", "")[:6] in GPU_CLASSES]
    for name in rdma_devices(root):
        address = os.path.basename(resolve(root, f"/sys/class/infiniband/{name}/device"))
        if _BDF.match(address):
            devices.append(address)
    paths = {}
    for device in sorted(set(devices)):
        parts = resolve(root, f"/sys/bus/pci/devices/{device}").split("/")
        paths[device] = [part for part in parts[:-1] if _BDF.match(part)]
    return paths


def iommu_groups(root: str, devices: list[str]) -> dict[str, Optional[str]]:
    """Each device's IOMMU group type (identity, DMA, DMA-FQ), None where it is in no group (the IOMMU is off)."""
    out: dict[str, Optional[str]] = {}
    for device in devices:
        group = resolve(root, f"/sys/bus/pci/devices/{device}/iommu_group")
        kind = read_text(os.path.join(under(root, group), "type")) if os.path.isdir(under(root, group)) else None
        out[device] = kind.strip() if kind else None
    return out


def acs_of(root: str, bridges: list[str], search: str, timeout: float) -> tuple[Optional[dict[str, Any]], str]:
    """The ACS control bits of ``bridges``: from lspci -D -vvv, else from their config space (root only), or
    (None, why)."""
    if not bridges:
        return {"devices": {}}, ""
    text, error = run_tool(["lspci", "-D", "-vvv"], search, timeout)
    if text:
        found = parse_lspci_acs(text)["devices"]
        picked = {bridge: found[bridge] for bridge in bridges if bridge in found}
        if picked and all(dev["denied"] for dev in picked.values()):
            return None, f"lspci -vvv as {_user()}: Capabilities: <access denied>: {ACS_ROOT}"
        return {"devices": picked}, ""
    devices = {}
    for bridge in bridges:
        try:
            with open(under(root, f"/sys/bus/pci/devices/{bridge}/config"), "rb") as handle:
                config = handle.read(4096)
        except OSError:
            continue
        if len(config) <= 0x100:
            return None, f"{error}; /sys/bus/pci/devices/{bridge}/config: {len(config)} bytes readable: {ACS_ROOT}"
        devices[bridge] = {"name": "", "acsctl": parse_pci_config_acs(config), "denied": False}
    if not devices:
        return None, f"{error}; no bridge's /sys/bus/pci/devices/<id>/config could be read"
    return {"devices": devices}, ""


def pcie_state(root: str, pci: list[dict[str, str]], search: str, timeout: float) -> dict[str, Any]:
    """pcie_paths, the bridges' ACS bits, the kernel command line and the devices' IOMMU groups: where a GPU or an
    RDMA adapter is found (else only the empty paths)."""
    paths = pcie_paths(root, pci)
    if not paths:
        return {"pcie_paths": {}, "acs": None, "acs_error": "no GPU or RDMA adapter", "iommu_cmdline": None,
                "iommu_groups": {}}
    acs, acs_error = acs_of(root, sorted({b for bridges in paths.values() for b in bridges}), search, timeout)
    cmdline = read_text(under(root, "/proc/cmdline"))
    return {"pcie_paths": paths, "acs": acs, "acs_error": acs_error,
            "iommu_cmdline": cmdline.strip()[:4096] if cmdline is not None else None,
            "iommu_groups": iommu_groups(root, sorted(paths))}


def _user() -> str:
    """The login user's name (its uid where the passwd database has no entry, as in some containers)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def read_health(root: str, path: str, quick: bool, timeout: float) -> dict[str, Any]:
    """Everything ``hvdcluster health`` judges a node by (see DOCUMENTATION)."""
    search = os.pathsep.join(part for part in (path, os.environ.get("PATH", "")) if part)
    reading: dict[str, Any] = {"user": _user()}

    def tool(key: str, argv: list[str], seconds: float = timeout) -> None:
        reading[key], reading[f"{key}_error"] = run_tool(argv, search, seconds)

    tool("nvidia_smi_q", ["nvidia-smi", "-q"])
    tool("nvlink", ["nvidia-smi", "nvlink", "-s"])
    reading.update(kernel_log(search, timeout))
    ib_root = under(root, "/sys/class/infiniband")
    reading["ib"] = parse_ib_sysfs(ib_root) if os.path.isdir(ib_root) else None
    reading["modules"], reading["modules_error"] = loaded_modules(root)
    reading["pci"] = nvidia_pci(root)
    reading.update(pcie_state(root, reading["pci"], search, timeout))
    tool("fabricmanager_active", ["systemctl", "is-active", "nvidia-fabricmanager"])  # exits 3 when not active
    tool("fabricmanager_version", ["nv-fabricmanager", "--version"])
    tool("fabricmanager_journal", ["journalctl", "-u", "nvidia-fabricmanager", "-b", "--no-pager", "-q", "-n", "200"])
    if quick:
        reading["dcgm_diag"], reading["dcgm_diag_error"] = None, "skipped (--quick)"
    else:
        tool("dcgm_diag", ["dcgmi", "diag", "-r", "1"], timeout * 10)
    return reading
