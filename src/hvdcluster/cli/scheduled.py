"""``hvdcluster run --slurm`` and ``run --sbatch``: a job launched through Slurm (src/hvdcluster/slurm.py), behind the
same gates as ``run``: the nodes' last health, and every rank sharing the same env, Horovod build, MPI and NCCL."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from .. import inventory, spec
from ..errors import HvdError
from ..output import printable
from .common import EXIT_FAILED, EXIT_OK, existing_inventory

# run's options that are horovodrun's, and what to write under Slurm instead.
HOROVODRUN_ONLY = {
    "controller": "every task is an MPI process srun starts (Horovod's MPI controller): drop --gloo/--mpi",
    "np": "-np is horovodrun's: write -N NODES --ntasks-per-node K",
    "network_interface": "--network-interface is horovodrun's: drop it (set NCCL_SOCKET_IFNAME in the command, "
                         "-- env NCCL_SOCKET_IFNAME=eth1 python train.py, to choose one)",
    "limit": "Slurm chooses the nodes of the partition: drop --limit and write -N NODES for fewer of them",
}
SLURM_ONLY = {"nodes": "-N", "ntasks_per_node": "--ntasks-per-node", "time": "--time"}


def check_usage(args: argparse.Namespace) -> None:
    """Refuse, before anything is read, a mix of horovodrun's options and Slurm's (exit 2, saying what to write)."""
    mode = "--sbatch" if args.sbatch else "--slurm" if args.slurm else ""
    if not mode:
        given = [flag for name, flag in SLURM_ONLY.items() if getattr(args, name, None) is not None]
        if given:
            raise HvdError(f"run: {', '.join(given)} only with --slurm or --sbatch (horovodrun takes -np)")
        return
    for name, instead in HOROVODRUN_ONLY.items():
        if getattr(args, name, None) is not None:
            raise HvdError(f"run {mode}: {instead}")


def cmd_scheduled(args: argparse.Namespace) -> int:
    """Validate everything first (no node is contacted for that), then the gates, then srun or sbatch on the
    scheduler's controller node."""
    from .. import launch, slurm
    from .run import _health_gate, _launch_gate

    mode = "--sbatch" if args.sbatch else "--slurm"
    time = slurm.check_time(args.time)
    cluster = spec.load(args.hosts)
    if cluster.scheduler is None:
        raise HvdError(f"run {mode}: {args.hosts} names no scheduler: add `scheduler: {{kind: slurm, controller: NODE}}` "
                       "and run `hvdcluster up`, or launch with horovodrun (drop " + mode + ")")
    root = existing_inventory(args, cluster)
    inv = inventory.read(root)
    controller, partition = cluster.scheduler.controller, cluster.scheduler.partition
    if controller not in inv.hosts or not inv.vars.get("hvd_scheduler"):
        raise HvdError(f"run {mode}: the inventory {root} is older than {args.hosts} (no Slurm in it): run "
                       f"`hvdcluster up {args.hosts}` first")
    command = slurm.task_command(inv.vars, args.job)
    activate = slurm.environment(inv.vars)
    hosts = list(inv.hosts)
    if args.print:
        job = slurm.shape(launch.slots(inv, {}), {}, args.nodes, args.ntasks_per_node)
        if args.sbatch:
            print(slurm.batch_script(partition, job, command, activate, "<id>", cluster.cluster, time), end="")
        else:
            argv = slurm.srun_argv(partition, job, command, time)
            print(shlex.join([*launch.ssh_argv(inv, controller), slurm.remote(activate, argv)]))
        return EXIT_OK
    if not args.no_gate and _health_gate(root, hosts):
        return EXIT_FAILED
    found = {} if args.no_gate else _launch_gate(root, hosts)
    if isinstance(found, int):
        return found
    gpus = launch.counts_read(found, hosts) if found else launch.gpu_counts(inv, hosts)
    job = slurm.shape(launch.slots(inv, gpus), gpus, args.nodes, args.ntasks_per_node)
    if args.sbatch:
        return _submit(inv, root, cluster.cluster, controller, partition, job, command, activate, time)
    from ..jobs import new_id

    argv = slurm.srun_argv(partition, job, command, time, name=f"hvdcluster-{new_id()}")
    return _attached([*launch.ssh_argv(inv, controller), slurm.remote(activate, argv)])


def _attached(argv: list[str]) -> int:
    """srun in the foreground (its output is the job's); SIGTERM ends it like Ctrl-C (ssh's end makes srun cancel the
    job step)."""
    previous = signal.getsignal(signal.SIGTERM)

    def stop(signum, frame):  # noqa: ARG001
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        return subprocess.run(argv).returncode
    finally:
        signal.signal(signal.SIGTERM, previous)


def _submit(inv: inventory.Inventory, root: Path, cluster: str, controller: str, partition: str, job, command: list[str],
            activate: str, time: str | None) -> int:
    """Write the batch script beside the run's record (<inventory>/runs/sbatch-<id>/, 0700), hand it to
    ``sbatch --parsable`` on the controller node (on its standard input), print the job id."""
    import datetime

    from .. import launch, slurm
    from ..jobs import new_id

    run_id = new_id()
    folder = root / "runs" / f"sbatch-{run_id}"
    folder.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder.parent, 0o700)
    folder.mkdir(mode=0o700)
    script = slurm.batch_script(partition, job, command, activate, run_id, cluster, time)
    path = folder / slurm.SCRIPT_NAME
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700)
    with os.fdopen(fd, "w") as handle:
        handle.write(script)
    try:
        proc = subprocess.run([*launch.ssh_argv(inv, controller), "sbatch --parsable"], input=script,
                              capture_output=True, text=True, timeout=120)
        said, rc = proc.stdout, proc.returncode
        err = proc.stderr
    except (OSError, subprocess.TimeoutExpired) as exc:
        said, rc, err = "", None, str(exc)
    found = slurm.job_id(said) if rc == 0 else None
    record = {"run_id": run_id, "job_id": found, "controller": controller, "partition": partition,
              "nodes": job.nodes, "ntasks_per_node": job.per_node, "time": time, "command": command,
              "submitted": datetime.datetime.now(datetime.timezone.utc).isoformat()}
    (folder / "record.json").write_text(json.dumps(record, indent=1) + "\n")
    if found is None:
        last = [line for line in (err or said or "").splitlines() if line.strip()][-1:] or [f"rc {rc}"]
        print(f"hvdcluster: sbatch on {controller} did not take the job: {printable(last[0], newlines=False)} (its "
              f"script: {path})", file=sys.stderr)
        return EXIT_FAILED
    user = inv.vars.get("ansible_user") or "the login user"
    print(found)
    print(f"hvdcluster: submitted as Slurm job {found} ({job.nodes} node{'s' if job.nodes != 1 else ''} x "
          f"{job.per_node} task{'s' if job.per_node != 1 else ''}, partition {partition}); its script: {path}; its "
          f"output: {slurm.OUTPUT.replace('%j', found)} in {user}'s home on the job's first node "
          f"(scontrol show job {found}: BatchHost)", file=sys.stderr)
    return EXIT_OK
