"""Slurm from the controller: the launch of a job through it (``run --slurm``: ``srun --mpi=pmix``; ``run --sbatch``:
a batch script given to ``sbatch --parsable``), and health's drains (``health --drain``).

Under Slurm the scheduler owns scheduling (ARCHITECTURE.md): srun and sbatch run on the scheduler's controller node,
over SSH as the login user (launch.ssh_argv), with the env active (launch.activation: every task inherits srun's
environment) and every task started through env(1) without the node's Python import variables, as `run` starts its
ranks. Each task is an MPI process that srun starts and Slurm's PMIx wires up: Horovod's MPI controller. The Slurm job
is what keeps a roll off its nodes (the roll counts the jobs ``squeue -w`` names), so no job lease is written.

Health drains a failing node with the reason ``hvdcluster health: <item>`` and resumes a healthy one only when that
reason is still its own (node_records.py drains and resumes, as for a roll): a drain someone else made is left.
Plain functions over plain data: the CLI (cli/scheduled.py, cli/health.py) does the rest.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any, Mapping

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_members as member_rules

from .launch import DEFAULT_PREFIX, SAME_IMPORTS, LaunchError, activation

# A time limit as Slurm's --time takes it: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or no limit.
_TIME = re.compile(r"\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+|\d+-\d+:\d{1,2}|\d+-\d+:\d{1,2}:\d{1,2}|"
                   r"UNLIMITED|INFINITE", re.I)
SCRIPT_NAME = "job.sh"
OUTPUT = "hvdcluster-%j.out"  # sbatch's --output: in the login user's home on the job's first node


def check_time(value: str | None) -> str | None:
    """``--time``, as Slurm takes it; a usage error (exit 2) saying how to write it otherwise."""
    if value is None or _TIME.fullmatch(value.strip()):
        return value.strip() if value else None
    raise LaunchError(f"run: --time {value!r} is not a Slurm time limit: write minutes (90), HH:MM:SS (01:30:00) or "
                      "D-HH:MM:SS (1-12:00:00)")


@dataclass(frozen=True)
class Shape:
    """Where a Slurm job's tasks go: ``nodes`` nodes, ``per_node`` tasks on each; ``gpus`` GPUs per node to ask for
    (0: none asked)."""

    nodes: int
    per_node: int
    gpus: int = 0

    @property
    def tasks(self) -> int:
        return self.nodes * self.per_node

    def options(self) -> list[str]:
        return ([f"--nodes={self.nodes}", f"--ntasks-per-node={self.per_node}"]
                + ([f"--gpus-per-node={self.gpus}"] if self.gpus else []))


def shape(slots: Mapping[str, int], gpus: Mapping[str, int], nodes: int | None, per_node: int | None) -> Shape:
    """The job's shape from ``-N`` and ``--ntasks-per-node`` (defaults: every node, its slots), each node's slots
    (hosts.yaml, else one per GPU found) and GPUs found. Usage errors say what to write instead."""
    total = len(slots)
    nodes = total if nodes is None else nodes
    if not 1 <= nodes <= total:
        raise LaunchError(f"run: -N {nodes}: the cluster has {total} node{'s' if total != 1 else ''}; write -N 1 to "
                          f"-N {total}")
    if per_node is None:
        distinct = sorted(set(slots.values()))
        if len(distinct) != 1:
            found = member_rules.host_list(slots).replace(",", ", ")
            raise LaunchError(f"run: the nodes' slots differ ({found}); write --ntasks-per-node K (Slurm starts as many "
                              "tasks on each node)")
        per_node = distinct[0]
    if per_node < 1:
        raise LaunchError(f"run: --ntasks-per-node must be at least 1 (got {per_node})")
    counts = sorted(set(gpus.values()))
    per_gpu = counts[0] if len(counts) == 1 and counts[0] > 0 and per_node <= counts[0] else 0
    return Shape(nodes, per_node, per_gpu)


def task_command(inv_vars: Mapping[str, Any], command: list[str]) -> list[str]:
    """The command every task runs: through env(1) without the node's Python import variables, ``python`` as the
    env's interpreter (the same path on every node), as `run` starts its ranks."""
    if not command:
        raise LaunchError("run: give the command to launch after --, e.g. hvdcluster run hosts.yaml --slurm -- python "
                          "train.py")
    prefix = str(inv_vars.get("hvd_pyenv_prefix") or DEFAULT_PREFIX)
    program = list(command)
    if program[0] in ("python", "python3"):
        program[0] = f"{prefix}/bin/python"
    return [*SAME_IMPORTS, *program]


def environment(inv_vars: Mapping[str, Any]) -> str:
    """Shell that activates the env for srun (and so for every task: srun passes its environment on)."""
    prefix = str(inv_vars.get("hvd_pyenv_prefix") or DEFAULT_PREFIX)
    return activation(prefix, str(inv_vars.get("hvd_pyenv_manager") or "venv"))


def srun_argv(partition: str, job: Shape, command: list[str], time: str | None = None,
              name: str = "hvdcluster") -> list[str]:
    """``srun --mpi=pmix`` over ``job``'s nodes and tasks in ``partition``: every task an MPI process wired by Slurm's
    PMIx; one task that fails ends the job (--kill-on-bad-exit)."""
    return ["srun", "--mpi=pmix", f"--partition={partition}", *job.options(), "--kill-on-bad-exit=1",
            f"--job-name={name}", *([f"--time={time}"] if time else []), *command]


def remote(activate: str, argv: list[str]) -> str:
    """The shell the controller node's login shell runs: the env activated, then ``argv``."""
    return f"{activate}; exec {shlex.join(argv)}"


def batch_script(partition: str, job: Shape, command: list[str], activate: str, run_id: str, cluster: str,
                 time: str | None = None) -> str:
    """The batch script ``run --sbatch`` submits: its resources as #SBATCH lines, the env activated, then one
    ``srun --mpi=pmix`` over the job's tasks."""
    name = f"hvdcluster-{run_id}"
    lines = ["#!/bin/bash",
             f"#SBATCH --job-name={name}",
             f"#SBATCH --partition={partition}",
             *(f"#SBATCH {option}" for option in job.options()),
             *([f"#SBATCH --time={time}"] if time else []),
             f"#SBATCH --output={OUTPUT}",
             f"# Written by `hvdcluster run --sbatch` ({run_id}) for cluster {cluster}; kept in its inventory's runs/.",
             "set -e",
             activate,
             shlex.join(["srun", "--mpi=pmix", "--kill-on-bad-exit=1", *command])]
    return "\n".join(lines) + "\n"


_JOB_ID = re.compile(r"(\d+)(;\S+)?")


def job_id(stdout: str) -> str | None:
    """The job id ``sbatch --parsable`` printed ("<id>" or "<id>;<cluster>"), or None."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    found = _JOB_ID.fullmatch(lines[-1]) if lines else None
    return found.group(1) if found else None


# ------------------------------------------------------------------------------------------ health --drain


def health_reason(findings: list[Mapping[str, Any]]) -> str:
    """The reason a node whose health failed is drained with: ``hvdcluster health: <first failed item>`` (and how
    many more), so `health --drain` finds it its own later."""
    from .jobs import HEALTH_REASON

    failed = [str(f.get("item")) for f in findings if f.get("severity") == "fail"]
    more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
    return f"{HEALTH_REASON}{(failed[0] if failed else 'failed')[:80]}{more}"


def drain_plan(report: Mapping[str, Mapping[str, Any]], looks: Mapping[str, Any]
               ) -> tuple[dict[str, str], list[str], dict[str, str]]:
    """What `health --drain` does with each node judged in ``report`` (health.assess), given what Slurm holds for it
    (``looks``: jobs.Look by node): (to drain with their reasons, to resume, left as they are with why). A failing
    node is drained unless it is drained or down already; a healthy one is resumed only when health drained it."""
    from .jobs import HEALTH_REASON

    drain: dict[str, str] = {}
    resume: list[str] = []
    left: dict[str, str] = {}
    for node, verdict in report.items():
        look = looks.get(node)
        if look is None or look.error or look.slurm is None:
            continue
        by = look.drained_by
        if not verdict["healthy"]:
            if by:
                left[node] = f"already out of service in Slurm ({by})"
            else:
                drain[node] = health_reason(verdict["findings"])
        elif by.startswith(HEALTH_REASON):
            resume.append(node)
        elif by:
            left[node] = f"out of service in Slurm by someone else ({by}): left as it is"
    return drain, resume, left


def apply_health(inv: Any, report: Mapping[str, Mapping[str, Any]], write) -> dict[str, Any]:
    """`health --drain`: drain the failing nodes of ``report`` in Slurm, resume the healthy ones health drained
    (one look at the nodes over SSH, then the drains and resumes, node_records.py's); ``write`` says each. Returns
    {drained: {node: reason}, resumed: [...], left: {node: why}, errors: {node: why}}."""
    from . import jobs

    nodes = list(report)
    looks = jobs.look(inv, nodes) if nodes else {}
    errors = {node: look.error for node, look in looks.items() if look.error}
    errors.update({node: "Slurm does not know this node (no scontrol there, or another name)"
                   for node, look in looks.items() if not look.error and look.slurm is None})
    drain, resume, left = drain_plan(report, looks)
    done: dict[str, str] = {}
    for reason in sorted(set(drain.values())):
        group = [node for node, why in drain.items() if why == reason]
        for node, look in jobs.look(inv, group, slurm="drain", reason=reason).items():
            if look.error or look.drained_by != reason:
                errors[node] = look.error or f"not drained (Slurm holds {look.drained_by or 'no drain'})"
            else:
                done[node] = reason
                write(f"{node}: drained in Slurm ({reason}): no new job starts there")
    resumed = []
    if resume:
        for node, look in jobs.look(inv, resume, slurm="resume", resume_prefix=jobs.HEALTH_REASON).items():
            if look.error or look.drained_by:
                errors[node] = look.error or f"still drained ({look.drained_by})"
            else:
                resumed.append(node)
                write(f"{node}: resumed in Slurm: healthy again")
    for node, why in left.items():
        write(f"{node}: {why}")
    for node, why in errors.items():
        write(f"{node}: Slurm: {why}")
    return {"drained": done, "resumed": resumed, "left": left, "errors": errors}
