"""``hvdcluster bundle``: gather an offline bundle on one connected node, or re-check one (``--verify``)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .. import lock, paths, spec
from ..errors import HvdError
from ..output import dump_json
from . import stages
from .common import EXIT_FAILED, EXIT_OK, check_output, console_for, inventory_root, load_and_resolve, render


def _bundle_folders(args: argparse.Namespace) -> None:
    """``bundle HOSTS DIR [-o OUTPUT]``: DIR is the bundle folder and ``-o`` the inventories folder, as in every other
    command."""
    args.output = args.output or "inventories"
    if not args.hosts or not args.dir:
        raise HvdError("bundle: name the cluster's hosts.yaml and the bundle folder: hvdcluster bundle hosts.yaml DIR "
                       "(-o names the inventories folder, as in every command)")


def cmd_bundle(args: argparse.Namespace) -> int:
    """Gather an offline bundle on a connected node (converged first), or re-check one (``--verify``)."""
    from .. import bundle
    from ..runner import check_environment

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
    _bundle_folders(args)
    check_environment()
    output = check_output(args.output)
    dest = Path(os.path.abspath(Path(args.dir).expanduser()))  # DIR itself not resolved: a symlink is refused
    earlier = bundle.earlier_listing(dest)  # what a re-run may remove; a folder that is no bundle is refused
    dest = dest.resolve()
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
    bundle.mark(dest)  # a run cut short before its manifest may run again into this folder
    console = console_for(args)
    have = bundle.held(dest)
    extra = bundle.wheelhouse_entries(cluster.network.wheelhouse, dest) + bundle.openmpi_entries(plan.stack, dest)
    session = stages.Session(args, console, cluster, plan, inventory_root(output, cluster))
    with lock.hold(session.root, "bundle"):
        render(cluster, output, plan)
        console.step(1, 3, f"converge {node}: the node OS's own apt and pip resolve the bundle there")
        outcome = stages.run_pass(session, stages.Pass(limit=node))
        if not outcome.ended_well:
            return stages.finish(session, outcome)
        console.step(2, 3, f"gather on {node} what {dest} lacks ({len(have)} files held)")
        outcome = stages.run_pass(session, stages.Pass("bundle.yml", limit=node, extravars={
            "hvd_bundle_dest": str(dest), "hvd_bundle_have": have,
            "hvd_bundle_skip_sha256": sorted({e["sha256"] for e in extra if e["path"].startswith("wheelhouse/")})}))
        if not outcome.ended_well:
            return stages.finish(session, outcome)
        tracker = outcome.tracker
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
