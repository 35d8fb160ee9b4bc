# Copyright: hvdcluster developers
# Apache-2.0 (see galaxy.yml)
"""hvd_env_prune's action: the module run light, without Ansible's AnsiballZ payload (plugins/plugin_utils/hvd_light.py)."""

from ansible_collections.hvd.cluster.plugins.plugin_utils.hvd_light import LightAction


class ActionModule(LightAction):
    """hvd.cluster.hvd_env_prune"""
