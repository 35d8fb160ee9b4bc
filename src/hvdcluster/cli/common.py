"""What the commands share: exit codes, the checks of their arguments, hosts.yaml loaded and resolved (an
offline bundle checked with it), the inventory rendered, the console.

Every argument is checked before anything runs or is written: a bad ``-o``, ``--limit`` or ``--tags`` is one line
naming the argument and exit code 2, like a mistake in hosts.yaml.
"""

from __future__ import annotations

import argparse
import difflib
import fnmatch
import os
import sys
from pathlib import Path

from .. import compat, inventory, paths, spec
from ..errors import HvdError
from ..progress import Console

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def load_and_resolve(path: str, bundle_dir: str | None = None) -> tuple[spec.ClusterSpec, compat.Plan]:
    """hosts.yaml, validated, and its stack resolved: bad input or an impossible stack stop here (exit 2). With an
    offline bundle (``--bundle`` or network.bundle) its manifest must be pinned or signed, and every file it lists must
    have its sha256."""
    cluster = with_bundle(spec.load(path), bundle_dir)
    plan = compat.resolve(cluster.stack, lines=cluster.stack_lines, path=cluster.path)
    mpi = plan.stack.get("mpi") or {}
    if cluster.network.bundle and mpi.get("source") == "source" and not inventory.bundled_tarball(
            plan.stack, cluster.network.bundle):
        raise HvdError(f"bundle: {cluster.network.bundle} holds no Open MPI tarball for stack.mpi.url {mpi.get('url')} "
                       "(needed by hvd_openmpi): gather the bundle with this stack")
    return cluster, plan


def with_bundle(cluster: spec.ClusterSpec, folder: str | None) -> spec.ClusterSpec:
    """``--bundle DIR`` in network.bundle's place; then the bundle's check, before any node is contacted: its manifest
    pinned (network.bundle_sha256) or signed (network.bundle_signers), then every file by its sha256 (exit 2 naming the
    first that differs); what the controller cache lacks is written there from that same read."""
    from dataclasses import replace

    from .. import bundle

    if folder is not None:
        for key in spec.NOT_WITH_BUNDLE:
            if getattr(cluster.network, key):
                raise HvdError(f"--bundle: {cluster.path} sets network.{key}: an offline bundle is the nodes' only "
                               "source (drop that key for this cluster)")
        path = Path(folder).expanduser().resolve()
        if not (path / "manifest.yaml").is_file():
            problem = "holds no manifest.yaml" if path.is_dir() else "is not a folder"
            raise HvdError(f"--bundle: {path} {problem}; make the bundle with `hvdcluster bundle hosts.yaml DIR`")
        cluster = replace(cluster, network=replace(cluster.network, bundle=str(path)))
    if cluster.network.bundle:
        net = cluster.network
        bundle.check_trusted(net.bundle, sha256=net.bundle_sha256, signers=net.bundle_signers, hosts=cluster.path,
                             cache_dir=paths.controller_cache())
    return cluster


# --------------------------------------------------------------------------------------------- arguments


def check_output(value: str) -> Path:
    """``-o/--output``: a folder that exists and is writable, or one that can be created in one that is."""
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise HvdError(f"-o/--output: {path} is a file, not a folder; name the folder that holds the inventories")
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise HvdError(f"-o/--output: {path}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise HvdError(f"-o/--output: {path}: {existing} is not writable; name a folder you can write in")
    return path


def inventory_root(output: Path, cluster: spec.ClusterSpec) -> Path:
    """``<output>/<cluster>``, refused when something other than a folder has that name."""
    root = output / cluster.cluster
    if (root.exists() or root.is_symlink()) and not root.is_dir():
        raise HvdError(f"-o/--output: {root} is a file, not an inventory folder; move it or name another -o")
    return root


GROUPS = ("all", inventory.GROUP)


def check_limit(value: str | None, cluster: spec.ClusterSpec) -> None:
    """``--limit``: host names of hosts.yaml (comma- or colon-separated, each may start with ``!`` or ``&``),
    ``all``, the cluster group, or a ``*``/``?`` glob that matches one of them."""
    if value is None:
        return
    names = [host.name for host in cluster.hosts]
    known = names + list(GROUPS)
    for item in (part.strip() for chunk in value.split(",") for part in chunk.split(":")):
        pattern = item.lstrip("!&")
        if not pattern:
            raise HvdError(f"--limit: an empty host name in {value!r} (separate names with ',')")
        if pattern in known:
            continue
        if any(char in pattern for char in "~@[]"):
            raise HvdError(f"--limit: {item!r}: give host names, 'all', {inventory.GROUP} or a simple glob (* ?)")
        if "*" in pattern or "?" in pattern:
            if fnmatch.filter(known, pattern):
                continue
            raise HvdError(f"--limit: {pattern!r} matches no host of {cluster.path} (hosts: {', '.join(names)})")
        close = difflib.get_close_matches(pattern.lower(), names, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise HvdError(f"--limit: unknown host {pattern!r} ({hint}hosts of {cluster.path}: {', '.join(names)})")


SPECIAL_TAGS = ("all", "always")


def role_names() -> list[str]:
    """The roles playbooks/site.yml runs, each a tag of its own (drift.ROLES, tied to site.yml by a test); the
    building blocks other roles include (hvd_fanout, hvd_gpu_component) and hvd_bundle are not tags of site.yml."""
    from .. import drift

    return sorted(drift.ROLES)


def check_tags(value: str | None) -> None:
    """``--tags``: comma-separated role names (``hvd_base``, ...), ``all`` or ``always``."""
    if value is None:
        return
    valid = role_names()
    for tag in (part.strip() for part in value.split(",")):
        if tag in valid or tag in SPECIAL_TAGS:
            continue
        if not tag:
            raise HvdError(f"--tags: an empty tag in {value!r} (separate role names with ',')")
        close = difflib.get_close_matches(tag, valid, n=1) or [name for name in valid if name == f"hvd_{tag}"]
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise HvdError(f"--tags: unknown tag {tag!r} ({hint}tags are the role names: {', '.join(valid)})")


def render(cluster: spec.ClusterSpec, output: Path, plan: compat.Plan) -> Path:
    try:
        return inventory.render(cluster, output, plan)
    except OSError as exc:
        raise HvdError(f"cannot write the inventory in {output / cluster.cluster}: {exc.strerror or exc}") from None


def read_only_start(args: argparse.Namespace) -> tuple[spec.ClusterSpec, Path, list[str]]:
    """What every read-only look at the nodes (check, health) starts with, before any node is contacted: the operator
    environment checked, hosts.yaml loaded, ``--limit`` checked, the inventory `up` wrote; the host names of
    hosts.yaml in its order."""
    from ..runner import check_environment

    check_environment()
    cluster = spec.load(args.hosts)
    check_limit(args.limit, cluster)
    return cluster, existing_inventory(args, cluster), [h.name for h in cluster.hosts]


def existing_inventory(args: argparse.Namespace, cluster: spec.ClusterSpec) -> Path:
    """The inventory `up` wrote for ``cluster`` (check and run work on it; they never rewrite it)."""
    root = Path(args.output) / cluster.cluster
    if not (root / "hosts.yml").is_file():
        raise HvdError(f"{root}: no inventory yet; run `hvdcluster up {args.hosts}` first")
    return root


def bastion_problem(cluster: spec.ClusterSpec, root: Path) -> str:
    """With ssh.proxy_jump: why the bastion cannot be used ("" when it can, or without a bastion)."""
    jump = cluster.ssh.proxy_jump
    return inventory.bastion_problem(vars(jump), str(root / "ssh")) if jump is not None else ""


def console_for(args: argparse.Namespace) -> Console:
    console = Console(sys.stderr if args.json else sys.stdout)
    if args.json:
        console.live = False
    return console
