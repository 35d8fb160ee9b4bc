# Copyright: hvdcluster developers
# Apache-2.0 (see galaxy.yml)
"""hvd_role_args' action: the roles' argument specs checked for every host of the play in one task on the controller,
where Ansible would check each role on each host in a task of its own (a role's prepended validation, which our
playbooks turn off with ``rolespec_validate: false``)."""

from __future__ import annotations

from pathlib import Path

from ansible.errors import AnsibleError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase

from ansible_collections.hvd.cluster.plugins.modules import hvd_role_args

try:  # where a value was read (file, line): ansible-core 2.19's data tags, not a public API yet
    from ansible._internal._datatag._tags import Origin
except ImportError:  # pragma: no cover - older or newer ansible-core: the messages without the place
    Origin = None

ROLES = Path(__file__).resolve().parents[2] / "roles"


def _where(value) -> str:
    """' (path:line)' where ``value`` (as read, before templating) says where it was read; '' where not."""
    tag = Origin.get_tag(value) if Origin is not None else None
    if tag is None or not tag.path:
        return ""
    return f" ({tag.path}:{tag.line_num})" if tag.line_num else f" ({tag.path})"


class ActionModule(ActionBase):
    """hvd.cluster.hvd_role_args"""

    TRANSFERS_FILES = False
    _requires_connection = False

    def _spec(self, role: str) -> dict:
        """The options of the role's `main` entry point, as Ansible's own check reads them."""
        path = ROLES / role / "meta" / "argument_specs.yml"
        if not path.is_file():
            raise AnsibleError(f"hvd_role_args: {role!r} is not a role of this collection (no {path})")
        specs = self._loader.load_from_file(str(path)) or {}
        return ((specs.get("argument_specs") or {}).get("main") or {}).get("options") or {}

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        params = self.validate_argument_spec(argument_spec=hvd_role_args.ARGUMENT_SPEC)[1]
        roles = [name.rsplit(".", 1)[-1] for name in params["roles"]]
        specs = {role: self._spec(role) for role in roles}
        validators = {role: ArgumentSpecValidator(spec) for role, spec in specs.items()}
        manager = self._task.get_variable_manager()
        play = self._task.get_play()
        hosts = params["hosts"] if params["hosts"] is not None else task_vars["ansible_play_batch"]
        # A role this play does not run has no defaults here: a value that cannot be templated without them is left
        # to the check of the role's own play (the pre-flight checks every role of the converge ahead of them).
        loaded = {role.get_name().rsplit(".", 1)[-1] for role in play.get_roles()}
        errors: dict[str, list[str]] = {}
        for name in hosts:
            # The host's variables as a task of this play sees them (inventory, facts, the play's and the roles'
            # defaults): what the role's own check would have read there.
            if name == task_vars.get("inventory_hostname"):
                host_vars = task_vars
            else:
                # the inventory as the variable manager holds it (no public accessor; the one the strategy uses)
                host = manager._inventory.get_host(name)
                if host is None:
                    errors.setdefault(name, []).append("not a host of the inventory")
                    continue
                host_vars = manager.get_vars(play=play, host=host, task=self._task)
            templar = self._templar.copy_with_new_env(available_variables=host_vars)
            for role, spec in specs.items():
                values, deferred, found = {}, set(), errors.setdefault(name, [])
                for key in spec:
                    if key not in host_vars:
                        continue
                    try:
                        values[key] = templar.template(host_vars[key])
                    except AnsibleError as exc:
                        if role not in loaded:
                            deferred.add(key)
                        else:
                            found.append(f"hvd.cluster.{role}: {key}{_where(host_vars[key])}: {exc.message}")
                validator = validators[role] if not deferred else ArgumentSpecValidator(
                    {key: option for key, option in spec.items() if key not in deferred})
                checked = validator.validate(values, validate_role_argument_spec=True)
                for msg in checked.error_messages:
                    # the option the message names (the longest that fits: hvd_x_y, not hvd_x, in "hvd_x_y ...")
                    named = max((key for key in values if key in msg), key=len, default=None)
                    found.append(f"hvd.cluster.{role}: {msg}{_where(host_vars[named]) if named else ''}")
        errors = {host: found for host, found in errors.items() if found}
        result.update(changed=False, hosts=list(hosts), roles=[f"hvd.cluster.{r}" for r in roles],
                      argument_errors=errors)
        if errors:
            result.update(failed=True, msg="Validation of arguments failed: " + "; ".join(
                f"{host}: {msg}" for host, found in errors.items() for msg in found))
        else:
            result["msg"] = f"the arguments of {', '.join(result['roles'])} are valid on {len(hosts)} host(s)"
        return result
