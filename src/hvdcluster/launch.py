"""`horovodrun` command lines from the inventory, run on the first node over SSH.

The launch runs *on a node*, not on the controller: horovodrun starts its helpers with its own interpreter
path and reaches the other nodes through the cluster's SSH mesh, both of which exist only on the nodes.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_members as member_rules
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_defaults import ENV_PREFIX
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import ABSENT

from .errors import HvdError
from .inventory import Inventory, proxy_command, ssh_word

DEFAULT_PREFIX = ENV_PREFIX  # hvd_pyenv_prefix when the inventory sets none
BASE_FACT = "/etc/ansible/facts.d/hvd_base.fact"

# Variables that change where Python imports from or what it runs at its start. A rank on another node gets that
# node's own from its SSH session (pam_env's /etc/environment, ~/.ssh/environment: `check` names them, launch.env), and
# horovodrun and mpirun pass on only what the first node set, so every rank starts without them, and without the
# user's site-packages (~/.local, which a conda env reads): the same sys.path on every node. A job that wants one
# says so in its command: hvdcluster run -- env PYTHONPATH=/srv/job python train.py
IMPORT_VARIABLES = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONSAFEPATH",
                    "PYTHONPLATLIBDIR", "PYTHONPYCACHEPREFIX", "PYTHONEXECUTABLE", "PYTHONNOUSERSITE")
SAME_IMPORTS = ["env", *(word for name in IMPORT_VARIABLES for word in ("-u", name)), "PYTHONNOUSERSITE=1"]


class LaunchError(HvdError):
    """The launch cannot be built from this inventory (exit code 2)."""


@dataclass(frozen=True)
class Launch:
    horovodrun: list[str]  # argv run on the first node
    ssh: list[str]  # ssh argv from the controller to the first node, without the remote command
    activate: str = ""  # shell run on the first node before horovodrun: the environment every rank inherits
    hosts: tuple[str, ...] = ()  # the nodes ranks run on: horovodrun fills the -H list in order

    @property
    def remote_command(self) -> str:
        if not self.activate:
            return shlex.join(self.horovodrun)
        return f"{self.activate}; exec {shlex.join(self.horovodrun)}"

    def argv(self) -> list[str]:
        return [*self.ssh, self.remote_command]


DRIVER_FACT = "/etc/ansible/facts.d/hvd_nvidia_driver.fact"


def open_slots(inv: Inventory) -> list[str]:
    """The nodes whose slots hosts.yaml leaves open: one per GPU found there."""
    return [name for name, v in inv.hosts.items() if not v.get("hvd_slots")]


def slots(inv: Inventory, gpus: dict[str, int] | None = None) -> dict[str, int]:
    """Processes per node: hvd_slots, else one per GPU the node reported (``gpus``), else 1."""
    gpus = gpus or {}
    return {name: member_rules.slots(name, v.get("hvd_slots"), gpus.get(name)) for name, v in inv.hosts.items()}


def on_each(inv: Inventory, hosts: list[str], command: str,
            timeout: float = 20) -> dict[str, subprocess.CompletedProcess[str] | str]:
    """``command`` run by each of ``hosts``' login shell over SSH (pinned host keys), in parallel: its completed
    process, or why there is none (the error's text)."""

    def one(host: str) -> subprocess.CompletedProcess[str] | str:
        try:
            return subprocess.run([*ssh_argv(inv, host), command], capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return f"no answer in {timeout:.0f} s"
        except OSError as exc:
            return str(exc)

    with ThreadPoolExecutor(max_workers=min(32, len(hosts) or 1)) as pool:
        return dict(zip(hosts, pool.map(one, hosts)))


def gpu_counts(inv: Inventory, hosts: list[str], timeout: float = 20) -> dict[str, int]:
    """The GPUs hvd_nvidia_driver found on each of ``hosts`` (its fact, read over SSH in parallel); 0 where none was
    recorded or the node cannot tell."""

    def count(proc: subprocess.CompletedProcess[str] | str) -> int:
        try:
            return max(int(json.loads(proc.stdout).get("gpu_count") or 0), 0) if proc.returncode == 0 else 0
        except (AttributeError, ValueError, TypeError):
            return 0

    return {host: count(proc) for host, proc in on_each(inv, hosts, f"cat {DRIVER_FACT}", timeout).items()}


def counts_read(found: dict[str, dict], hosts: list[str]) -> dict[str, int]:
    """The GPUs of each of ``hosts`` from the node states the launch gate read (``gpu.count``: what
    hvd_nvidia_driver recorded); 0 where none was recorded."""
    out = {}
    for host in hosts:
        try:
            out[host] = max(int((found.get(host) or {}).get("gpu.count") or 0), 0)
        except (TypeError, ValueError):
            out[host] = 0
    return out


def interface_read(found: dict[str, dict], host: str) -> str | None:
    """The fabric interface hvd_base recorded on ``host``, from the node state the launch gate read."""
    value = (found.get(host) or {}).get("base.fabric_interface")
    return str(value) if value and value != ABSENT else None


def activation(prefix: str, manager: str = "venv") -> str:
    """Shell that gives horovodrun, and so every rank it starts (it passes its environment on: to Gloo's remote
    commands and as ``mpirun -x``), what the roles set up for login shells: the CUDA/NCCL settings they wrote to
    /etc/profile.d/hvd-*.sh, then the env's ``bin/`` first on PATH and ``VIRTUAL_ENV`` (``CONDA_PREFIX`` for
    conda). Shell wrappers, entry points and ``#!/usr/bin/env python`` scripts then find the env's interpreter.
    The first node's import variables (:data:`IMPORT_VARIABLES`) are unset first: horovodrun itself runs without them."""
    marker = "CONDA_PREFIX" if manager == "conda" else "VIRTUAL_ENV"
    return (f'unset {" ".join(IMPORT_VARIABLES)}; '
            'for f in /etc/profile.d/hvd-*.sh; do if [ -r "$f" ]; then . "$f"; fi; done; '
            f'export PATH={shlex.quote(prefix + "/bin")}:"$PATH" {marker}={shlex.quote(prefix)}')


def ssh_argv(inv: Inventory, host: str) -> list[str]:
    """OpenSSH argv from the controller to `host` with the inventory's user, key, port and pinned host keys."""
    hv = {**inv.vars, **inv.hosts[host]}
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",  # ssh parses -o values: quoted
            "-o", "UserKnownHostsFile=" + ssh_word(str(inv.path / "ssh" / "known_hosts")),
            "-p", str(hv.get("ansible_port", 22))]
    if hv.get("ansible_ssh_private_key_file"):
        argv += ["-i", str(hv["ansible_ssh_private_key_file"])]
    if hv.get("hvd_ssh_proxy_jump"):  # the bastion, its key pinned beside the inventory
        argv += ["-o", f"ProxyCommand={proxy_command(hv['hvd_ssh_proxy_jump'], str(inv.path / 'ssh'))}"]
    user = hv.get("ansible_user")
    return [*argv, f"{user}@{hv['ansible_host']}" if user else str(hv["ansible_host"])]


def build(
    inv: Inventory,
    command: list[str],
    *,
    np: int | None = None,
    controller: str | None = None,
    network_interface: str | None = None,
    gpus: dict[str, int] | None = None,
) -> Launch:
    """The launch of ``command`` on every slot (or ``np``). ``gpus``: the GPUs of the nodes whose slots hosts.yaml
    leaves open; None while they are not known yet (then only what is known is checked)."""
    if not command:
        raise LaunchError("run: give the command to launch after --, e.g. hvdcluster run hosts.yaml -- python train.py")
    if not inv.hosts:
        raise LaunchError(f"{inv.path}: the inventory has no hosts")
    per_host = slots(inv, gpus)
    total = sum(per_host.values())
    np = total if np is None else np
    if np < 1:
        raise LaunchError(f"run: -np must be at least 1 (got {np})")
    if np > total and (gpus is not None or not open_slots(inv)):
        raise LaunchError(f"run: -np {np} is more than the {total} slots of the cluster "
                          f"({member_rules.host_list(per_host).replace(',', ', ')})")
    prefix = str(inv.vars.get("hvd_pyenv_prefix") or DEFAULT_PREFIX)
    argv = [f"{prefix}/bin/horovodrun", "-np", str(np), "-H", member_rules.host_list(per_host)]
    if controller:
        argv.append(f"--{controller}")
    # One node (run --limit): horovodrun finds every host local and looks for the interface holding 127.0.0.1 among
    # the ones it is given; the fabric interface has none ("No interface is found for address 127.0.0.1").
    if network_interface and len(per_host) > 1:
        argv += ["--network-interfaces", network_interface]
    program = list(command)
    if program[0] in ("python", "python3"):
        program[0] = f"{prefix}/bin/python"  # the env's interpreter, the same path on every node
    program = [*SAME_IMPORTS, *program]  # each rank through env(1): the node's import variables left behind
    first = next(iter(inv.hosts))
    manager = str(inv.vars.get("hvd_pyenv_manager") or "venv")
    return Launch(horovodrun=[*argv, *program], ssh=ssh_argv(inv, first), activate=activation(prefix, manager),
                  hosts=ranked_hosts(per_host, np))


def ranked_hosts(per_host: dict[str, int], np: int) -> tuple[str, ...]:
    """The nodes that get ranks when horovodrun places ``np`` processes on ``per_host`` slots, in -H order."""
    out, left = [], np
    for host, count in per_host.items():
        if left <= 0:
            break
        out.append(host)
        left -= count
    return tuple(out)


def recorded_interface(inv: Inventory) -> str | None:
    """The fabric interface the inventory names (``hvd_fabric_interface``, e.g. in group_vars/all/local.yml),
    or None: then only the first node can tell (:func:`fabric_interface`, over SSH)."""
    value = inv.vars.get("hvd_fabric_interface")
    return str(value) if value else None


def fabric_interface(inv: Inventory, host: str, timeout: float = 20) -> str | None:
    """The fabric interface hvd_base recorded on `host` (read over SSH), or None when it cannot be read."""
    try:
        proc = subprocess.run([*ssh_argv(inv, host), f"cat {BASE_FACT}"], capture_output=True, text=True,
                              timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    try:
        return json.loads(proc.stdout).get("fabric_interface") or None
    except json.JSONDecodeError:
        return None


def inventory_dir(out_dir: str | Path, cluster: str) -> Path:
    return Path(out_dir) / cluster
