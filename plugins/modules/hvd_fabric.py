#!/usr/bin/python
"""Ansible module: which GPU fabric pieces a node needs from the hardware it has, and what it has of them. Read-only.

Persistence mode on nodes with NVIDIA GPUs, nvidia-peermem where GPUs and RDMA adapters are both present, Fabric
Manager where NVSwitches are (plugins/module_utils/hvd_fabric.py: the rules, and the reader `check` uses for
driver.persistence, driver.peermem and driver.fabricmanager). hvd_nvidia_driver applies the plan and reads it back.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: hvd_fabric
short_description: Plan and read the GPU fabric pieces of a node (persistence mode, nvidia-peermem, Fabric Manager)
description:
  - Reads the NVIDIA PCI functions (GPUs, NVSwitches) and the RDMA adapters from sysfs and decides, with the driver's
    mode, which of persistence mode, nvidia-peermem and Fabric Manager the node gets, and why not where it does not.
  - Reads what the node has of each piece it gets, as C(hvdcluster check) does.
  - Only reads files; safe in check mode.
options:
  mode:
    description: The driver's mode on this node (hvd_nvidia_driver), C(kernel), C(image), C(user-space), C(host) or
      C(skipped).
    type: str
    required: true
  persistence:
    description: C(auto) (where a GPU is found, and in an image), C(true) or C(false).
    type: str
    default: auto
  peermem:
    description: C(auto) (where GPUs and RDMA adapters are both found), C(true) or C(false).
    type: str
    default: auto
  fabricmanager:
    description: C(auto) (where NVSwitches are found), C(true) or C(false).
    type: str
    default: auto
  root:
    description: The file system root to read (tests).
    type: path
    default: /
author: hvdcluster developers (@hvdcluster)
"""

EXAMPLES = r"""
- name: Find the fabric pieces this node needs
  hvd.cluster.hvd_fabric:
    mode: kernel
  register: fabric
"""

RETURN = r"""
plan:
  description: Per piece (persistence, peermem, fabricmanager), C(wanted) and C(why).
  type: dict
  returned: always
state:
  description: Per piece the node gets, C(driver.<piece>) - C(ok) or what is wrong, in one line.
  type: dict
  returned: always
gpus:
  description: The PCI addresses of the NVIDIA GPUs.
  type: list
  returned: always
nvswitches:
  description: The PCI addresses of the NVSwitches.
  type: list
  returned: always
rdma:
  description: The RDMA adapters (/sys/class/infiniband).
  type: list
  returned: always
modules:
  description: The loaded kernel modules named nvidia*.
  type: list
  returned: always
driver:
  description: The installed driver's version (NVML's library), empty when none or several.
  type: str
  returned: always
"""

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_driver import find_nvml, installed_versions
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_fabric import gpus, loaded_modules, nvidia_pci, \
    nvswitches, plan, rdma_devices
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_state_stack import fabric_items


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(argument_spec={
        "mode": {"type": "str", "required": True},
        "persistence": {"type": "str", "default": "auto"},
        "peermem": {"type": "str", "default": "auto"},
        "fabricmanager": {"type": "str", "default": "auto"},
        "root": {"type": "path", "default": "/"},
    }, supports_check_mode=True)
    p = module.params
    root = p["root"]
    pci, rdma = nvidia_pci(root), rdma_devices(root)
    pieces = plan(pci, rdma, p["mode"], p["persistence"], p["peermem"], p["fabricmanager"])
    installed = installed_versions(find_nvml(root))
    wanted = {piece: bool(v["wanted"]) for piece, v in pieces.items()}
    module.exit_json(changed=False, plan=pieces, gpus=gpus(pci), nvswitches=nvswitches(pci), rdma=rdma,
                     modules=sorted(m for m in loaded_modules(root) or [] if m.startswith("nvidia")),
                     driver=installed[0] if len(installed) == 1 else "",
                     state=fabric_items(root, wanted, p["mode"], installed))


if __name__ == "__main__":
    main()
