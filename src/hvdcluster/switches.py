"""The roles a whole run leaves out: a role with an on/off switch (``<role>_enabled`` in its defaults) whose switch is
off on every node of the inventory hvdcluster wrote.

Each such role's playbook includes it only where its switch is on, a `when` read per node (playbooks/cuda.yml ...).
That per-node decision costs the controller a task and host each (its variables computed, a worker, the runner's
events: bench/README, "A switched-off role's play"), on every node of every converge. Where hvdcluster knows the
switch is off everywhere, it says so before the run (``hvd_plays_off``, an extra variable) and the play's host pattern
leaves it out whole: no host, no task. A run without it (`ansible-playbook` by hand) decides per node as before.

The switch is judged as the playbook's own `when` renders over each node's inventory variables (group_vars/all/ and
the host's), the play's vars over them. Where that cannot be known here (a variable the `when` reads is itself a
template, an inventory hvdcluster did not write, a `when` that does not render) the role is not left out.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml

from . import paths

def switched_roles() -> dict[str, dict[str, Any]]:
    """Role name -> its playbook's play (parsed) for every role with an on/off switch and a playbook of its own."""
    home = paths.ansible_home()
    out = {}
    for role in sorted(p for p in (home / "roles").iterdir() if p.is_dir()):
        defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {}
        playbook = home / "playbooks" / (role.name.removeprefix("hvd_") + ".yml")
        if f"{role.name}_enabled" in defaults and playbook.is_file():
            out[role.name] = yaml.safe_load(playbook.read_text())[0]
    return out


def switch_when(play: dict[str, Any]) -> str:
    """The `when` of the play's one include_role task: the role's switch as the playbook reads it."""
    (task,) = [t for t in play["tasks"] if "ansible.builtin.include_role" in t]
    when = task["when"]
    return " and ".join(f"({w})" for w in when) if isinstance(when, list) else str(when)


@cache
def _env() -> Any:
    """Plain Jinja with Ansible's `bool` filter: the filters a switch reads (made once, for every node and role)."""
    import jinja2
    from ansible.module_utils.parsing.convert_bool import boolean

    env = jinja2.Environment(undefined=jinja2.Undefined)
    env.filters["bool"] = lambda value: boolean(value, strict=False)
    return env


def is_on(when: str, playvars: dict[str, Any], scope: dict[str, Any]) -> bool | None:
    """The switch for one node: ``when`` rendered with ``scope`` (its inventory variables) and the play's vars over
    them, as Ansible would; None where it cannot be known here."""
    import jinja2
    from jinja2 import meta
    from ansible.module_utils.parsing.convert_bool import boolean

    env = _env()

    def templated(value: Any) -> bool:
        if isinstance(value, str):
            return "{{" in value or "{%" in value
        if isinstance(value, dict):
            return any(templated(v) for v in value.values())
        if isinstance(value, (list, tuple)):
            return any(templated(v) for v in value)
        return False

    try:
        names = meta.find_undeclared_variables(env.parse("{{ " + when + " }}"))
        for var, text in playvars.items():
            if isinstance(text, str) and var in names:
                names |= meta.find_undeclared_variables(env.parse(text))
        if any(templated(scope[n]) for n in names if n in scope):
            return None  # an inventory value Ansible would template first
        outside = {**scope}
        for var, text in playvars.items():
            outside[var] = env.from_string(text).render(scope) if isinstance(text, str) and "{{" in text else text
        return boolean(env.from_string("{{ " + when + " }}").render(outside), strict=False)
    except (jinja2.TemplateError, TypeError, ValueError):
        return None


def plays_off(inventory_dir: Path) -> list[str]:
    """The switched roles that are off on every node of ``inventory_dir`` (hvdcluster's own), sorted; [] where that
    cannot be known."""
    from .inventory import read

    root = Path(inventory_dir)
    # hvdcluster writes hosts.yml and group_vars/all/; variables beside them that Ansible reads too (host_vars/,
    # another group's) may set a switch this reading does not see
    groups = root / "group_vars"
    if not (root / "hosts.yml").is_file() or (root / "host_vars").exists() or (
            groups.is_dir() and any(p.name != "all" for p in groups.iterdir())):
        return []
    try:
        inv = read(root)
    except (OSError, yaml.YAMLError, AttributeError, TypeError):
        return []
    if not inv.hosts:
        return []
    off = []
    for role, play in switched_roles().items():
        when, playvars = switch_when(play), dict(play.get("vars") or {})
        if all(is_on(when, playvars, {**inv.vars, **host}) is False for host in inv.hosts.values()):
            off.append(role)
    return off
