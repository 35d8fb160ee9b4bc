"""Fast tier: the facts a run gathers, once per node and without the hardware (the CPUs and memory only where a role
needs them)."""

from __future__ import annotations

import yaml

from hvdcluster.switches import _tasks
from tests.conftest import ROOT
from tests.test_static import _plays


def test_every_play_that_gathers_facts_gathers_the_pre_flights_subset() -> None:
    """Facts are gathered once per run: the pre-flight's gather (the gather_facts action, which marks them gathered,
    not setup) and every play's own gather (when the pre-flight did not run) take the same subset, never the hardware
    (its mounts, devices and DMI on every run; "!mounts" does not take the mounts out of it). A role that needs the
    CPUs or the memory reads them itself, only where they are not read yet (a builder, hvd_slurm)."""
    tasks = yaml.safe_load((ROOT / "roles" / "hvd_preflight" / "tasks" / "main.yml").read_text())
    gathers = [t for t in tasks if any(k.endswith(("setup", "gather_facts")) for k in t)]
    assert [list(t) for t in gathers] == [["name", "ansible.builtin.gather_facts"]], gathers
    subset = gathers[0]["ansible.builtin.gather_facts"]["gather_subset"]
    assert not {"all", "hardware"} & set(subset), subset
    for path in ROOT.glob("roles/*/tasks/*.yml"):
        for task in _tasks(yaml.safe_load(path.read_text())):
            setup = task.get("ansible.builtin.setup")
            if isinstance(setup, dict) and "hardware" in setup.get("gather_subset", []) and "delegate_to" not in task:
                when = " ".join(task["when"] if isinstance(task.get("when"), list) else [str(task.get("when"))])
                assert "processor_vcpus is not defined" in when, f"{path}: {task['name']}"
    plays = _plays()
    gathering = [(name, play.get("gather_subset")) for name, play in plays if play.get("gather_facts", True)]
    assert gathering and [(name, s) for name, s in gathering if s != subset] == []
