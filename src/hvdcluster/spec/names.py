"""Host names and addresses: RFC 1123 names, IP addresses (IPv6 zone ids too), the inventory name of a host given
only by its address, and the canonical form addresses are compared in."""

from __future__ import annotations

import ipaddress
import re

from yaml.nodes import Node

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_names import hostname_problem

from .loader import _Context
from .schema import _string


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _name_for_address(address: str) -> str:
    """The inventory name of a host given only by its address."""
    ip = _ip(address)
    if ip is None:
        return address.lower()
    if ip.version == 4:
        return "ip-" + str(ip).replace(".", "-")
    return "ip6-" + "-".join(ip.packed[i : i + 2].hex() for i in range(0, 16, 2))


def _address_key(address: str) -> str:
    """A canonical form for comparing addresses: IPs compressed (``0:0::1`` is ``::1``), DNS names lower-cased."""
    ip = _ip(address)
    return str(ip) if ip is not None else address.lower()


_ZONE_ID = re.compile(r"[A-Za-z0-9_.-]{1,15}")  # an interface name, as Linux allows it (IFNAMSIZ - 1)


def _address(ctx: _Context, node: Node, field: str) -> str:
    value = _string(ctx, node, field)
    address, percent, zone = value.partition("%")
    if percent and isinstance(_ip(address), ipaddress.IPv6Address) and not _ZONE_ID.fullmatch(zone):
        raise ctx.error(
            node,
            field,
            f"{value!r}: the zone id after '%' must be an interface name (letters, digits, '_', '.', '-'; at most 15),"
            " e.g. fe80::1%eth0",
        )
    if _ip(value) is not None:
        return value
    if "@" in value:
        raise ctx.error(node, field, f"{value!r} is not an address (set the login user with ssh.user)")
    if ":" in value:
        raise ctx.error(node, field, f"{value!r} is not an address (set the SSH port with 'port:')")
    problem = hostname_problem(value.lower())
    if problem:
        raise ctx.error(node, field, f"{value!r} is not an IP address or a valid hostname: {problem}")
    return value


def _host_name(ctx: _Context, node: Node, field: str) -> str:
    value = _string(ctx, node, field)
    if _ip(value) is not None:
        raise ctx.error(
            node, field, f"{value!r} is an IP address; a host name is needed (e.g. '{_name_for_address(value)}')"
        )
    name = value.lower()
    problem = hostname_problem(name)
    if problem:
        raise ctx.error(node, field, f"invalid hostname {value!r}: {problem}")
    return name
