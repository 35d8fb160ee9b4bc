"""The ``hvdcluster`` argument parser: one sub-command per command module."""

from __future__ import annotations

import argparse

from .. import __version__
from .bundle import cmd_bundle
from .check import cmd_check
from .health import cmd_health
from .init import cmd_init
from .plan import cmd_inventory, cmd_plan
from .preflight import cmd_preflight
from .rolling import DEFAULTS as ROLL
from .run import cmd_run
from .up import cmd_up


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hvdcluster", description="Converge GPU machines into a Horovod cluster.")
    parser.add_argument("--version", action="version", version=f"hvdcluster {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("init", help="write a commented example hosts.yaml")
    p.add_argument("path", nargs="?", default="hosts.yaml")
    p.add_argument("--force", action="store_true", help="overwrite an existing file")
    p.set_defaults(func=cmd_init)

    def with_output(p: argparse.ArgumentParser) -> None:
        p.add_argument("hosts", help="the cluster's hosts.yaml")
        p.add_argument("-o", "--output", default="inventories",
                       help="folder that holds the inventory folder <cluster>/ (default: ./inventories)")

    def bandwidth_options(p: argparse.ArgumentParser, what: str) -> None:  # health --full and up --accept
        from ..bandwidth import COLLECTIVES, DEFAULT_COLLECTIVES, DEFAULT_SIZE

        g = p.add_argument_group(f"bandwidth ({what}: nccl-tests over the cluster's mpirun)")
        g.add_argument("--size", metavar="BYTES",
                       help=f"the largest message, as nccl-tests' -e takes it (1G, 512M); sizes double from 8 bytes up "
                       f"to it and the largest is judged (default {DEFAULT_SIZE})")
        g.add_argument("--collectives", metavar="A,B",
                       help=f"which of {', '.join(COLLECTIVES)} to run, comma-separated (default {DEFAULT_COLLECTIVES})")
        g.add_argument("--gpus-per-node", type=int, metavar="N",
                       help="ranks per node where the read cannot count the GPUs (nvidia-smi not on the login user's "
                       "PATH, a container that hides them): N ranks on every node instead of one per GPU found")
        g.add_argument("--floor", type=float, metavar="GBS",
                       help="judge the bus bandwidth against this floor (GB/s) instead of the one derived from the links "
                       "found (for links the read cannot see: Ethernet, a virtual NIC)")
        g.add_argument("--transport", metavar="NET",
                       help="the network NCCL must use between nodes (IB, Socket, or a plugin's name as NCCL logs it); "
                       "default: IB where every node has an Active InfiniBand or RoCE port, else not judged")

    def read_only(p: argparse.ArgumentParser) -> None:  # the commands that look at nodes and change nothing
        with_output(p)
        p.add_argument("--limit", help="only these hosts: names from hosts.yaml, comma-separated (globs * ? allowed)")
        p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")

    p = sub.add_parser("plan", help="print the resolved software stack and why each value was chosen")
    with_output(p)
    p.add_argument("--probe", action="store_true",
                   help="resolve for the nodes as they are: read their OS, kernel, gcc, python, GPUs and loaded "
                   "driver over SSH first (read-only; host keys pinned in the inventory's ssh/known_hosts)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("inventory", help="render the Ansible inventory from hosts.yaml")
    with_output(p)
    p.set_defaults(func=cmd_inventory)

    p = sub.add_parser("up", help="converge every node (playbooks/site.yml)")
    with_output(p)
    p.add_argument("--limit", help="only these hosts: names from hosts.yaml, comma-separated (globs * ? allowed)")
    p.add_argument("--tags", help="only these roles (comma-separated role names, e.g. hvd_base,hvd_ssh_mesh)")
    p.add_argument("--check", action="store_true", help="show what would change, change nothing")
    p.add_argument("--diff", action="store_true", help="show file differences")
    p.add_argument("--verify", action="store_true",
                   help="run horovodrun --check-build and the allreduces even when nothing changed since they "
                   "last passed")
    p.add_argument("--full", action="store_true",
                   help="converge every node with every role, even those whose state is the desired one")
    p.add_argument("--deep", action="store_true",
                   help="read every env file's content (sha256) too, as `check --deep` does, and repair what differs "
                   "(after a `check --deep` that found something, a plain `up` reads those nodes deep by itself)")
    p.add_argument("--bundle", metavar="DIR",
                   help="install from this offline bundle only (hvdcluster bundle): apt from its local repository, "
                   "pip with --no-index; like network.bundle in hosts.yaml")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.add_argument("--accept", action="store_true",
                   help="after a successful converge, run `health --full` over every node as the cluster's "
                   "acceptance: exit 1 naming the slow node or link when the bus bandwidth misses its floor")
    bandwidth_options(p, "with --accept")
    roll = p.add_argument_group("rolling changes (job-aware)")
    roll.add_argument("--rolling", action="store_true",
                      help="change the nodes a batch at a time, each only when no job runs there (hvdcluster run's "
                      "job leases, GPU compute processes); each batch is proven (verify, allreduce among the nodes "
                      "done) before the next; the first failure stops the roll")
    roll.add_argument("--batch", default=ROLL["batch"], metavar="N|P%",
                      help="nodes per batch: a number, or a percentage of the nodes (rounded up); "
                      f"default {ROLL['batch']}")
    roll.add_argument("--canary", metavar="HOST", help="change this node first, alone, and prove it")
    roll.add_argument("--max-wait", type=float, default=ROLL["max_wait"], metavar="SECONDS",
                      help="how long to wait for a node's jobs to end; a node still busy then is skipped and named, "
                      f"never interrupted (default {ROLL['max_wait']:g})")
    roll.add_argument("--poll", type=float, default=ROLL["poll"], metavar="SECONDS",
                      help=f"seconds between looks at a busy node (default {ROLL['poll']:g})")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("bundle", help="gather every file an offline converge needs (run where there is network)",
                       usage="hvdcluster bundle HOSTS DIR [-o OUTPUT] [--node NODE] [--sign KEY] [--json] | "
                       "hvdcluster bundle --verify DIR [--json]",
                       description="Converges one connected node of the node OS (--node, default the first host), "
                       "lets its own apt and pip resolve every package the stack needs, and fetches what the bundle "
                       "folder lacks; writes DIR/manifest.yaml (every file, its sha256, size and why). Re-runnable: "
                       "only what changed is fetched. --verify DIR re-checks every file by its sha256.")
    p.add_argument("hosts", nargs="?", help="the hosts.yaml of a connected cluster of the node OS")
    p.add_argument("dir", nargs="?", metavar="DIR", help="the bundle folder (created; re-used by a later run)")
    p.add_argument("-o", "--output", help="folder that holds the inventory folder <cluster>/ (default: ./inventories)")
    p.add_argument("--node", help="the host of hosts.yaml to resolve on (default: the first)")
    p.add_argument("--sign", metavar="KEY",
                   help="sign DIR/manifest.yaml with this OpenSSH private key (ssh-keygen -Y sign -n hvdcluster-bundle): "
                   "DIR/manifest.yaml.sig, checked by up against network.bundle_signers")
    p.add_argument("--verify", metavar="DIR", help="re-check every file of the bundle DIR by its sha256; change nothing")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.set_defaults(func=cmd_bundle)

    p = sub.add_parser("check", help="compare every node with the desired state and its peers (read-only)",
                       description="Reads every node in one read-only module call (check mode, no sudo) and "
                       "compares it with the state the last successful converge recorded and with its peers. "
                       "Exit code 0 in sync, 1 drifted or unreachable, 2 bad input.")
    read_only(p)
    p.add_argument("--deep", action="store_true",
                   help="hash every file of the env too (sha256), not only its size and time: slower, and sees an "
                   "edit that kept both")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("health", help="judge every node's GPUs, NVLink, kernel log, InfiniBand and Fabric Manager "
                       "(read-only)",
                       description="Reads every node in one read-only module call (check mode, no sudo): nvidia-smi -q "
                       "and nvlink -s, the kernel log's Xid and SXid events, the InfiniBand ports, the loaded nvidia "
                       "modules, the NVIDIA PCI devices, Fabric Manager and dcgmi diag -r 1; judges them against the "
                       "thresholds and meanings of plugins/module_utils/hvd_health.py, each finding naming its source. "
                       "Exit code 0 healthy, 1 a failure or a node not read, 2 bad input. Warnings are printed but "
                       "leave the exit code 0.")
    read_only(p)
    depth = p.add_mutually_exclusive_group()
    depth.add_argument("--quick", action="store_true", help="leave dcgmi diag -r 1 out (the slowest read)")
    depth.add_argument("--full", action="store_true",
                       help="also measure: nccl-tests (all_reduce_perf; --collectives) over the nodes with the cluster's "
                       "mpirun, one rank per GPU, judged against floors derived from the links found (NVLink, "
                       "NVSwitch, PCIe, InfiniBand) and the transport NCCL used; a failing run names its slow node or "
                       "link (pairs, then halves)")
    bandwidth_options(p, "with --full")
    p.add_argument("--drain", action="store_true",
                   help="under Slurm (hosts.yaml's scheduler): drain each node whose health failed (reason "
                   "'hvdcluster health: <item>') and resume the ones it drained once they are healthy; a drain someone "
                   "else made is left as it is")
    p.set_defaults(func=cmd_health)

    p = sub.add_parser("preflight", help="run the read-only pre-flight checks on every node and report",
                       description="Probes every node and reports each finding (host, check, found, expected, "
                       "fix); changes nothing. Exit code 1 when a check failed.")
    read_only(p)
    p.set_defaults(func=cmd_preflight)

    p = sub.add_parser("run", help="launch a Horovod job with horovodrun on the first node, or through Slurm",
                       usage="hvdcluster run [HOSTS] [-o OUTPUT] [--limit HOSTS] [--gloo | --mpi] [-np NP] "
                       "[--network-interface IF] [--print] [--no-gate] -- CMD...\n"
                       "       hvdcluster run [HOSTS] [-o OUTPUT] --slurm | --sbatch [-N NODES] "
                       "[--ntasks-per-node K] [--time T] [--print] [--no-gate] -- CMD...",
                       description="Builds the horovodrun command line from the inventory (hosts and slots, the "
                       "env's interpreter, the fabric interface) and runs it on the first node over SSH, holding a job "
                       "lease on every node its ranks run on (hvdcluster up --rolling waits for it). The job's "
                       "command and its arguments come after --. Every rank starts with the same Python import path: "
                       "without the PYTHONPATH, PYTHONHOME, PYTHONSTARTUP, PYTHONUSERBASE ... a node's SSH session "
                       "gives it, and with PYTHONNOUSERSITE=1; a job that wants one sets it in its command "
                       "(-- env PYTHONPATH=/srv/job python train.py).")
    p.add_argument("hosts", nargs="?", default="hosts.yaml", metavar="HOSTS",
                   help="the cluster's hosts.yaml (default: ./hosts.yaml)")
    p.add_argument("-o", "--output", default="inventories", help="folder that holds the inventory folder <cluster>/")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--gloo", dest="controller", action="store_const", const="gloo", help="use Gloo")
    mode.add_argument("--mpi", dest="controller", action="store_const", const="mpi", help="use MPI (mpirun)")
    p.add_argument("-np", "--np", type=int, help="number of processes (default: every slot)")
    p.add_argument("--network-interface", help="fabric interface (default: hvd_fabric_interface from the inventory, "
                   "else the one hvd_base recorded on the first node)")
    p.add_argument("--limit", metavar="HOSTS", help="run on these nodes only (host names or globs, comma-separated; "
                   "the first of them launches)")
    p.add_argument("--print", action="store_true", help="only print the command")
    p.add_argument("--no-gate", action="store_true",
                   help="launch even when the nodes' env, Horovod build, MPI or NCCL differ (the gate reads every node "
                   "first and refuses such a launch), or when a node's last health (health, up) failed")
    slurm = p.add_argument_group("through Slurm (hosts.yaml's scheduler; srun and sbatch run on its controller node)")
    how = slurm.add_mutually_exclusive_group()
    how.add_argument("--slurm", action="store_true",
                     help="start every task with srun --mpi=pmix (each an MPI process: Horovod's MPI controller), the "
                     "env active, and stay attached to the job")
    how.add_argument("--sbatch", action="store_true",
                     help="write a batch script (kept in the inventory's runs/), submit it with sbatch --parsable and "
                     "print the job id")
    slurm.add_argument("-N", "--nodes", type=int, metavar="NODES", help="nodes of the job (default: every node)")
    slurm.add_argument("--ntasks-per-node", type=int, metavar="K",
                       help="tasks on each node (default: its slots: hosts.yaml's, else one per GPU found)")
    slurm.add_argument("--time", metavar="T", help="the job's time limit, as Slurm writes it (90, 01:30:00, 1-12:00:00)")
    p.set_defaults(func=cmd_run, job=[])  # the words after `--` (main cuts them off before parsing)
    # A flag is written whole: argparse would take `--out` for `--output` or a typo for the flag it begins, silently.
    for command in (parser, *sub.choices.values()):
        command.allow_abbrev = False
    return parser
