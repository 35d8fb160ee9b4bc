#!/usr/bin/python
"""Ansible module: can the NVIDIA driver load after this node's next boot? Read-only.

For the kernel the boot loader starts next (GRUB's default, else the newest installed image) it looks for the
NVIDIA modules built for that exact version, the kernel's headers, DKMS's record and, where the build failed, the
last lines of its make.log (plugins/module_utils/hvd_kernel.py: the same reader `check` uses for driver.next_boot).
hvd_nvidia_driver runs it before any reboot and stops the node's converge when the modules are not there.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: hvd_kernel_guard
short_description: Check that the kernel a node boots next has the NVIDIA modules (read-only)
description:
  - Finds the kernel the node boots next (the GRUB default, a one-shot next_entry first; else the newest installed
    image) and looks for the nvidia, nvidia-modeset and nvidia-uvm modules built for that exact version.
  - Says why they are missing - headers missing, DKMS build failed (with the last lines of its make.log) or not
    built - in one line.
  - Says whether that kernel's initramfs was built after the nouveau blacklist (C(initramfs_current)), so the role
    rebuilds only an initramfs that predates it.
  - Only reads files; safe in check mode. Meaningful where the driver runs in kernel mode.
options:
  kernel:
    description: Judge this kernel version instead of the one booted next.
    type: str
  root:
    description: The file system root to read (tests).
    type: path
    default: /
author: hvdcluster developers (@hvdcluster)
"""

EXAMPLES = r"""
- name: Check that the kernel the node boots next has the NVIDIA modules
  hvd.cluster.hvd_kernel_guard:
  register: guard
"""

RETURN = r"""
ok:
  description: Every NVIDIA module is there for that kernel.
  type: bool
  returned: always
kernel:
  description: The kernel judged.
  type: str
  returned: always
how:
  description: How the kernel was found (GRUB's default, next_entry, the newest image, ...).
  type: str
  returned: always
modules:
  description: Each NVIDIA module's file built for that kernel (below /lib/modules/<kernel>), or null.
  type: dict
  returned: always
missing:
  description: The modules not found.
  type: list
  returned: always
cause:
  description: None, C(headers missing), C(DKMS build failed) or C(not built).
  type: str
  returned: always
headers:
  description: The kernel's headers are installed.
  type: bool
  returned: always
log_tail:
  description: The last lines of DKMS's make.log when the build failed.
  type: list
  returned: always
initramfs_current:
  description: >-
    The kernel's initramfs was built after the newest modprobe.d file that blacklists nouveau (false: it predates it
    and must be rebuilt to carry it); null where there is no blacklist or no initramfs.
  type: bool
  returned: always
message:
  description: One line saying what was found.
  type: str
  returned: always
"""

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_kernel import initramfs_after_blacklist, module_guard
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_module import AnsibleModule


ARGUMENT_SPEC = {
    "kernel": {"type": "str"},
    "root": {"type": "path", "default": "/"},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    guard = module_guard(module.params["root"], kernel=module.params["kernel"] or None)
    keys = ("kernel", "how", "modules", "missing", "cause", "headers", "log_tail", "message")
    initramfs = initramfs_after_blacklist(module.params["root"], guard["kernel"]) if guard["kernel"] else None
    module.exit_json(changed=False, ok=not guard["missing"] and bool(guard["kernel"]), initramfs_current=initramfs,
                     **{key: guard.get(key) for key in keys})


if __name__ == "__main__":
    main()
