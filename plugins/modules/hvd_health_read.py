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

import time

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_health_reader import TIMEOUT, read_health
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_module import AnsibleModule


ARGUMENT_SPEC = {
    "quick": {"type": "bool", "default": False},
    "timeout": {"type": "int", "default": TIMEOUT},
    "path": {"type": "str", "default": ""},
    "root": {"type": "path", "default": "/"},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    start = time.monotonic()
    reading = read_health(p["root"], p["path"], p["quick"], max(1, p["timeout"]))
    module.exit_json(changed=False, reading=reading, seconds=round(time.monotonic() - start, 3))


if __name__ == "__main__":
    main()
