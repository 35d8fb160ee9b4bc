"""The roles and tasks a whole run leaves out: a role with an on/off switch (``<role>_enabled`` in its defaults), or a
task tagged ``<role>_switch_<name>``, whose switch is off on every node of the inventory hvdcluster wrote.

Each such role's playbook includes it only where its switch is on, a `when` read per node (playbooks/cuda.yml ...).
That per-node decision costs the controller a task and host each (its variables computed, a worker, the runner's
events: bench/README, "A switched-off role's play"), on every node of every converge. Where hvdcluster knows the
switch is off everywhere, it says so before the run (``hvd_plays_off``, an extra variable) and the play's host pattern
leaves it out whole: no host, no task. A run without it (`ansible-playbook` by hand) decides per node as before.

A switched task (the offline bundle's include, the hostname, Open MPI's source build) is left out the same way with
``--skip-tags`` (tags are filtered when the play is loaded, before any host): its switch is the first condition of its
`when` list, rendered over the role's defaults, each node's inventory variables and the run's extra variables.

The switch is judged as the playbook's own `when` renders over each node's inventory variables (group_vars/all/ and
the host's), the play's vars over them. Where that cannot be known here (a variable the `when` reads is itself a
template, an inventory hvdcluster did not write, a `when` that does not render) the role is not left out.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from . import paths, yamlread

def switched_roles() -> dict[str, dict[str, Any]]:
    """Role name -> its playbook's play (parsed) for every role with an on/off switch and a playbook of its own."""
    home = paths.ansible_home()
    out = {}
    for role in sorted(p for p in (home / "roles").iterdir() if p.is_dir()):
        defaults = yamlread.safe_load((role / "defaults" / "main.yml").read_text()) or {}
        playbook = home / "playbooks" / (role.name.removeprefix("hvd_") + ".yml")
        if f"{role.name}_enabled" in defaults and playbook.is_file():
            out[role.name] = yamlread.safe_load(playbook.read_text())[0]
    return out


def _tasks(node: Any) -> list[dict[str, Any]]:
    """Every task of a tasks file, those inside blocks included."""
    found: list[dict[str, Any]] = []
    for task in node if isinstance(node, list) else []:
        if isinstance(task, dict):
            found.append(task)
            for key in ("block", "rescue", "always"):
                found += _tasks(task.get(key))
    return found


@cache
def switched_tasks() -> dict[str, tuple[str, str]]:
    """Tag -> (role, switch) for every task of a role tagged ``<role>_switch_<name>``: a task off on every node of
    most clusters (a hostname not set, no offline bundle, Open MPI not built from source) whose `when` is a list
    and whose first condition, its switch, reads only the inventory and the role's defaults."""
    home = paths.ansible_home()
    out: dict[str, tuple[str, str]] = {}
    for role in sorted(p for p in (home / "roles").iterdir() if p.is_dir()):
        tag = re.compile(rf"{role.name}_switch_\w+")
        for path in sorted((role / "tasks").glob("*.yml")):
            for task in _tasks(yamlread.safe_load(path.read_text())):
                for name in [t for t in task.get("tags") or [] if tag.fullmatch(t)]:
                    when = task.get("when")
                    if not isinstance(when, list) or not when or name in out:
                        raise ValueError(f"{path}: a task tagged {name} must be the only one and have a `when` list "
                                         "whose first condition is its switch")
                    out[name] = (role.name, str(when[0]))
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
                inner = meta.find_undeclared_variables(env.parse(text))
                if inner & set(playvars) - {var}:
                    return None  # a value made of another such value: rendered here with the inventory's alone
                names |= inner
        if any(templated(scope[n]) for n in names if n in scope):
            return None  # an inventory value Ansible would template first
        outside = {**scope}
        for var, text in playvars.items():
            if var in names:  # only what the switch reads (a role's other defaults may need Ansible's lookups)
                outside[var] = env.from_string(text).render(scope) if isinstance(text, str) and "{{" in text else text
        return boolean(env.from_string("{{ " + when + " }}").render(outside), strict=False)
    except (jinja2.TemplateError, TypeError, ValueError):
        return None


def _inventory(inventory_dir: Path) -> Any:
    """hvdcluster's own inventory as read here, or None where variables Ansible reads may lie outside it."""
    from .inventory import read

    root = Path(inventory_dir)
    # hvdcluster writes hosts.yml and group_vars/all/; variables beside them that Ansible reads too (host_vars/,
    # another group's) may set a switch this reading does not see
    groups = root / "group_vars"
    if not (root / "hosts.yml").is_file() or (root / "host_vars").exists() or (
            groups.is_dir() and any(p.name != "all" for p in groups.iterdir())):
        return None
    try:
        inv = read(root)
    except (OSError, yaml.YAMLError, AttributeError, TypeError):
        return None
    return inv if inv.hosts else None


def plays_off(inventory_dir: Path) -> list[str]:
    """The switched roles that are off on every node of ``inventory_dir`` (hvdcluster's own), sorted; [] where that
    cannot be known."""
    return left_out(inventory_dir)[0]


def tasks_off(inventory_dir: Path, extravars: dict[str, Any] | None = None) -> list[str]:
    """The tags of the switched tasks (switched_tasks) that are off on every node of ``inventory_dir``, sorted: each
    switch rendered over the role's defaults, the node's inventory variables and the run's extra variables; [] where
    that cannot be known."""
    return left_out(inventory_dir, extravars)[1]


def left_out(inventory_dir: Path, extravars: dict[str, Any] | None = None) -> tuple[list[str], list[str]]:
    """plays_off and tasks_off from one reading of the inventory (a run asks for both)."""
    inv = _inventory(inventory_dir)
    if inv is None:
        return [], []
    plays = []
    for role, play in switched_roles().items():
        when, playvars = switch_when(play), dict(play.get("vars") or {})
        if all(is_on(when, playvars, {**inv.vars, **host}) is False for host in inv.hosts.values()):
            plays.append(role)
    home = paths.ansible_home()
    scopes = [{**inv.vars, **host, **(extravars or {})} for host in inv.hosts.values()]
    defaults: dict[str, dict[str, Any]] = {}
    tasks = []
    for tag, (role, when) in switched_tasks().items():
        if role not in defaults:
            defaults[role] = yamlread.safe_load((home / "roles" / role / "defaults" / "main.yml").read_text()) or {}
        # the defaults rank below the inventory: only those the inventory does not set are rendered as defaults
        if all(is_on(when, {k: v for k, v in defaults[role].items() if k not in scope}, scope) is False
               for scope in scopes):
            tasks.append(tag)
    return plays, sorted(tasks)
