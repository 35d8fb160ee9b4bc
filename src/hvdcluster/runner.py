"""Run a playbook through ansible-runner: events to a callback, full logs kept per run."""

from __future__ import annotations

import functools
import json
import os
import re
import secrets
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import paths, redact
from .errors import HvdError

Event = dict[str, Any]


@dataclass(frozen=True)
class RunResult:
    rc: int
    status: str  # ansible-runner's: successful, failed, timeout, canceled
    log: Path  # the full ansible-playbook output of this run
    artifacts: Path  # job_events/, stdout, rc ... of this run


DEFAULT_COLLECTIONS_PATH = "~/.ansible/collections:/usr/share/ansible/collections"  # ansible-core's default


def collections_path(environ: dict[str, str] | os._Environ[str]) -> list[str]:
    """Ansible's collections path for a run: the hvd.cluster this command ships first (Ansible takes the first copy
    it finds), then the operator's path, so their other collections still resolve."""
    theirs = environ.get("ANSIBLE_COLLECTIONS_PATH") or environ.get("ANSIBLE_COLLECTIONS_PATHS") or DEFAULT_COLLECTIONS_PATH
    return [str(paths.collections_dir()), *(part for part in theirs.split(os.pathsep) if part)]


@functools.cache
def _announce_other_collections(search: tuple[str, ...]) -> None:
    """Say once per command which hvd.cluster runs when the operator has another copy installed (it does not run)."""
    others = paths.other_collections([Path(p) for p in (*search, *sys.path) if p])
    if others:
        home = paths.ansible_home()
        ignored = "; ".join(f"{version} at {root}" for root, version in others)
        print(f"hvdcluster: runs hvd.cluster {paths.collection_version(home)} from {home} (another copy is installed "
              f"and not used: {ignored})", file=sys.stderr)


def _ansible_env(environ: dict[str, str] | os._Environ[str] | None = None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    home = paths.ansible_home()
    search = collections_path(environ)
    _announce_other_collections(tuple(search[1:]))
    return {
        "ANSIBLE_CONFIG": str(home / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": os.pathsep.join(search),
        # ansible-runner turns host key checking off unless told otherwise. We never do (nor does paramiko).
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_PARAMIKO_HOST_KEY_AUTO_ADD": "False",
        "ANSIBLE_NOCOLOR": "1",
        # A PATH on which ansible finds the interpreter and tools of this installation.
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }


# Operator settings that would weaken host key checking: ANSIBLE_HOST_KEY_CHECKING and the paramiko switch are
# overridden below; ssh arguments are judged (ssh keeps the first value of an option, and these come first).
_SSH_ARG_VARS = ("ANSIBLE_SSH_ARGS", "ANSIBLE_SSH_COMMON_ARGS", "ANSIBLE_SSH_EXTRA_ARGS", "ANSIBLE_SCP_EXTRA_ARGS",
                 "ANSIBLE_SFTP_EXTRA_ARGS")
_WEAK_SSH = re.compile(r"StrictHostKeyChecking\s*=?\s*(no|off|false)|UserKnownHostsFile\s*=?\s*/dev/null|"
                       r"GlobalKnownHostsFile\s*=?\s*/dev/null|CheckHostIP\s*=?\s*no.*StrictHost", re.I)


def check_environment(environ: dict[str, str] | None = None) -> None:
    """Refuse (exit 2) an operator environment that would turn host key checking off for this run."""
    environ = os.environ if environ is None else environ
    for name in _SSH_ARG_VARS:
        value = environ.get(name, "")
        if _WEAK_SSH.search(value):
            raise HvdError(f"{name}={value!r} turns host key checking off; hvdcluster pins host keys and never runs "
                           f"with it off: unset {name} (or remove that option)")


def run_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """What a run sets over the operator's environment (which ansible-runner passes on): hvdcluster's own
    configuration, and host key checking on for both connection plugins, whatever ANSIBLE_* says."""
    check_environment(environ)
    return _ansible_env(environ)


_SECRET_NAME = re.compile(r"PASS|TOKEN|SECRET|CRED|AUTH|_KEY$|^AWS_|PROXY", re.I)
_URL_CREDENTIALS = re.compile(r"://[^/@\s]+@")


def scrub_artifacts(artifacts: Path) -> None:
    """Redact secrets from the environment ansible-runner records with a run (artifacts/<id>/command): values of
    variables named like secrets or proxies, the Open MPI URL's, any value carrying credentials in a URL, and a URL's
    query values (hvdcluster.redact)."""
    record = artifacts / "command"
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError):
        return
    env = data.get("env")
    if not isinstance(env, dict):
        return
    for name, value in env.items():
        if isinstance(value, str) and (_SECRET_NAME.search(name) or _URL_CREDENTIALS.search(value)
                                       or name == redact.OPENMPI_URL_ENV):
            env[name] = redact.REDACTED
        elif isinstance(value, str):
            env[name] = redact.redact_text(value)  # a token in a URL's query
    record.write_text(json.dumps(data))


def run_id(playbook: str) -> str:
    """A run's id: time, then random hex (two runs started in the same second never share one)."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}-{Path(playbook).stem}"


# The playbooks that run no role's tasks (read-only looks): no switched task to leave out.
NO_ROLE_PLAYBOOKS = ("health.yml", "state.yml")
# The playbooks of the roles with an on/off switch (src/hvdcluster/switches.py; tests/unit/test_switches.py holds the
# list to the roles').
SWITCHED_PLAYBOOKS = ("cuda", "cudnn", "nccl", "nccl_tests", "nvidia_driver", "pyxis", "slurm")
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
    env: dict[str, str] | None = None,
) -> RunResult:
    """Run ``playbooks/<playbook>`` against ``inventory_dir``; logs go to ``inventory_dir/runs`` (0700). ``env``:
    variables the run gets besides hvdcluster's own (a secret the inventory names but does not hold)."""
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
    private.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(private, 0o700)  # the logs of every run: what a task printed, the nodes' answers
    # ansible-runner reads env/cmdline, env/extravars ... of an earlier run when a run passes none: an old
    # --limit or --verify would stick. Nothing is written there (suppress_env_files) and leftovers go.
    for stale in STALE_ENV_FILES:
        (private / "env" / stale).unlink(missing_ok=True)
    ident = run_id(playbook)
    envvars = {**run_environment(), **(env or {})}
    if playbook not in NO_ROLE_PLAYBOOKS:
        from .switches import left_out  # noqa: PLC0415

        plays, tasks = left_out(inventory_dir, extravars)
        if playbook == "site.yml" or playbook.removesuffix(".yml") in SWITCHED_PLAYBOOKS:
            # the switched roles off on every node: their plays left out whole (no task, no host), not judged per node
            extravars = {"hvd_plays_off": plays, **(extravars or {})}
        # the switched tasks off on every node (a hostname not set, no bundle, no source build): left out of the run
        if tasks:
            args += ["--skip-tags", ",".join(tasks)]
    from .inventory.hostkeys import first_use_hosts, trusted_on_first_use  # noqa: PLC0415 - inventory is heavier

    first_use = first_use_hosts(inventory_dir)  # nodes whose key no pin and no earlier run vouches for

    def handler(event: Event) -> bool:
        if on_event is not None:
            on_event(event)
        return True  # keep the event in the artifacts

    # ansible-runner installs its own SIGTERM/SIGINT handlers (they cancel the run) and leaves them in place: put
    # back the process's own once the run is over, so a later Ctrl-C or TERM ends hvdcluster as it should.
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        result = _run(ansible_runner, private, ident, playbook, inventory_dir, args, extravars, envvars, handler)
    finally:
        if threading.current_thread() is threading.main_thread():
            for sig, previous in saved.items():
                if previous is not None:
                    signal.signal(sig, previous)
    artifacts = Path(result.config.artifact_dir)
    scrub_artifacts(artifacts)
    # Every command that learns a node's key says so, bastion or not, with the line that pins it in hosts.yaml.
    for n, line in enumerate(trusted_on_first_use(inventory_dir, first_use)):
        print(f"hvdcluster: {line}" if n == 0 else line, file=sys.stderr)
    return RunResult(rc=result.rc, status=result.status, log=artifacts / "stdout", artifacts=artifacts)


def _run(ansible_runner: Any, private: Path, ident: str, playbook: str, inventory_dir: Path, args: list[str],
         extravars: dict | None, envvars: dict, handler: Callable[[Event], bool]) -> Any:
    return ansible_runner.run(
        private_data_dir=str(private),
        ident=ident,
        playbook=str(paths.playbook(playbook)),
        # The inventory file itself (group_vars/ next to it still load): runs/ and ssh/ are no inventory.
        inventory=str((inventory_dir / "hosts.yml").resolve()),
        cmdline=shlex.join(args) if args else None,
        extravars=extravars or None,
        suppress_env_files=True,
        envvars=envvars,
        event_handler=handler,
        quiet=True,
        rotate_artifacts=20,
    )
