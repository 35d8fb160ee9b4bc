"""The playbooks' role switches: a role with an on/off switch (``<role>_enabled`` in its defaults) is included by its
playbook only where the switch is on, decided before the role is loaded (so without its defaults): the playbook's
`when` must read the switch exactly as the role would. Plain YAML and Jinja, no Ansible run."""

from __future__ import annotations

import itertools
from pathlib import Path

import jinja2
import pytest
import yaml
from ansible.module_utils.parsing.convert_bool import boolean

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p for p in (ROOT / "roles").iterdir() if p.is_dir())
SWITCHED = [r for r in ROLES if (ROOT / "playbooks" / (r.name.removeprefix("hvd_") + ".yml")).exists()
            and f"{r.name}_enabled" in (yaml.safe_load((r / "defaults" / "main.yml").read_text()) or {})]


@pytest.mark.parametrize("role", SWITCHED, ids=lambda p: p.name)
def test_a_switched_roles_playbook_reads_its_switch_as_the_role_would(role: Path) -> None:
    """The playbook decides before the role is loaded, so without the role's defaults: its `when` must come out as
    the role's own switch (its default, or the inventory's value, or the play's) for every input that feeds it."""
    env = jinja2.Environment(undefined=jinja2.Undefined)
    env.filters["bool"] = lambda value: boolean(value, strict=False)
    play = yaml.safe_load((ROOT / "playbooks" / (role.name.removeprefix("hvd_") + ".yml")).read_text())[0]
    (task,) = play["tasks"]
    assert task["ansible.builtin.include_role"]["name"] == f"hvd.cluster.{role.name}", task
    when = task["when"]
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text())
    switch = f"{role.name}_enabled"
    playvars = dict(play.get("vars") or {})

    def render(text, scope):
        return env.from_string(text).render(scope) if isinstance(text, str) and "{{" in text else text

    grid = {"hvd_gpu": [None, True, False, "false"], switch: [None, True, False],
            "hvd_nccl_tests_url": [None, "", "https://mirror.example/nccl-tests.tar.gz"],
            "hvd_scheduler": [None, {}, {"kind": "slurm"}, {"kind": "slurm", "containers": "pyxis"}]}
    for values in itertools.product(*grid.values()):
        inventory = {k: v for k, v in zip(grid, values) if v is not None}
        # the role's side: its defaults under the inventory, the play's vars over both, each template rendered
        scope = {**defaults, **inventory, **playvars}
        expected = boolean(render(scope[switch], scope), strict=False)
        # the playbook's side: no role defaults (a play's var rendered as Ansible would, once referenced)
        outside = {**inventory, **{k: render(v, {**inventory, **playvars}) for k, v in playvars.items()}}
        got = boolean(render("{{ " + when + " }}", outside), strict=False)
        assert got == expected, (inventory, when)
