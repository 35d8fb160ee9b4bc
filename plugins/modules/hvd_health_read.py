#!/usr/bin/python
"""Ansible module: the raw material of ``hvdcluster health`` on one node, read-only, as the login user.

It asks the GPU and fabric tools and reads a few kernel files, each tool with a short timeout; a tool that is
missing, refused or slow is recorded (``<key>: null`` and ``<key>_error``), never a failed task: a CPU node, a node
without DCGM and a user who may not read the kernel log all answer. The texts come back as the tools printed
them (the kernel log cut to the lines that can name a GPU or an NVSwitch); the controller parses and judges them
with plugins/module_utils/hvd_health*.py (src/hvdcluster/health.py). Only the InfiniBand ports and the ACS
registers are parsed here, with hvd_health_net.py's parse_ib_sysfs and parse_lspci_acs.

It only reads: safe in check mode, never changes anything.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: hvd_health_read
short_description: Read what a node's GPU and fabric health is judged from (nvidia-smi, kernel log, sysfs, DCGM)
description:
  - Returns I(reading), a dict of the tools' texts and a few file reads; the controller parses and judges them.
  - C(nvidia_smi_q) (C(nvidia-smi -q)), C(nvlink) (C(nvidia-smi nvlink -s)), C(kernel_log) (C(journalctl -k -b),
    else C(dmesg); only the lines that mention NVRM, SXid, nvidia or nvswitch), C(kernel_log_source),
    C(fabricmanager_active) (C(systemctl is-active nvidia-fabricmanager)), C(fabricmanager_version)
    (C(nv-fabricmanager --version)), C(fabricmanager_journal) (its unit's journal since boot), C(dcgm_diag)
    (C(dcgmi diag -r 1), unless I(quick)). Each is null when the tool is missing, failed, was refused or timed out,
    and C(<key>_error) then says which.
  - C(ib) - the ports under /sys/class/infiniband (plugins/module_utils/hvd_health_net.py parse_ib_sysfs); null without that
    folder (no RDMA driver loaded).
  - C(modules) - the loaded kernel modules whose name starts with nvidia (/proc/modules).
  - C(pci) - the NVIDIA PCI functions (/sys/bus/pci/devices/*/vendor 0x10de), each with C(address), C(class) and
    C(device); class 0x0300xx or 0x0302xx is a GPU, 0x068000 an NVSwitch.
  - C(pcie_paths) - each GPU and RDMA adapter (/sys/class/infiniband/*/device) with the PCI bridges above it, root
    port first (from its /sys/devices path); C(acs) - those bridges' ACS control bits as C(lspci -D -vvv) prints them
    (plugins/module_utils/hvd_health_net.py parse_lspci_acs), null with C(acs_error) where it could not be read (the
    extended capabilities are root's to read); C(iommu_cmdline) (/proc/cmdline) and C(iommu_groups) (each of those
    devices' IOMMU group type, /sys/kernel/iommu_groups/<n>/type; null where it is in none). Read only where there
    is a GPU or an RDMA adapter.
  - Runs as the login user, without sudo; reads only; supports check mode.
options:
  quick:
    description: Leave dcgmi diag out (the slowest read).
    type: bool
    default: false
  timeout:
    description: Seconds each tool may take (dcgmi diag gets ten times as long).
    type: int
    default: 15
  path:
    description: Folders searched for the tools before the node's PATH (tests put fake tools there).
    type: str
    default: ""
  root:
    description: For tests only - read the node's files (/proc, /sys) below this folder instead of /.
    type: path
    default: /
author: hvdcluster developers (@hvdcluster)
"""

EXAMPLES = r"""
- name: Read the node's health
  hvd.cluster.hvd_health_read:
    quick: true
  register: hvd_health
"""

RETURN = r"""
reading:
  description: The tools' texts and the file reads, each text null with C(<key>_error) where it could not be had.
  type: dict
  returned: always
  sample: {"nvidia_smi_q": null, "nvidia_smi_q_error": "nvidia-smi: not installed", "ib": null, "modules": [],
           "pci": [], "kernel_log": null, "kernel_log_error": "dmesg: Operation not permitted"}
"""

import getpass
import os
import re
import shutil
import subprocess
import time
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


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "quick": {"type": "bool", "default": False},
            "timeout": {"type": "int", "default": 15},
            "path": {"type": "str", "default": ""},
            "root": {"type": "path", "default": "/"},
        },
        supports_check_mode=True,
    )
    p = module.params
    start = time.monotonic()
    reading = read_health(p["root"], p["path"], p["quick"], max(1, p["timeout"]))
    module.exit_json(changed=False, reading=reading, seconds=round(time.monotonic() - start, 3))


if __name__ == "__main__":
    main()
