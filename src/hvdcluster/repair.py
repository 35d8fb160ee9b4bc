"""What `up` repairs: its fast path's decisions as plain functions over plain data (no node, no terminal).

`up` on a cluster converged before from the same inputs reads every node and holds it against its record
(:func:`hvdcluster.drift.compare`). Nodes in sync are not converged again; the drifted nodes that some role repairs
run the roles that own their drifted items and those built on them (:data:`BUILT_ON`), not every role after them,
and the post-flight then proves the whole cluster. What no role repairs (the OS
release, the kernel) is the operator's: named, never converged.

`up --rolling` changes the same nodes (or every node, when the inputs changed) a batch at a time: :func:`batches` is
its order (the canary alone, then ``--batch`` nodes at a time), :func:`scope` what it changes and how.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import HvdError

# up --deep (or after a `check --deep` that found something): hvd_pyenv judges the env by every file's content, and the
# read-back that closes the loop reads it so too.
DEEP = {"hvd_pyenv_deep": True, "hvd_state_deep": True}

if TYPE_CHECKING:
    from .drift import Report

# A drifted item that makes hvd_pyenv install the node's env again even where its files agree with the manifest:
# the manifest itself was changed.
ENV_MANIFEST = "env.manifest"


def takes_fast_path(*, full: bool, limit: str | None, tags: str | None, check: bool, verify: bool) -> bool:
    """Whether `up` looks for a fast path at all: never with ``--full``, nor for a run narrowed (``--limit``,
    ``--tags``) or of another kind (``--check``, ``--verify``): those converge as asked."""
    return not full and not (limit or tags or check or verify)


@dataclass(frozen=True)
class Repair:
    """The fast path's plan for one drift report; every node list in inventory order."""

    in_sync: list[str]  # the nodes in their desired state
    targets: list[str]  # the drifted nodes some role repairs: the only nodes the roles' plays take (hvd_targets)
    repaired: dict[str, list[str]]  # target -> its drifted items a role repairs
    by_hand: dict[str, list[str]]  # node -> its drifted items no role repairs (the operator's)
    roles: list[str]  # the owners, what is built on them and hvd_verify, in site.yml order (repair_roles); [] if none
    reinstalled: list[str]  # targets whose machine-id changed: every role runs on them, never a partial repair
    reinstall_env: list[str]  # targets whose env manifest is not the recorded one: hvd_pyenv installs the env again
    deep: bool = False  # read deep (up --deep, or a `check --deep` finding): hvd_pyenv and the read-back read so too
    # target -> role -> its drifted items that role repairs, for a repair of drift alone (not after changed inputs, not
    # on a reinstalled node): a role may then leave alone what the read found in sync (hvd_base: its packages and
    # fabric fact where only its managed files drifted).
    items: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    # Whether the post-flight tests the SSH mesh and mpirun again (hvd_verify_mesh: always, every node reaching every
    # other, even where the repair put back the bytes they last passed with), or not (never: the repair moved none of
    # what they rely on, MESH_ROLES).
    prove_mesh: bool = True

    @property
    def tags(self) -> str:
        """``--tags`` of the repair run: its roles, then hvd_state (the read-back the loop is closed with)."""
        return ",".join([*self.roles, "hvd_state"])

    @property
    def extravars(self) -> dict[str, Any]:
        """The repair run's extra variables: the roles' plays take only the targets (the post-flight takes every
        node), the roles may read what drifted (hvd_repair_items), and hvd_pyenv reinstalls the envs whose manifest
        changed."""
        return {"hvd_targets": ",".join(self.targets),
                **({"hvd_repair_items": self.items} if self.items else {}),
                **({"hvd_pyenv_reinstall": self.reinstall_env} if self.reinstall_env else {}),
                "hvd_verify_mesh": "always" if self.prove_mesh else "never",
                **(DEEP if self.deep else {})}

    def summary(self, read_seconds: float) -> dict[str, Any]:
        """``fast_path`` in `up --json`."""
        return {"in_sync": self.in_sync, "repaired": self.repaired, "by_hand": self.by_hand,
                "read_seconds": round(read_seconds, 2), "deep": self.deep}


# What a role's repair may change under later roles, which then run too: a component reinstalled may come back at
# another version, and what was built or installed against it is judged again by its own key (the driver, Open MPI,
# CUDA, cuDNN and NCCL under nccl-tests and Horovod's wheel; Slurm under pyxis), and an env installed again holds no Horovod. A
# role not named here puts nothing on a node that a later role reads; the read-back that closes the loop names
# anything a repair still left wrong.
BUILT_ON = {
    # the GPUs' compute capabilities the driver's fact records: what nccl-tests and Horovod compile device code for
    "hvd_nvidia_driver": ("hvd_nccl_tests", "hvd_horovod"),
    "hvd_cuda": ("hvd_nccl_tests", "hvd_horovod"),
    "hvd_cudnn": ("hvd_horovod",),
    "hvd_nccl": ("hvd_nccl_tests", "hvd_horovod"),
    "hvd_openmpi": ("hvd_nccl_tests", "hvd_horovod"),
    "hvd_slurm": ("hvd_pyxis",),
    "hvd_pyenv": ("hvd_horovod",),
}
POST_FLIGHT = "hvd_verify"
# Items whose repair changes nothing a later role reads: a package's hold and its unattended-upgrades guard put back
# (a package that moved while unheld reads as its own version item, which does pull BUILT_ON's roles).
HOLDS = (".hold", ".guard")
# The roles whose repair may move what the post-flight's reach test and its mpirun across the nodes rely on: the
# node itself (reinstalled: the pre-flight), its names, addresses and fabric (hvd_base's /etc/hosts block), the
# cluster's keys and pinned host keys (hvd_ssh_mesh), Open MPI. A repair of anything else (an env file taken out,
# the same wheel installed again, a hold put back) is proven by its own role's check, the allreduces where a byte
# they depend on changed, and the read-back of every node; the mesh, read in sync from the controller, is not
# tested again node to node (issue 54: the proof sized to what changed).
MESH_ROLES = frozenset({"hvd_preflight", "hvd_base", "hvd_ssh_mesh", "hvd_openmpi"})


def repair_roles(owners: set[str], holds_only: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """The roles of a repair, in site.yml's order: those that own a drifted item, those built on them (BUILT_ON,
    transitively; not on an owner in ``holds_only``, whose drifted items are all holds: it moves nothing), then the
    post-flight, which proves the whole cluster after any repair; none without an owner. A reinstalled node's owner
    is the pre-flight: every role, as a first converge."""
    from . import drift

    if not owners:
        return []
    if "hvd_preflight" in owners:
        return list(drift.ROLES)
    todo, seen = list(owners), set()
    while todo:
        role = todo.pop()
        if role not in seen:
            seen.add(role)
            if role not in holds_only:
                todo.extend(BUILT_ON.get(role, ()))
    return [role for role in drift.ROLES if role in seen | {POST_FLIGHT}]


def plan(report: Report, names: Sequence[str]) -> Repair:
    """What to converge for ``report`` (every node read, none unreachable, each with a record), for the nodes
    ``names`` in inventory order. No target: nothing to converge (in sync, or only what no role repairs)."""
    from . import drift  # as everywhere in the command: only a command that compares nodes loads it

    targets = [n for n in names if n in report.drifted and report.repair_roles(n)]
    owned = [d for n in targets for d in report.drifted[n] if d.role]
    holds_only = {d.role for d in owned} - {d.role for d in owned if not d.item.endswith(HOLDS)}
    roles = repair_roles({role for n in targets for role in report.repair_roles(n)}, holds_only)
    reinstalled = [n for n in targets if any(d.item == drift.REINSTALLED for d in report.drifted[n])]
    items: dict[str, dict[str, list[str]]] = {}
    for n in targets:
        if n not in reinstalled:
            for d in report.drifted[n]:
                if d.role:
                    items.setdefault(n, {}).setdefault(d.role, []).append(d.item)
    return Repair(
        in_sync=[n for n in names if n not in report.drifted],
        targets=targets,
        repaired={n: [d.item for d in report.drifted[n] if d.role] for n in targets},
        by_hand={n: [d.item for d in report.by_hand(n)] for n in names if report.by_hand(n)},
        roles=roles,
        reinstalled=reinstalled,
        reinstall_env=[n for n in targets if any(d.item == ENV_MANIFEST for d in report.drifted[n])],
        items=items,
        prove_mesh=bool(reinstalled) or any(d.role in MESH_ROLES and not d.item.endswith(HOLDS) for d in owned),
    )


def after_change(report: Report, names: Sequence[str], first_role: str) -> Repair:
    """What to converge when the inputs changed (``first_role``: the earliest role that reads a changed variable,
    inputs.change) on a cluster whose nodes all have records: every node, with the roles from ``first_role`` or from
    the earliest role some node's drift needs, whichever comes first, to the end of site.yml. Its roles start with
    hvd_preflight where a node was reinstalled: every role, as a full converge. The post-flight tests the mesh and
    mpirun again only where those roles (or the drift) can have moved them."""
    from . import drift

    drifted = plan(report, names)
    first = min([drift.ROLES.index(first_role), *([drift.ROLES.index(drifted.roles[0])] if drifted.roles else [])])
    roles = drift.ROLES[first:]
    # The mesh and mpirun proven again where this run moves what they rely on (a role of MESH_ROLES runs, a node's
    # drift moved it, a node was reinstalled) or where the post-flight's own variables changed; a change that
    # reaches only the env and Horovod (a package added) is proven by their checks and the allreduces.
    mesh = drifted.prove_mesh or bool(MESH_ROLES.intersection(roles)) or first_role == POST_FLIGHT
    return Repair(in_sync=[], targets=list(names), repaired=drifted.repaired, by_hand=drifted.by_hand,
                  roles=roles, reinstalled=drifted.reinstalled, reinstall_env=drifted.reinstall_env,
                  prove_mesh=mesh)


# ------------------------------------------------------------------------------------------ a roll's order and scope


def batch_size(value: str, total: int) -> int:
    """``--batch``: N nodes, or P% of ``total`` rounded up; at least 1."""
    text = str(value).strip()
    try:
        if text.endswith("%"):
            percent = float(text[:-1])
            if not 0 < percent <= 100:
                raise ValueError
            return max(1, math.ceil(total * percent / 100))
        count = int(text)
        if count < 1:
            raise ValueError
        return count
    except ValueError:
        raise HvdError(f"--batch: {value!r}: give a number of nodes (1 or more) or a percentage (1% to 100%)") from None


def batches(names: list[str], batch: str, canary: str | None = None) -> list[list[str]]:
    """The order of a roll: the canary alone, then the other nodes in ``names``' order, ``batch`` at a time."""
    size = batch_size(batch, len(names))
    rest = [n for n in names if n != canary]
    order = [[canary]] if canary else []
    return order + [rest[i:i + size] for i in range(0, len(rest), size)]


@dataclass(frozen=True)
class Scope:
    """What a roll changes: ``nodes`` (hosts.yaml's order), how (``tags``: None for all of site.yml, else the
    fast path's roles; ``extravars``), and the nodes left as they are: ``in_sync`` (in their desired state: proven
    with the first batch, never changed) and ``by_hand`` (what no role repairs: named, never changed)."""

    nodes: list[str]
    tags: str | None = None
    extravars: dict[str, Any] = field(default_factory=dict)
    in_sync: list[str] = field(default_factory=list)
    by_hand: dict[str, list[str]] = field(default_factory=dict)

    def batch_tags(self, number: int) -> str | None:
        """The tags of batch ``number`` (1-based): the first of a whole-site.yml roll runs the pre-flight over every
        node (its plays take hvd_nodes); the others skip it, it has already looked at them all."""
        if self.tags is not None or number == 1:
            return self.tags
        from .drift import ROLES

        return ",".join([r for r in ROLES if r != "hvd_preflight"] + ["hvd_state"])


def scope(names: list[str], todo: Repair | None) -> Scope:
    """The roll's scope: every node and every role (``todo`` None: the inputs changed, a node has no record or could
    not be read), or the drifted nodes some role repairs, with the roles the fast path of `up` would run."""
    if todo is None:
        return Scope(list(names))
    extravars = {k: v for k, v in todo.extravars.items() if k != "hvd_targets"}  # each batch names its own
    return Scope(list(todo.targets), todo.tags, extravars, list(todo.in_sync), dict(todo.by_hand))
