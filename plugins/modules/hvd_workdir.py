#!/usr/bin/python
"""Ansible module: hvdcluster's private work folder on a node.

Everything hvdcluster builds, downloads or stages on a node lives under one root-owned 0700 folder
(default ``/var/lib/hvdcluster``), never under a predictable name in a world-writable folder such as
``/var/tmp``: a local user who creates such a name first would get code run as root. The folder is
created here; one that already exists with another owner, a looser mode, or as a symlink is refused.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: hvd_workdir
short_description: Make (and vet) hvdcluster's private root-owned work folder and a sub-folder of it
description:
  - Creates I(root) (root-owned, mode 0700) when missing; refuses it when it exists as a symlink, with another
    owner or with group/other permissions. Then the same for I(root)/I(name).
  - With I(clean), the sub-folder starts empty (a build folder must not reuse leftovers).
options:
  root: {description: The state folder., type: path, default: /var/lib/hvdcluster}
  name: {description: "Sub-folder for one role's work (letters, digits, '.', '_', '-').", type: str, required: true}
  clean: {description: Empty the sub-folder first., type: bool, default: false}
author: hvdcluster developers (@hvdcluster)
"""

EXAMPLES = r"""
- name: Start from a clean private work folder (/var/lib/hvdcluster/bundle, root-owned 0700)
  hvd.cluster.hvd_workdir:
    name: bundle
    clean: true
  register: work

- name: Make the private download folder, keeping what it holds
  hvd.cluster.hvd_workdir:
    name: nvidia-repo
  register: download
"""

RETURN = r"""
path: {description: The sub-folder's absolute path., type: str, returned: always}
"""

# The folder's rules live in module_utils (hvd_artifact copies into such a folder in the same module run).
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_workdir import ROOT, workdir
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_module import AnsibleModule


ARGUMENT_SPEC = {
    "root": {"type": "path", "default": ROOT},
    "name": {"type": "str", "required": True},
    "clean": {"type": "bool", "default": False},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        path, changed = workdir(module.params["root"], module.params["name"], module.params["clean"],
                                module.check_mode)
    except (ValueError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=changed, path=path)


if __name__ == "__main__":
    main()
