# Copyright: hvdcluster developers
# Apache-2.0 (see galaxy.yml)
"""hvd_run's action: the argv run over the task's connection as one shell command (no module file sent, no Python
started on the node for it), with the task's environment; a task that becomes a user runs the module instead, light
where it can (plugins/plugin_utils/hvd_light.py)."""

from __future__ import annotations

import shlex

from ansible_collections.hvd.cluster.plugins.modules import hvd_run
from ansible_collections.hvd.cluster.plugins.plugin_utils.hvd_light import LightRunner


class ActionModule(LightRunner):
    """hvd.cluster.hvd_run"""

    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        if self._play_context.become:
            result.update(self.light_or_module(task_vars or {}))
            return result
        validation, params = self.validate_argument_spec(argument_spec=hvd_run.ARGUMENT_SPEC)
        argv = params["argv"]
        if not argv:
            result.update(failed=True, msg="argv is empty")
            return result
        # The task's environment as a module run gets it (VAR=value ... before the command), then the argv quoted.
        command = " ".join(part for part in (self._compute_environment_string(), shlex.join(argv)) if part)
        # Not sudoable (no become here): without a become, and without input, the ssh connection would ask for a
        # terminal (-tt), which merges stderr into stdout and ends lines with CR LF.
        done = self._low_level_execute_command(command, sudoable=False)
        result.update(hvd_run.outcome(argv, done["rc"], done.get("stdout", ""), done.get("stderr", "")))
        return result
