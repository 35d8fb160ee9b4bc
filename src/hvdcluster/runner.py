"""Run a playbook through ansible-runner: events to a callback, full logs kept per run."""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import paths

Event = dict[str, Any]


@dataclass(frozen=True)
class RunResult:
    rc: int
    status: str  # ansible-runner's: successful, failed, timeout, canceled
    log: Path  # the full ansible-playbook output of this run
    artifacts: Path  # job_events/, stdout, rc ... of this run


def _ansible_env() -> dict[str, str]:
    home = paths.ansible_home()
    return {
        "ANSIBLE_CONFIG": str(home / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(home / "roles"),
        # ansible-runner turns host key checking off unless told otherwise. We never do.
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_NOCOLOR": "1",
        # A PATH on which ansible finds the interpreter and tools of this installation.
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }


STALE_ENV_FILES = ("cmdline", "extravars", "envvars", "passwords", "settings", "ssh_key")


def run_playbook(
    inventory_dir: Path,
    playbook: str,
    *,
    limit: str | None = None,
    tags: str | None = None,
    check: bool = False,
    diff: bool = False,
    extravars: dict[str, Any] | None = None,
    on_event: Callable[[Event], None] | None = None,
) -> RunResult:
    """Run ``playbooks/<playbook>`` against ``inventory_dir``; logs go to ``inventory_dir/runs``."""
    import ansible_runner  # heavy import: only when a run is made

    args: list[str] = []
    if limit:
        args += ["--limit", limit]
    if tags:
        args += ["--tags", tags]
    if check:
        args.append("--check")
    if diff:
        args.append("--diff")

    private = (inventory_dir / "runs").resolve()
    private.mkdir(parents=True, exist_ok=True)
    # ansible-runner reads env/cmdline, env/extravars ... of an earlier run when a run passes none: an old
    # --limit or --verify would stick. Nothing is written there (suppress_env_files) and leftovers go.
    for stale in STALE_ENV_FILES:
        (private / "env" / stale).unlink(missing_ok=True)
    ident = time.strftime("%Y%m%d-%H%M%S") + "-" + Path(playbook).stem

    def handler(event: Event) -> bool:
        if on_event is not None:
            on_event(event)
        return True  # keep the event in the artifacts

    result = ansible_runner.run(
        private_data_dir=str(private),
        ident=ident,
        playbook=str(paths.playbook(playbook)),
        # The inventory file itself (group_vars/ next to it still load): runs/ and ssh/ are no inventory.
        inventory=str((inventory_dir / "hosts.yml").resolve()),
        cmdline=shlex.join(args) if args else None,
        extravars=extravars or None,
        suppress_env_files=True,
        envvars=_ansible_env(),
        event_handler=handler,
        quiet=True,
        rotate_artifacts=20,
    )
    artifacts = Path(result.config.artifact_dir)
    return RunResult(rc=result.rc, status=result.status, log=artifacts / "stdout", artifacts=artifacts)
