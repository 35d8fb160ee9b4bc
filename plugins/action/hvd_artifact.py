# Copyright: hvdcluster developers
# Apache-2.0 (see galaxy.yml)
"""hvd_artifact's action: ``state: verified`` on the controller itself (a task delegated to localhost with the local
connection and no become: the controller cache's look before a build or a copy) runs the module's own function in
the worker, with no module file sent and no Python started for it; everything else runs the module light where it can
(plugins/plugin_utils/hvd_light.py), else as Ansible runs it."""

from __future__ import annotations

from ansible_collections.hvd.cluster.plugins.modules import hvd_artifact
from ansible_collections.hvd.cluster.plugins.plugin_utils.hvd_light import LightRunner


class ActionModule(LightRunner):
    """hvd.cluster.hvd_artifact"""

    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        here = (self._connection.transport == "local" and not self._play_context.become
                and args.get("state", "verified") == "verified")
        if not here:
            result.update(self.light_or_module(task_vars or {}))
            return result
        validation, params = self.validate_argument_spec(argument_spec=hvd_artifact.ARGUMENT_SPEC,
                                                         required_if=hvd_artifact.REQUIRED_IF)
        try:
            result.update(hvd_artifact.verified(params, bool(self._task.check_mode)))
        except (ValueError, OSError) as exc:
            result.update(failed=True, msg=str(exc))
        return result
