"""Create a conda environment with rattler: solve, lock, install. Run by hvd_pyenv on the builder node with the private
tools venv's interpreter (py-rattler), as root, in the role's private work folder.

Usage: python -I conda_env.py SPEC.json

SPEC.json: {"prefix": ..., "channels": [name or URL, ...], "specs": [match spec, ...], "python": "3.11" or "",
"cache": package cache folder, "lock": where the lock goes, "report": where the result goes}.

The solve is locked: every package's URL and sha256 is written to ``lock`` in conda's explicit format
(``@EXPLICIT``, one ``URL#sha256`` per line, sorted), which ``conda create --file`` also reads, and the env is
installed from exactly those records. ``report`` gets {"specs", "channels", "packages": [{name, version, build, url,
sha256, subdir, file_name, channel}]}.

py-rattler can crash at interpreter exit after its work is done, so this process ends with os._exit: its caller
judges success by the report and the env's conda-meta records, not by the exit status alone.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import traceback


def _name(spec: str) -> str:
    import re  # noqa: PLC0415

    return re.split(r"[\s=<>!~\[]", spec.strip(), maxsplit=1)[0].lower()


def main(path: str) -> None:
    import rattler  # noqa: PLC0415

    with open(path, encoding="utf-8") as handle:
        spec = json.load(handle)
    specs = list(spec["specs"])
    named = {_name(s) for s in specs}
    if "python" not in named:
        specs.append(f"python {spec['python']}.*" if spec.get("python") else "python")
    if "pip" not in named:
        specs.append("pip")
    channels = [rattler.Channel(c) for c in spec["channels"]]
    platform = rattler.Platform.current()
    records = asyncio.run(rattler.solve(
        sources=channels,
        specs=specs,
        platforms=[platform, rattler.Platform("noarch")],
        virtual_packages=rattler.VirtualPackage.detect(),
    ))
    records = sorted(records, key=lambda r: r.name.normalized)
    lines = ["# hvdcluster: the environment's conda packages, locked (conda's explicit format)", "@EXPLICIT"]
    packages = []
    for record in records:
        sha = record.sha256.hex() if isinstance(record.sha256, bytes) else str(record.sha256 or "")
        if len(sha) != 64:
            raise SystemExit(f"conda: no sha256 for {record.name.normalized} ({record.url}): cannot lock it")
        lines.append(f"{record.url}#{sha}")
        packages.append({"name": record.name.normalized, "version": str(record.version), "build": str(record.build),
                         "url": str(record.url), "sha256": sha, "subdir": str(record.subdir),
                         "file_name": str(record.file_name), "channel": str(record.channel or "")})
    asyncio.run(rattler.install(records, target_prefix=spec["prefix"], cache_dir=spec["cache"],
                                show_progress=False))
    with open(spec["lock"], "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    with open(spec["report"], "w", encoding="utf-8") as handle:
        json.dump({"specs": specs, "channels": spec["channels"], "packages": packages}, handle, indent=1,
                  sort_keys=True)


if __name__ == "__main__":
    try:
        main(sys.argv[1])
    except SystemExit as stop:
        print(stop, file=sys.stderr, flush=True)
        os._exit(1)
    except BaseException:  # noqa: BLE001 - reported, then the process ends without interpreter teardown
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    os._exit(0)
