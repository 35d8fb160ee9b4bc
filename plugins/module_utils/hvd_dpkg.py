"""dpkg's view of a node's packages, read from its status file: one reader for ``check`` (hvd_state_stack's
``packages.*`` items, hvd_fabric's pieces) and for M(hvd.cluster.hvd_packages), which installs and holds only what
that reader finds missing and reads the result back with it. Standard library only (it runs on the nodes).
"""

from __future__ import annotations

import re

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import read_text, under

STATUS = "/var/lib/dpkg/status"

# A package name as hvdcluster's package lists take it: Debian's name rule, with an optional ":arch" and an optional
# "=version" (an exact version, as apt-get takes it).
WANTED = re.compile(r"(?P<name>[a-z0-9][a-z0-9+.-]+)(?::(?P<arch>[a-z0-9-]+))?(?:=(?P<version>[A-Za-z0-9.+~:-]+))?")


def stanzas(root: str) -> list[dict]:
    """Every entry of dpkg's status file: package, arch, version, installed, held and provides (the names an
    installed package provides, versions dropped)."""
    entries = []
    text = read_text(under(root, STATUS)) or ""
    for stanza in text.split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t", ""):
                continue
            key, dummy, value = line.partition(":")
            if key in ("Package", "Status", "Version", "Architecture", "Provides"):
                fields[key] = value.strip()
        if "Package" not in fields:
            continue
        status = fields.get("Status", "").split()
        provides = [item.split("(")[0].strip() for item in fields.get("Provides", "").split(",")]
        entries.append({
            "package": fields["Package"],
            "arch": fields.get("Architecture", ""),
            "version": fields.get("Version", ""),
            "installed": len(status) == 3 and status[2] == "installed",
            "held": bool(status) and status[0] == "hold",
            "provides": [name for name in provides if name],
        })
    return entries


def dpkg_status(root: str) -> list[tuple[str, str, str, bool, bool]]:
    """Every entry of dpkg's status file as (package, architecture, version, installed, held)."""
    return [(e["package"], e["arch"], e["version"], e["installed"], e["held"]) for e in stanzas(root)]


def parse_wanted(item: str) -> dict:
    """``name[:arch][=version]`` as a dict (arch and version None when not given); ValueError when it is not one."""
    match = WANTED.fullmatch(item)
    if not match:
        raise ValueError(f"{item!r} is not a package name (name, name:arch or name=version)")
    return match.groupdict()


def parse_name(item: str) -> str:
    """The package name of an item (its arch and version dropped)."""
    return parse_wanted(item)["name"]


def plan(entries: list[dict], wanted: list[str], hold: bool) -> dict:
    """What is to be done for ``wanted`` on a node whose dpkg status is ``entries``: ``install`` (the items not
    installed: a version given must be the installed one; a name without one is also met by an installed package
    that provides it), ``hold`` (installed items not held, when ``hold``) and ``versions`` (item -> the installed
    version, "" when none)."""
    out = {"install": [], "hold": [], "versions": {}}
    for item in wanted:
        want = parse_wanted(item)
        name, arch, version = want["name"], want["arch"], want["version"]
        found = [e for e in entries if e["installed"] and e["package"] == name and arch in (None, e["arch"])]
        if version is not None:
            found = [e for e in found if e["version"] == version]
        provided = version is None and arch is None and any(e["installed"] and name in e["provides"] for e in entries)
        out["versions"][item] = ",".join(sorted({e["version"] for e in found}))
        if not found and not provided:
            out["install"].append(item)
        elif hold and found and not all(e["held"] for e in found):
            out["hold"].append(name if arch is None else f"{name}:{arch}")
    return out
