"""How a node resolves a cluster member's name, our own /etc/hosts block outranked by every other source: the admin's
own lines, DNS, the search domains; the block is kept only where nothing else knows the name (a node that is down has
left DNS). One reader for hvd_resolve (the addresses hvd_base writes) and the pre-flight's look at the peers
(hvd_host.route_to): a drifted block must not decide where the pre-flight looks for a peer, before hvd_base repairs it.
Standard library only (it runs on the nodes)."""

from __future__ import annotations

import ipaddress
import socket

OURS = "hvdcluster "  # the blocks hvdcluster writes: '# BEGIN hvdcluster <cluster> ...' / '# END hvdcluster ...'


def read_lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().splitlines()
    except OSError:
        return []


def hosts_entries(path: str, ours: bool = False) -> dict[str, list[str]]:
    """Name (lower case) -> its addresses in the hosts file, in file order: hvdcluster's blocks left out (``ours``:
    only those)."""
    found: dict[str, list[str]] = {}
    inside = False
    for line in read_lines(path):
        mark = line.strip()
        if mark.startswith("# BEGIN " + OURS):
            inside = True
            continue
        if mark.startswith("# END " + OURS):
            inside = False
            continue
        fields = line.split("#", 1)[0].split()
        if inside != ours or len(fields) < 2:
            continue
        try:
            address = str(ipaddress.ip_address(fields[0]))
        except ValueError:
            continue
        for name in fields[1:]:
            found.setdefault(name.lower(), []).append(address)
    return found


def search_domains(path: str) -> list[str]:
    domains: list[str] = []
    for line in read_lines(path):
        fields = line.split()
        if fields and fields[0] in ("search", "domain"):
            domains = [d.strip(".") for d in fields[1:] if d.strip(".")]
    return domains


def ask(name: str) -> str | None:
    for family in (socket.AF_INET, socket.AF_UNSPEC):
        try:
            infos = socket.getaddrinfo(name, None, family, socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError):
            continue
        if infos:
            return infos[0][4][0]
    return None


def prefer_v4(addresses: list[str]) -> str:
    return next((a for a in addresses if ipaddress.ip_address(a).version == 4), addresses[0])


def resolve(name: str, hosts_file: str = "/etc/hosts", resolv_conf: str = "/etc/resolv.conf") -> tuple[str | None, str]:
    """(address, source) of ``name``; (None, "") when nothing answers."""
    try:
        return str(ipaddress.ip_address(name)), "address"
    except ValueError:
        pass
    listed = hosts_entries(hosts_file).get(name.lower().rstrip("."))
    if listed:
        return prefer_v4(listed), "hosts"
    absolute = name.rstrip(".") + "."
    found = ask(absolute)
    if found:
        return found, "dns"
    if "." not in name.rstrip("."):
        for domain in search_domains(resolv_conf):
            found = ask(f"{name}.{domain}.")
            if found:
                return found, "search"
    ours = hosts_entries(hosts_file, ours=True).get(name.lower().rstrip("."))
    if ours:
        # Nothing but our own block knows the name now (a node that is down has left its DNS): keep what we wrote
        # rather than fail the healthy nodes; the full resolver is not asked, it would answer from that block too.
        return prefer_v4(ours), "kept"
    found = ask(name)
    return (found, "resolver") if found else (None, "")
