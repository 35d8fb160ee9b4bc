# Copyright: hvdcluster developers
# Apache-2.0 (see galaxy.yml)
from __future__ import annotations

DOCUMENTATION = r"""
name: hvd_default
author: hvdcluster developers (@hvdcluster)
short_description: The defaults several hvd.cluster roles share, written once
description:
  - Returns the shared default named by each term, so every role that needs it reads the same value.
  - C(env_prefix) the Python environment's prefix, the same on every node.
  - C(artifact_dir) the login user's folder on each node that keeps the copies of artifacts peers pull from.
  - C(run_dir) the folder on each node of the job leases (hvdcluster run) and roll marks (hvdcluster up --rolling).
  - C(nvidia_pci_vendor) NVIDIA's PCI vendor id as sysfs writes it (how a node's NVIDIA devices are found on the bus).
  - C(controller_cache) the controller cache folder, E(HVDCLUSTER_CACHE), else C(~/.cache/hvdcluster) of the user
    who runs the converge (read on the controller).
options:
  _terms:
    description: Names of shared defaults (env_prefix, artifact_dir, run_dir, nvidia_pci_vendor, controller_cache).
    required: true
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: The env's prefix unless hvd_pyenv_prefix is set
  ansible.builtin.debug:
    msg: "{{ hvd_pyenv_prefix | default(lookup('hvd.cluster.hvd_default', 'env_prefix')) }}"
"""

RETURN = r"""
_raw:
  description: The value of each named default, in the order asked.
  type: list
  elements: str
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_defaults


class LookupModule(LookupBase):
    """lookup('hvd.cluster.hvd_default', NAME, ...)"""

    def run(self, terms, variables=None, **kwargs):
        unknown = [term for term in terms if term not in hvd_defaults.NAMES]
        if unknown:
            raise AnsibleLookupError(f"hvd.cluster.hvd_default: unknown default {', '.join(map(repr, unknown))} "
                                     f"(known: {', '.join(hvd_defaults.NAMES)})")
        return [hvd_defaults.value(term) for term in terms]
