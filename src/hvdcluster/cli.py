"""The ``hvdcluster`` command: parse, call, render, exit code. Nothing else lives here.

Every argument is checked before anything runs or is written: a bad ``-o``, ``--limit``, ``--tags`` or
``-np`` is one line naming the argument and exit code 2, like a mistake in hosts.yaml.
"""

from __future__ import annotations

import argparse
import difflib
import fnmatch
import os
import shlex
import stat
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from . import __version__, compat, inventory, lock, paths, spec
from .errors import HvdError
from .progress import Console, Tracker, dump_json, printable, transfer_report

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def cmd_init(args: argparse.Namespace) -> int:
    target = Path(args.path)
    if target.is_dir():
        raise HvdError(f"init: {target} is a folder; name the file to write, e.g. {target / 'hosts.yaml'}")
    folder = target.parent
    if not folder.is_dir():
        problem = "is not a folder" if folder.exists() else "does not exist"
        raise HvdError(f"init: {target}: folder {folder} {problem}; create it first or name another path")
    if target.exists() or target.is_symlink():
        if not args.force:
            raise HvdError(f"{target}: exists; pass --force to overwrite it")
        if not stat.S_ISREG(target.lstat().st_mode):
            raise HvdError(f"init: {target} is not a regular file; name a file to write")
    try:
        target.write_text(resources.files("hvdcluster.data").joinpath("hosts.example.yaml").read_text())
    except OSError as exc:
        raise HvdError(f"init: cannot write {target}: {exc.strerror or exc}") from None
    print(f"wrote {target}: edit the hosts, then run `hvdcluster up {target}`")
    return EXIT_OK


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

    from . import bundle

    if folder is not None:
        for key in spec.NOT_WITH_BUNDLE:
            if getattr(cluster.network, key):
                raise HvdError(f"--bundle: {cluster.path} sets network.{key}: an offline bundle is the nodes' only "
                               "source (drop that key for this cluster)")
        path = Path(folder).expanduser().resolve()
        if not (path / "manifest.yaml").is_file():
            problem = "holds no manifest.yaml" if path.is_dir() else "is not a folder"
            raise HvdError(f"--bundle: {path} {problem}; make the bundle with `hvdcluster bundle hosts.yaml -o DIR`")
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
    from . import drift

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


def cmd_plan(args: argparse.Namespace) -> int:
    if args.probe:
        check_output(args.output)  # --probe pins host keys in <output>/<cluster>/ssh/known_hosts, logs in runs/
    cluster = spec.load(args.hosts)
    node, facts = compat.NodeInfo(), []
    if args.probe:
        from . import probe

        root = inventory_root(Path(args.output), cluster)
        node, facts = probe.probe(cluster, root)
    plan = compat.resolve(cluster.stack, node, lines=cluster.stack_lines, path=cluster.path)
    if args.json:
        dump_json(sys.stdout, {"cluster": cluster.cluster, "stack": plan.stack, "patches": list(plan.patches),
                               "notes": list(plan.notes), "nodes": [vars(f) for f in facts]})
        return EXIT_OK
    for f in facts:
        print(f"probed {probe.describe(f)}")
    print(f"cluster {cluster.cluster}: resolved stack")
    print(yaml.safe_dump(plan.stack, sort_keys=False, default_flow_style=False).rstrip())
    if plan.patches:
        print(f"horovod patches: {', '.join(plan.patches)}")
    print("why:")
    for note in plan.notes:
        print(f"  {note}")
    return EXIT_OK


def render(cluster: spec.ClusterSpec, output: Path, plan: compat.Plan) -> Path:
    try:
        return inventory.render(cluster, output, plan)
    except OSError as exc:
        raise HvdError(f"cannot write the inventory in {output / cluster.cluster}: {exc.strerror or exc}") from None


def cmd_inventory(args: argparse.Namespace) -> int:
    output = check_output(args.output)
    cluster, plan = load_and_resolve(args.hosts)
    with lock.hold(inventory_root(output, cluster), "inventory"):
        root = render(cluster, output, plan)
    print(f"wrote {root} ({len(cluster.hosts)} hosts)")
    return EXIT_OK


# up --verify: the post-flight's slow proofs even when nothing changed since they last passed.
FULL_VERIFY = {"hvd_verify_allreduce": "always", "hvd_horovod_gate_always": True}


def _tracked_run(root: Path, cluster: spec.ClusterSpec, console: Console, playbook: str, *,
                 limit: str | None = None, tags: str | None = None, check: bool = False, diff: bool = False,
                 extravars: dict | None = None, events: list[dict] | None = None) -> tuple[Tracker, Any]:
    """One playbook run with a live line per node; the tracker of what happened and ansible-runner's result
    (``events``, when given, receives every event: the nodes' read-back is among them)."""
    from .runner import run_playbook

    tracker = Tracker.for_hosts([h.name for h in cluster.hosts], pinned=inventory.pinned_hosts(cluster))
    console.update(tracker, set(tracker.hosts))
    first_use = inventory.first_use_hosts(cluster, root)  # nodes whose host key no pin and no earlier run vouches for

    def on_event(event: dict) -> None:
        if events is not None:
            events.append(event)
        console.update(tracker, tracker.handle(event))

    result = run_playbook(root, playbook, limit=limit, tags=tags, check=check, diff=diff, extravars=extravars,
                          on_event=on_event)
    trusted = inventory.trusted_on_first_use(cluster, root, first_use)  # said plainly behind a bastion
    if trusted:
        console.write(trusted)
    return tracker, result


def _close_loop(root: Path, cluster: spec.ClusterSpec, tracker: Tracker, events: list[dict],
                desired: dict[str, dict | None], *, converged: list[str], records_current: bool) -> list[str]:
    """The loop contract: every node the converge read back (site.yml's last play, the reader `check` uses) is held
    against what it must be (drift.confirm); a node that is records it as its desired state, a node that is not is
    marked not repaired. Returns one line per node and item that still differs."""
    from . import drift, nodestate

    found, _ = nodestate.collect(events)
    names = [h.name for h in cluster.hosts]
    scope = [n for n in names if n in found]
    report = drift.confirm({n: desired.get(n) for n in scope}, {n: found[n] for n in scope},
                           converged=converged, records_current=records_current, order=names)
    for node in scope:
        if node in report.drifted:
            tracker.hosts[node].unrepaired = True
        else:
            nodestate.record(root, node, found[node])
    return drift.unrepaired_lines(report)


def _finish(args: argparse.Namespace, console: Console, cluster: spec.ClusterSpec, root: Path, tracker: Tracker,
            result: Any, extra: dict | None = None, unrepaired: list[str] | None = None) -> int:
    console.summary(tracker, str(result.log))
    if unrepaired:
        console.write("Not repaired (read back after the converge with the reader `check` uses):")
        for line in unrepaired:
            console.write(f"  {line}")
    problem = _bastion_problem(cluster, root) if any(h.unreachable for h in tracker.hosts.values()) else ""
    if problem:
        console.write(f"nodes unreachable: {problem}")
    if args.json:
        dump_json(sys.stdout, {"cluster": cluster.cluster, "inventory": str(root), "rc": result.rc,
                               "log": str(result.log), **tracker.as_dict(), "not_repaired": list(unrepaired or []),
                               **(extra or {})})
    if tracker.ok and result.rc == 0 and not unrepaired:
        return EXIT_OK
    if not tracker.failures and not unrepaired:
        console.write(f"ansible-playbook ended with rc {result.rc} ({result.status}): see {result.log}")
    return EXIT_FAILED


def _bastion_problem(cluster: spec.ClusterSpec, root: Path) -> str:
    """With ssh.proxy_jump: why the bastion cannot be used ("" when it can, or without a bastion)."""
    jump = cluster.ssh.proxy_jump
    return inventory.bastion_problem(vars(jump), str(root / "ssh")) if jump is not None else ""


def _console(args: argparse.Namespace) -> Console:
    console = Console(sys.stderr if args.json else sys.stdout)
    if args.json:
        console.live = False
    return console


def _converge(args: argparse.Namespace, playbook: str, what: str, command: str) -> int:
    """Resolve, render the inventory, run one playbook with live progress, then the summary."""
    from . import nodestate
    from .runner import check_environment

    console = _console(args)
    check_environment()  # an ANSIBLE_* setting that turns host key checking off: exit 2, nothing written
    output = check_output(args.output)
    tags = getattr(args, "tags", None)
    check_tags(tags)
    console.step(1, 3, f"read {args.hosts} and resolve the stack")
    cluster, plan = load_and_resolve(args.hosts, getattr(args, "bundle", None))
    check_limit(args.limit, cluster)
    console.write(f"  cluster {cluster.cluster}: {len(cluster.hosts)} hosts")
    # One run at a time: the lock is taken before anything is written, so a second run changes nothing.
    with lock.hold(inventory_root(output, cluster), command):
        console.step(2, 3, "write inventory")
        root = render(cluster, output, plan)
        console.write(f"  {root}")
        check = getattr(args, "check", False)
        mode = " (check mode: nothing is changed)" if check else ""
        console.step(3, 3, f"{what} playbooks/{playbook}{mode}")
        extravars = FULL_VERIFY if getattr(args, "verify", False) else None
        converging = playbook == "site.yml" and not check
        names = [h.name for h in cluster.hosts]
        desired = nodestate.desired(root, names) if converging else {}
        inputs = nodestate.inputs_digest(root) if converging else ""
        # The records were made from these same inputs (`up --full` with nothing changed): hold the nodes to them.
        records_current = converging and nodestate.recorded_inputs(root) == inputs
        if converging:
            nodestate.forget_inputs(root)  # recorded again only when this run ends well: a run cut short never counts
        events: list[dict] = []
        tracker, result = _tracked_run(root, cluster, console, playbook, limit=args.limit, tags=tags, check=check,
                                       diff=getattr(args, "diff", False), extravars=extravars, events=events)
        unrepaired: list[str] = []
        if converging and not tags:
            converged = [h for h, s in tracker.hosts.items() if (s.ok or s.changed) and not s.unreachable]
            unrepaired = _close_loop(root, cluster, tracker, events, desired, converged=converged,
                                     records_current=records_current)
            if tracker.ok and result.rc == 0 and not args.limit and not unrepaired:
                # after the run: a first converge makes the cluster key, which is one of the inputs
                nodestate.record_inputs(root, nodestate.inputs_digest(root))  # the fast path's reference
    extra = {"converged": [h for h, s in tracker.hosts.items() if (s.ok or s.changed) and s.ended_well]
             } if playbook == "site.yml" else {}
    return _finish(args, console, cluster, root, tracker, result, extra, unrepaired)


def _fast_path(args: argparse.Namespace) -> int | None:
    """`up` on a cluster converged before from the same inputs: read every node (one module call each); nodes in
    sync are not converged again; a drifted node runs the roles that own its drifted items and those after them;
    then the post-flight proves the whole cluster again. None: converge fully instead (no record of some node,
    inputs changed since the last full converge, a node unreachable, or a drift no role repairs)."""
    from . import drift, nodestate
    from .runner import check_environment

    check_environment()
    output = check_output(args.output)
    cluster, plan = load_and_resolve(args.hosts, args.bundle)
    root = inventory_root(output, cluster)
    if not (root / "hosts.yml").is_file() or not nodestate.recorded_inputs(root):
        return None
    console = _console(args)
    names = [h.name for h in cluster.hosts]
    with lock.hold(root, "up"):
        render(cluster, output, plan)
        if nodestate.inputs_digest(root) != nodestate.recorded_inputs(root):
            console.write("inputs changed since the last full converge: converging every node")
            return None
        want = nodestate.desired(root, names)
        if any(state is None for state in want.values()):
            return None
        console.step(1, 2, f"read every node's state ({len(names)} nodes, read-only)")
        reading = nodestate.read(root, hosts=names)
        if reading.unreachable:
            return None
        report = drift.compare(want, reading.found, [])
        by_hand = {n: report.by_hand(n) for n in names if report.by_hand(n)}
        drifted = [n for n in names if n in report.drifted and report.repair_roles(n)]
        fast = {"in_sync": [n for n in names if n not in report.drifted],
                "repaired": {n: [d.item for d in report.drifted[n] if d.role] for n in drifted},
                "by_hand": {n: [d.item for d in diffs] for n, diffs in by_hand.items()},
                "read_seconds": round(reading.seconds, 2)}
        if not report.drifted:
            console.write(f"  {drift.render(report)}")
            console.write(f"every node is in its desired state (read in {reading.seconds:.1f} s): nothing to converge")
            if args.json:
                dump_json(sys.stdout, {"cluster": cluster.cluster, "inventory": str(root), "rc": 0, "log": reading.log,
                                       "ok": True, "hosts": {n: {"status": "up-to-date", "ok": 0, "changed": 0,
                                                                 "failed": 0, "unreachable": 0, "skipped": 0}
                                                             for n in names},
                                       "failures": [], "notices": {}, "preflight": {},
                                       "transfers": transfer_report([]), "fast_path": fast,
                                       "converged": [], "not_repaired": []})
            return EXIT_OK
        console.write(drift.render(report))
        for node in drifted:
            if any(d.item == drift.REINSTALLED for d in report.drifted[node]):
                console.write(f"  {node}: reinstalled since its last converge ({drift.REINSTALLED} changed): the "
                              "pre-flight and every role run on it, never a partial repair")
        if not drifted:  # only what no role repairs: nothing to converge, and not in sync either
            unrepairable = drift.unrepaired_lines(report)
            for line in unrepairable:
                console.write(f"not repaired: {line}")
            if args.json:
                dump_json(sys.stdout, {"cluster": cluster.cluster, "inventory": str(root), "rc": 1, "log": reading.log,
                                       "ok": False, "fast_path": fast, "converged": [], "not_repaired": unrepairable})
            return EXIT_FAILED
        order = drift.ROLES
        first = min(order.index(report.first_role(n)) for n in drifted)
        roles = order[first:]
        console.step(2, 2, f"repair {', '.join(drifted)} ({', '.join(r for r in roles if r != 'hvd_verify')}), "
                           "then prove the whole cluster (hvd_verify)")
        inputs = nodestate.recorded_inputs(root)
        nodestate.forget_inputs(root)  # recorded again only when the repair and the proof end well
        # One run: the roles' plays take only the drifted nodes (hvd_targets); the post-flight takes every node.
        events: list[dict] = []
        # A node whose env manifest is not the recorded one while its files agree with it (the manifest itself was
        # changed): hvd_pyenv installs its env again anyway.
        reinstall = [n for n in drifted if any(d.item == "env.manifest" for d in report.drifted[n])]
        extravars = {"hvd_targets": ",".join(drifted), **({"hvd_pyenv_reinstall": reinstall} if reinstall else {})}
        tracker, result = _tracked_run(root, cluster, console, "site.yml", tags=",".join([*roles, "hvd_state"]),
                                       extravars=extravars, events=events)
        # The loop contract: the repaired nodes (and the others) read back against their records.
        # What no role repairs is named there too ("no role repairs it").
        unrepaired = _close_loop(root, cluster, tracker, events, want, converged=drifted, records_current=True)
        if tracker.ok and result.rc == 0 and not unrepaired:
            nodestate.record_inputs(root, inputs)
    return _finish(args, console, cluster, root, tracker, result,
                   {"fast_path": fast, "converged": [n for n in drifted if tracker.hosts[n].ended_well]},
                   unrepaired)


def existing_inventory(args: argparse.Namespace, cluster: spec.ClusterSpec) -> Path:
    """The inventory `up` wrote for ``cluster`` (check and run work on it; they never rewrite it)."""
    root = Path(args.output) / cluster.cluster
    if not (root / "hosts.yml").is_file():
        raise HvdError(f"{root}: no inventory yet; run `hvdcluster up {args.hosts}` first")
    return root


def cmd_check(args: argparse.Namespace) -> int:
    """Compare every node with the desired state and with its peers; read-only (check mode, no sudo)."""
    from . import drift, nodestate
    from .runner import check_environment

    check_environment()
    cluster = spec.load(args.hosts)
    check_limit(args.limit, cluster)
    root = existing_inventory(args, cluster)
    names = [h.name for h in cluster.hosts]
    with lock.hold(root, "check"):
        reading = nodestate.read(root, args.limit, hosts=[] if args.limit else names, deep=args.deep)
    scope = [n for n in names if n in reading.found or n in reading.unreachable]
    report = drift.compare(nodestate.desired(root, scope), {n: reading.found.get(n) for n in scope},
                           list(reading.unreachable))
    bastion = _bastion_problem(cluster, root) if reading.unreachable else ""
    if args.json:
        doc = drift.to_json(report)
        doc.update({"cluster": cluster.cluster, "inventory": str(root), "log": reading.log,
                    "seconds": round(reading.seconds, 2), "why_unreachable": reading.unreachable})
        if bastion:
            doc["bastion"] = bastion
        dump_json(sys.stdout, doc)
    else:
        print(printable(drift.render(report)))  # node-supplied text: no control sequence reaches the terminal
        for node, why in reading.unreachable.items():
            print(printable(f"  {node}: {why}"))
        if bastion:
            print(f"  nodes unreachable: {bastion}")
        print(f"(read {len(reading.found)} of {len(scope)} nodes in {reading.seconds:.1f} s; log: {reading.log})")
    return drift.exit_code(report)


def cmd_up(args: argparse.Namespace) -> int:
    if not args.full and not (args.limit or args.tags or args.check or args.verify):
        fast = _fast_path(args)
        if fast is not None:
            return fast
    return _converge(args, "site.yml", "converge", "up")


def cmd_bundle(args: argparse.Namespace) -> int:
    """Gather an offline bundle on a connected node (converged first), or re-check one (``--verify``)."""
    from . import bundle
    from .runner import check_environment

    if args.verify:
        problems = bundle.verify(args.verify)
        manifest = bundle.load(args.verify)
        count = len(manifest["entries"])
        if args.json:
            dump_json(sys.stdout, {"dir": args.verify, "files": count, "ok": not problems, "problems": problems,
                                   "manifest_sha256": manifest["sha256"]})
        else:
            for line in problems:
                print(line)
            print(f"{args.verify}: {count} files checked by sha256: "
                  + (f"{len(problems)} problems" if problems else "every file is the one the manifest names"))
            print(f"  manifest sha256 {manifest['sha256']} (the one `hvdcluster bundle` printed, if it is that bundle)")
        return EXIT_FAILED if problems else EXIT_OK
    if not args.hosts or not args.out:
        raise HvdError("bundle: name the cluster's hosts.yaml and the bundle folder: hvdcluster bundle hosts.yaml -o DIR")
    check_environment()
    output = check_output(args.inventories)
    dest = Path(args.out).expanduser().resolve()
    earlier = bundle.earlier_listing(dest)  # what a re-run may remove; a folder that is no bundle is refused
    if args.sign and not (os.path.isfile(args.sign) and os.access(args.sign, os.R_OK)):
        raise HvdError(f"--sign: {args.sign}: not a readable file; name an OpenSSH private key (ssh-keygen -Y sign)")
    if spec.load(args.hosts).network.bundle:
        raise HvdError(f"{args.hosts}: network.bundle is set: a bundle is gathered on a connected node "
                       "(use a hosts.yaml without it)")
    cluster, plan = load_and_resolve(args.hosts)
    names = [h.name for h in cluster.hosts]
    node = args.node or names[0]
    if node not in names:
        raise HvdError(f"--node: unknown host {node!r} (hosts of {cluster.path}: {', '.join(names)})")
    dest.mkdir(parents=True, exist_ok=True)
    (dest / bundle.MARKER).touch()  # a run cut short before its manifest may run again into this folder
    console = _console(args)
    have = bundle.held(dest)
    extra = bundle.wheelhouse_entries(cluster.network.wheelhouse, dest) + bundle.openmpi_entries(plan.stack, dest)
    with lock.hold(inventory_root(output, cluster), "bundle"):
        root = render(cluster, output, plan)
        console.step(1, 3, f"converge {node}: the node OS's own apt and pip resolve the bundle there")
        tracker, result = _tracked_run(root, cluster, console, "site.yml", limit=node)
        if not (tracker.ok and result.rc == 0):
            return _finish(args, console, cluster, root, tracker, result)
        console.step(2, 3, f"gather on {node} what {dest} lacks ({len(have)} files held)")
        tracker, result = _tracked_run(root, cluster, console, "bundle.yml", limit=node, extravars={
            "hvd_bundle_dest": str(dest), "hvd_bundle_have": have,
            "hvd_bundle_skip_sha256": sorted({e["sha256"] for e in extra if e["path"].startswith("wheelhouse/")})})
        if not (tracker.ok and result.rc == 0):
            return _finish(args, console, cluster, root, tracker, result)
    console.step(3, 3, f"write {dest / 'manifest.yaml'}")
    collected = tracker.stats.get("hvd_bundle") or {}
    fetched = bundle.unpack_incoming(dest)
    keys = collected.get("keys") or {}
    extra += bundle.cache_entries(keys, paths.controller_cache(), dest)
    if keys.get("env"):
        extra += bundle.conda_entries(paths.controller_cache() / "envs" / f"env-{keys['env']}.tar.zst",
                                      cluster.network.conda_channel, dest)
    summary = {**bundle.finish(dest, collected, extra, node, earlier), "fetched": fetched, "resolver": node}
    if args.sign:
        summary["signature"] = str(bundle.sign(dest, args.sign))
    if args.json:
        dump_json(sys.stdout, summary)
        return EXIT_OK
    mib = 1024 * 1024
    folders = ", ".join(f"{k} {v / mib:.1f} MiB" for k, v in sorted(summary["by_folder"].items()))
    console.write(f"bundle {dest}: {summary['files']} files, {summary['bytes'] / mib:.1f} MiB ({folders}); "
                  f"{len(fetched)} fetched from {node} this run, {len(summary['removed'])} no longer needed removed")
    if summary["unavailable"]:
        console.write(f"  not in {node}'s apt sources (installed some other way, not carried): "
                      f"{', '.join(summary['unavailable'])}")
    console.write(f"  manifest sha256 {summary['manifest_sha256']}: pin it as network.bundle_sha256 in the hosts.yaml "
                  "that uses this bundle" + (f"; signed: {summary['signature']}" if args.sign else ""))
    console.write(f"  check it anywhere: hvdcluster bundle --verify {dest}")
    console.write(f"  use it: hvdcluster up hosts.yaml --bundle {dest}   (or network.bundle in hosts.yaml)")
    return EXIT_OK


def cmd_preflight(args: argparse.Namespace) -> int:
    return _converge(args, "preflight.yml", "check every node, read-only:", "preflight")


def _launch_gate(args: argparse.Namespace, cluster: spec.ClusterSpec, root: Path) -> int | None:
    """Refuse a launch across nodes that differ in what every rank must share (the env, the Horovod build, MPI,
    NCCL) or that cannot be read: exit 1 naming the odd node and item. None: launch."""
    from . import drift, nodestate

    with lock.hold(root, "run"):
        reading = nodestate.read(root, hosts=[h.name for h in cluster.hosts])
    problems = [f"{node}: {why}" for node, why in reading.unreachable.items()] + drift.gate(reading.found)
    if not problems:
        return None
    print("hvdcluster: not launching: the nodes differ in what every rank must share "
          "(run `hvdcluster check` for the whole report, `hvdcluster up` to repair, or --no-gate to launch anyway):",
          file=sys.stderr)
    for line in problems:
        print(f"  {line}", file=sys.stderr)
    return EXIT_FAILED


def _run_hosts(args: argparse.Namespace) -> None:
    """``run``'s hosts.yaml: HOSTS like every other command; the old ``--hosts FILE`` still works, with one
    deprecation line on stderr; both at once exit 2; neither is ./hosts.yaml."""
    if args.hosts is not None and args.hosts_flag is not None:
        raise HvdError(f"run: give hosts.yaml once, as HOSTS: got {args.hosts} and --hosts {args.hosts_flag}")
    if args.hosts_flag is not None:
        print(f"hvdcluster run: --hosts is deprecated; write: hvdcluster run {shlex.quote(args.hosts_flag)} ...",
              file=sys.stderr)
        args.hosts = args.hosts_flag
    elif args.hosts is None:
        args.hosts = "hosts.yaml"


def cmd_run(args: argparse.Namespace) -> int:
    """Validate everything first (no node is contacted for that), then look up what only a node knows."""
    from . import launch

    _run_hosts(args)
    if args.np is not None and args.np < 1:
        raise HvdError(f"run: -np must be at least 1 (got {args.np})")
    command = args.job
    cluster = spec.load(args.hosts)
    root = existing_inventory(args, cluster)
    inv = inventory.read(root)
    nic = args.network_interface or launch.recorded_interface(inv)
    open_slots = launch.open_slots(inv)
    plan = launch.build(inv, command, np=args.np, controller=args.controller, network_interface=nic,
                        gpus=None if open_slots else {})
    if args.print:
        if nic is None:
            print(f"hvdcluster: the fabric interface is read from {next(iter(inv.hosts))} when the job starts "
                  "(pass --network-interface to name it)", file=sys.stderr)
        if open_slots:
            print(f"hvdcluster: slots of {', '.join(open_slots)} are one per GPU found, read from the nodes when the "
                  "job starts (shown as 1; write `slots:` in hosts.yaml to fix them)", file=sys.stderr)
        print(shlex.join(plan.argv()))
        return EXIT_OK
    # The look-ups on the nodes, once everything else is known to be right.
    if not args.no_gate:
        refused = _launch_gate(args, cluster, root)
        if refused is not None:
            return refused
    gpus = launch.gpu_counts(inv, open_slots) if open_slots else {}
    if nic is None:
        nic = launch.fabric_interface(inv, next(iter(inv.hosts)))
    plan = launch.build(inv, command, np=args.np, controller=args.controller, network_interface=nic, gpus=gpus)
    return subprocess.run(plan.argv()).returncode


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
    p.add_argument("--bundle", metavar="DIR",
                   help="install from this offline bundle only (hvdcluster bundle): apt from its local repository, "
                   "pip with --no-index; like network.bundle in hosts.yaml")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("bundle", help="gather every file an offline converge needs (run where there is network)",
                       description="Converges one connected node of the node OS (--node, default the first host), "
                       "lets its own apt and pip resolve every package the stack needs, and fetches what the bundle "
                       "folder lacks; writes DIR/manifest.yaml (every file, its sha256, size and why). Re-runnable: "
                       "only what changed is fetched. --verify DIR re-checks every file by its sha256.")
    p.add_argument("hosts", nargs="?", help="the hosts.yaml of a connected cluster of the node OS")
    p.add_argument("-o", "--out", help="the bundle folder (created; re-used by a later run)")
    p.add_argument("--node", help="the host of hosts.yaml to resolve on (default: the first)")
    p.add_argument("--inventories", default="inventories",
                   help="folder that holds the inventory folder <cluster>/ (default: ./inventories)")
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

    p = sub.add_parser("preflight", help="run the read-only pre-flight checks on every node and report",
                       description="Probes every node and reports each finding (host, check, found, expected, "
                       "fix); changes nothing. Exit code 1 when a check failed.")
    read_only(p)
    p.set_defaults(func=cmd_preflight)

    p = sub.add_parser("run", help="launch a Horovod job with horovodrun on the first node",
                       usage="hvdcluster run [HOSTS] [-o OUTPUT] [--gloo | --mpi] [-np NP] [--network-interface IF] "
                       "[--print] [--no-gate] -- CMD...",
                       description="Builds the horovodrun command line from the inventory (hosts and slots, the "
                       "env's interpreter, the fabric interface) and runs it on the first node over SSH. The job's "
                       "command and its arguments come after --.")
    p.add_argument("hosts", nargs="?", metavar="HOSTS", help="the cluster's hosts.yaml (default: ./hosts.yaml)")
    p.add_argument("--hosts", dest="hosts_flag", metavar="FILE",
                   help="deprecated spelling of HOSTS (prints a deprecation line; not together with HOSTS)")
    p.add_argument("-o", "--output", default="inventories", help="folder that holds the inventory folder <cluster>/")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--gloo", dest="controller", action="store_const", const="gloo", help="use Gloo")
    mode.add_argument("--mpi", dest="controller", action="store_const", const="mpi", help="use MPI (mpirun)")
    p.add_argument("-np", "--np", type=int, help="number of processes (default: every slot)")
    p.add_argument("--network-interface", help="fabric interface (default: hvd_fabric_interface from the inventory, "
                   "else the one hvd_base recorded on the first node)")
    p.add_argument("--print", action="store_true", help="only print the command")
    p.add_argument("--no-gate", action="store_true",
                   help="launch even when the nodes' env, Horovod build, MPI or NCCL differ (the gate reads every node "
                   "first and refuses such a launch)")
    p.set_defaults(func=cmd_run, job=[])  # the words after `--` (main cuts them off before parsing)
    return parser


def _cut_job(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """``run``'s job: every word after its first ``--``, kept out of argparse, which would read HOSTS from it."""
    if argv[:1] == ["run"] and "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1:]
    return argv, None


def main(argv: list[str] | None = None) -> int:
    argv, job = _cut_job(list(sys.argv[1:] if argv is None else argv))
    args = build_parser().parse_args(argv)
    if job is not None:
        args.job = job
    try:
        return args.func(args)
    except HvdError as err:
        print(f"hvdcluster: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("hvdcluster: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
