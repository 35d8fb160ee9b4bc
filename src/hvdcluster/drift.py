"""Drift: what a node has against what it should have, folded the way ``clush -b`` folds output.

A node's *state* is the flat dict the state module reads on it (item key -> str/int/bool, e.g.
``env.lock``, ``pkg.libnccl2``, ``profile.hvd-cuda.sh``). After a successful converge the controller keeps
each node's state as its *desired* state. :func:`compare` holds every node against its own record and
against its peers, :func:`confirm` reads a converge's result back, and :func:`gate` is ``run``'s launch check: the
things every rank must share are the same on every node. :mod:`hvdcluster.drift_text` says what they found, with
identical nodes grouped under one folded node set (``gpu[01-16]: in sync``).

Plain functions over plain data: no Ansible, no terminal.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

# ABSENT: a key one side lacks, as the state readers write it.
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import ABSENT

from .output import show

# The roles in playbooks/site.yml order: a repair runs the ones it needs in this order (repair.repair_roles).
ROLES = [
    "hvd_preflight",
    "hvd_base",
    "hvd_ssh_mesh",
    "hvd_nvidia_driver",
    "hvd_cuda",
    "hvd_cudnn",
    "hvd_nccl",
    "hvd_openmpi",
    "hvd_slurm",
    "hvd_pyxis",
    "hvd_nccl_tests",
    "hvd_pyenv",
    "hvd_horovod",
    "hvd_verify",
]


PEERS_NOTE = "differs from peers"
NO_RECORD_NOTE = "no desired record: compared with peers"

# Items that legitimately differ from node to node: held against the node's own record only.
# What may differ between healthy nodes: compared with the node's own record only. horovod.checked is the stamp of
# the check-build that passed on that node (its build key and its installed RECORD's modification time);
# env.manifest is what the node's env manifest vouches for: the same on every node that installed the same archive,
# but an env rebuilt from the same inputs by an earlier version (byte caches stamped with their install time) differs
# in its bytes, so it is held against the node's own record, where a manifest changed to vouch for an addition shows.
PER_NODE_ITEMS = ("os.kernel", "os.machine-id", "driver.loaded", "horovod.checked", "env.manifest",
                  "base.fabric_interface",
                  # Open MPI's single-copy path off where this node's ranks may not read each other's memory (a
                  # container beside a bare-metal node): hvd_openmpi's block, per node (hvd_state_mesh.MPI_BLOCK)
                  "mpi.single_copy",
                  # Slurm: slurmctld runs on the controller node only; gres.conf names the node's own GPUs
                  "slurm.slurmctld", "slurm.config.gres.conf")
PER_NODE_PREFIXES = ("gpu.",)

# Items every node must share: a node whose own record is odd among its peers' records is reported.
PEER_ITEMS = ("mpi.version", "mpi.path", "cuda.version", "cudnn.version", "driver.installed", "os.release",
              "slurm.config.slurm.conf", "slurm.config.cgroup.conf")
PEER_PREFIXES = ("env.", "horovod.", "nccl.", "nccl_tests.", "pyxis.", "pkg.", "launch.")

# Items `check` names as a notice, never as a drift (compare leaves them out): what may well be right but deserves a
# look. The controller's own key is one of the keys beyond the cluster's.
NOTICE_ITEMS = {"mesh.other_keys": "keys in the login user's authorized_keys beyond the cluster's",
                # Slurm: a drain someone made (an operator, or hvdcluster's roll or health --drain), with who set it:
                # theirs to lift (hvdcluster lifts its own), never a drift (plugins/module_utils/hvd_slurm.py)
                "slurm.drain": "drained in Slurm (the reason, and who set it), left as it is"}

# What every rank of a job must share: `run` launches only when these are identical on all nodes.
GATE_ITEMS = ("env.lock", "env.key", "horovod.version", "horovod.record", "horovod.key", "mpi.version",
              "nccl.version", "nccl.header")
GATE_PREFIXES = ("env.dist.", "env.conda.")

# Package name prefixes -> role, first match wins (so nvidia-cuda-toolkit is CUDA's, not the driver's,
# and cuda-drivers is the driver's, not CUDA's).
_PKG_OWNERS = (
    (("openmpi", "libopenmpi"), "hvd_openmpi"),
    (("slurm", "munge", "libmunge"), "hvd_slurm"),
    (("cuda-drivers",), "hvd_nvidia_driver"),
    (("nvidia-cuda-toolkit", "nvidia-cuda-", "cuda-toolkit-", "cuda-"), "hvd_cuda"),
    (("libcudnn", "nvidia-cudnn"), "hvd_cudnn"),
    (("libnccl",), "hvd_nccl"),
    (("nvidia-", "libcuda", "libnvidia", "firmware-nvidia"), "hvd_nvidia_driver"),
)

# A node whose machine-id changed was reinstalled: the pre-flight and every role after it, never a partial repair.
REINSTALLED = "os.machine-id"

_PREFIX_OWNERS = (
    (REINSTALLED, "hvd_preflight"),
    ("os.", ""),
    # What a rank inherits or reads beside what the roles install (plugins/module_utils/hvd_state_mesh.launch_state): the
    # variables SSH gives it, MPI/NCCL/linker files no role writes, what ssh makes of a peer's name. The operator's.
    ("launch.", ""),
    ("driver.", "hvd_nvidia_driver"),
    ("gpu.", "hvd_nvidia_driver"),
    ("cuda.", "hvd_cuda"),
    ("cudnn.", "hvd_cudnn"),
    ("nccl.", "hvd_nccl"),
    ("mpi.", "hvd_openmpi"),
    ("slurm.", "hvd_slurm"),
    ("pyxis.", "hvd_pyxis"),
    ("nccl_tests.", "hvd_nccl_tests"),
    ("env.", "hvd_pyenv"),
    ("horovod.", "hvd_horovod"),
    ("mesh.", "hvd_ssh_mesh"),
    ("base.", "hvd_base"),
)

# profile.hvd-<x>.sh / ldconf.hvd-<x>.conf are written by hvd_<x> for these <x>; others by hvd_base.
_CONFIG_OWNERS = {"cuda", "cudnn", "nccl", "openmpi"}


def owner(item: str) -> str:
    """The role that repairs ``item``; ``""`` when no role does (the OS: the operator fixes it by hand)."""
    if item.startswith("pkg."):
        name = item[len("pkg."):]
        for suffix in (".hold", ".guard"):
            name = name.removesuffix(suffix)
        for prefixes, role in _PKG_OWNERS:
            if name.startswith(prefixes):
                return role
        return "hvd_base"
    for prefix, role in _PREFIX_OWNERS:
        if item.startswith(prefix):
            return role
    for kind, suffix in (("profile.", ".sh"), ("ldconf.", ".conf")):
        if item.startswith(kind):
            name = item[len(kind):]
            if name.startswith("hvd-") and name.endswith(suffix):
                x = name[len("hvd-"): -len(suffix)]
                if x in _CONFIG_OWNERS:
                    return f"hvd_{x}"
            return "hvd_base"
    return "hvd_base"


def _role_rank(role: str) -> int:
    return ROLES.index(role) if role in ROLES else len(ROLES)


def _is_per_node(item: str) -> bool:
    return item in PER_NODE_ITEMS or item.startswith(PER_NODE_PREFIXES)


def _repair_may_move(item: str) -> bool:
    """Per-node stamps a converge of the node may rewrite (its env manifest is not one: the same archive gives the
    same manifest, and a changed one is what a repair must put right)."""
    return _is_per_node(item) and item != "env.manifest"


def _is_peer_item(item: str) -> bool:
    return (item in PEER_ITEMS or item.startswith(PEER_PREFIXES)) and not _is_per_node(item)


def _is_gate_item(item: str) -> bool:
    return item in GATE_ITEMS or item.startswith(GATE_PREFIXES)


def canon(value: Any) -> str:
    """A comparable, hashable form: ``1`` and ``"1"`` and ``True`` stay different."""
    return json.dumps(value, sort_keys=True)


def _get(state: Mapping[str, Any], item: str) -> Any:
    return state.get(item, ABSENT)


def _majority(states: Sequence[Mapping[str, Any]], item: str) -> Any:
    """The value most of ``states`` share for ``item``; a tie goes to the earliest state holding it."""
    values = [_get(s, item) for s in states]
    counts = Counter(canon(v) for v in values)
    best = max(counts.values())
    for value in values:  # first in order among the most common
        if counts[canon(value)] == best:
            return value
    raise ValueError("no states")  # pragma: no cover - callers pass at least one


@dataclass(frozen=True)
class Difference:
    node: str
    item: str
    expected: Any
    found: Any
    role: str
    note: str = ""

    def key(self) -> tuple[str, str, str, str, str]:
        """What makes two nodes' differences the same difference (the node aside)."""
        return (self.item, canon(self.expected), canon(self.found), self.role, self.note)


@dataclass
class Report:
    nodes: list[str] = field(default_factory=list)  # every node, in inventory order
    in_sync: list[str] = field(default_factory=list)
    drifted: dict[str, list[Difference]] = field(default_factory=dict)
    unreachable: list[str] = field(default_factory=list)
    unrecorded: list[str] = field(default_factory=list)  # reachable nodes without a desired record

    def repair_roles(self, node: str) -> list[str]:
        """The roles that repair ``node``'s differences, in site.yml order (by-hand items left out)."""
        roles = {d.role for d in self.drifted.get(node, []) if d.role}
        return sorted(roles, key=_role_rank)

    def first_role(self, node: str) -> str:
        """The earliest role to converge ``node`` from; ``""`` when no role repairs what drifted."""
        roles = self.repair_roles(node)
        return roles[0] if roles else ""

    def by_hand(self, node: str) -> list[Difference]:
        """The differences no role repairs (the OS release or kernel): the operator's."""
        return [d for d in self.drifted.get(node, []) if not d.role]


def _without_notices(states: Mapping[str, Mapping[str, Any] | None]) -> dict[str, Mapping[str, Any] | None]:
    """``states`` less the :data:`NOTICE_ITEMS`: what compare holds against records and peers."""
    return {node: None if state is None else {k: v for k, v in state.items() if k not in NOTICE_ITEMS}
            for node, state in states.items()}


def env_files_differ(report: Report, node: str) -> bool:
    """Whether ``report`` finds ``node``'s env files not as they were installed (env.files)."""
    return any(d.item == "env.files" for d in report.drifted.get(node, []))


def notices(found: Mapping[str, Mapping[str, Any] | None]) -> dict[str, dict[str, Any]]:
    """node -> {item: value} of the :data:`NOTICE_ITEMS` each node read has (left out where absent)."""
    out: dict[str, dict[str, Any]] = {}
    for node, state in found.items():
        notes = {item: state[item] for item in NOTICE_ITEMS if state and _get(state, item) != ABSENT}
        if notes:
            out[node] = notes
    return out


def in_order(order: Iterable[str] | None, *groups: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for name in order or ():
        seen.setdefault(name, None)
    for group in groups:
        for name in group:
            seen.setdefault(name, None)
    return list(seen)


# Items whose value alone says the node is not as installed, whatever its record or its peers say. driver.next_boot:
# the kernel the node boots next has no NVIDIA module, driver.nouveau: nouveau not blacklisted or the initramfs of
# that kernel older than its blacklist (plugins/module_utils/hvd_kernel.py); driver.persistence,
# driver.peermem, driver.fabricmanager: a fabric piece the node's hardware needs is missing or off
# (plugins/module_utils/hvd_fabric.py). All absent on CPU nodes and in containers. Judged on every node, recorded or
# not, by compare (check, the fast path of up), confirm (the loop contract) and gate (run).
SELF_EVIDENT = {"env.files": ("ok", ABSENT), "driver.next_boot": ("ok", ABSENT), "driver.nouveau": ("ok", ABSENT),
                "driver.persistence": ("ok", ABSENT),
                "driver.peermem": ("ok", ABSENT), "driver.fabricmanager": ("ok", ABSENT),
                # Slurm (plugins/module_utils/hvd_slurm.slurm_state): its daemons down, munge refused by the controller,
                # the node down or drained by Slurm itself. Judged by compare and confirm; not by run's gate, whose
                # horovodrun over SSH does not go through Slurm.
                "slurm.munge": ("ok", ABSENT), "slurm.slurmd": ("running", ABSENT),
                "slurm.slurmctld": ("running", ABSENT), "slurm.node": ("ok", ABSENT), "slurm.pmix": ("ok", ABSENT)}
NOT_GATED = ("slurm.",)


SELF_EVIDENT_NOTE = "wrong on any node"


def self_evident(node: str, state: Mapping[str, Any]) -> list[Difference]:
    """``node``'s :data:`SELF_EVIDENT` items whose value is not one of those allowed."""
    return [Difference(node, item, allowed[0], _get(state, item), owner(item), SELF_EVIDENT_NOTE)
            for item, allowed in SELF_EVIDENT.items() if _get(state, item) not in allowed]


def compare(
    desired: Mapping[str, Mapping[str, Any] | None],
    found: Mapping[str, Mapping[str, Any] | None],
    unreachable: Iterable[str] = (),
    order: Sequence[str] | None = None,
) -> Report:
    """Hold every node against its desired record and against its peers.

    ``desired``: node -> recorded state (None: never converged, or the record was wiped).
    ``found``: node -> state read now (None or missing: it could not be read, counted unreachable).
    ``order``: the inventory's node order (default: desired's, then found's, then unreachable's).

    - A node with a record: every item where what was found differs from the record. Where the node
      matches its record but the record itself is odd among the peers' records on an item all nodes must
      share (:data:`PEER_ITEMS`), that is reported with the peers' value as expected ("differs from peers").
    - A node without a record: every item except the per-node ones (kernel, GPU count, loaded driver)
      against the value most peers' records share; where no node has a record, against the value most
      reachable nodes have now.
    - Every node, recorded or not: the :data:`SELF_EVIDENT` items, whose value alone says it is wrong (a kernel
      that boots next without NVIDIA modules, an env holding what was not installed), whatever its record and
      its peers say.
    """
    unreachable = list(unreachable)
    nodes = in_order(order, desired, found, unreachable)
    desired, found = _without_notices(desired), _without_notices(found)
    report = Report(nodes=nodes)
    down = set(unreachable) | {n for n in nodes if found.get(n) is None}
    report.unreachable = [n for n in nodes if n in down]

    recorded = [n for n in nodes if desired.get(n) is not None]
    reachable = [n for n in nodes if n not in down]
    records = [desired[n] for n in recorded]  # type: ignore[misc]

    # The peers' shared value of every item that all nodes must share, from the records.
    peer_value: dict[str, Any] = {}
    if len(records) > 1:
        items = sorted({k for r in records for k in r if _is_peer_item(k)})
        peer_value = {item: _majority(records, item) for item in items}

    for node in reachable:
        now = found[node]
        assert now is not None
        record = desired.get(node)
        diffs: list[Difference] = []
        if record is not None:
            for item in sorted(set(record) | set(now)):
                want, have = _get(record, item), _get(now, item)
                if canon(want) != canon(have):
                    diffs.append(Difference(node, item, want, have, owner(item)))
                elif item in peer_value and canon(peer_value[item]) != canon(have):
                    diffs.append(Difference(node, item, peer_value[item], have, owner(item), PEERS_NOTE))
        else:
            report.unrecorded.append(node)
            peers = [desired[n] for n in recorded if n != node]
            if not peers:  # nothing converged yet: the odd one out among what the nodes have now
                peers = [found[n] for n in reachable]
            if peers:
                items = {k for s in peers for k in s} | set(now)  # type: ignore[union-attr]
                for item in sorted(i for i in items if not _is_per_node(i)):
                    want, have = _majority(peers, item), _get(now, item)  # type: ignore[arg-type]
                    if canon(want) != canon(have):
                        diffs.append(Difference(node, item, want, have, owner(item), NO_RECORD_NOTE))
        diffs += [d for d in self_evident(node, now) if not any(seen.item == d.item for seen in diffs)]
        if diffs:
            report.drifted[node] = diffs
        else:
            report.in_sync.append(node)
    return report


NOT_REPAIRED = "still differs after the converge"
UNREPAIRABLE = "no role repairs it"

def confirm(
    desired: Mapping[str, Mapping[str, Any] | None],
    found: Mapping[str, Mapping[str, Any] | None],
    *,
    converged: Iterable[str],
    records_current: bool,
    unreachable: Iterable[str] = (),
    order: Sequence[str] | None = None,
) -> Report:
    """The loop contract after a converge: every node read back (``found``, by the reader `check` uses) is held
    against what it must be; what still differs is named, never recorded and never reported up to date.

    ``records_current``: the records in ``desired`` were made from the same inputs as this converge (a fast-path
    repair, or ``up --full`` with nothing changed): each node is held against its record, less the per-node
    items of the nodes in ``converged`` (a repair may rewrite them: the Horovod gate's stamp, a reinstalled
    node's machine-id). Otherwise (the inputs changed) the records say nothing about the new state: each node is
    held against its peers' new state. Either way a node whose env holds anything but what was installed
    (:data:`SELF_EVIDENT`) differs, even when every node differs alike.
    """
    converged = set(converged)
    if records_current:
        want: dict[str, Mapping[str, Any] | None] = {}
        for node, record in desired.items():
            now = found.get(node)
            if record is not None and node in converged and now is not None:
                record = {**record, **{k: v for k, v in now.items() if _repair_may_move(k)}}
                record = {k: v for k, v in record.items() if not _repair_may_move(k) or k in now}
            want[node] = record
        report = compare(want, found, unreachable, order)
    else:
        report = compare({}, found, unreachable, order)
    return report  # compare held every node to SELF_EVIDENT too


def gate(found: Mapping[str, Mapping[str, Any] | None], order: Sequence[str] | None = None) -> list[str]:
    """``run``'s launch gate: what every rank shares (env, Horovod build, MPI, NCCL) must be identical, and no
    node may hold a :data:`SELF_EVIDENT` item that is wrong.

    One message per odd node and item, naming the node, the item, its value and the others' (majority's)
    value; a node whose state could not be read is a message too. Empty: launch.
    """
    nodes = in_order(order, found)
    messages = [f"{n}: no state could be read from it" for n in nodes if found.get(n) is None]
    states = [(n, found[n]) for n in nodes if found.get(n) is not None]
    messages += [f"{d.node}: {d.item} is {show(d.found)} ({SELF_EVIDENT_NOTE}: expected {show(d.expected)})"
                 for n, state in states for d in self_evident(n, state)  # type: ignore[arg-type]
                 if not d.item.startswith(NOT_GATED)]
    if len(states) < 2:
        return messages
    items = sorted({k for _, s in states for k in s if _is_gate_item(k)})  # type: ignore[union-attr]
    majority = {item: _majority([s for _, s in states], item) for item in items}  # type: ignore[misc]
    for node, state in states:
        for item in items:
            have = _get(state, item)  # type: ignore[arg-type]
            if canon(have) != canon(majority[item]):
                messages.append(f"{node}: {item} is {show(have)}, the other nodes have {show(majority[item])}")
    return messages
