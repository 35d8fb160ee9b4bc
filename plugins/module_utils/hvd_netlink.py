"""The kernel's own list of a node's interface addresses, read over netlink (rtnetlink(7)) as iproute2 reads it: every
address, IPv4 and IPv6, secondary ones too, with no iproute2 on the node. One reader for hvd_resolve (which interface
carries the fabric address) and the pre-flight's look (hvd_host.interfaces). Standard library only (it runs on the
nodes).
"""

from __future__ import annotations

import socket
import struct

RTM_NEWADDR = 20
RTM_GETADDR = 22
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 0x1
NLM_F_DUMP = 0x300
IFA_ADDRESS = 1
IFA_LOCAL = 2
HEADER = struct.Struct("=LHHLL")  # nlmsghdr: length, type, flags, sequence, port
IFADDR = struct.Struct("=BBBBI")  # ifaddrmsg: family, prefix length, flags, scope, interface index
ATTR = struct.Struct("=HH")  # rtattr: length, type


def kernel_addresses() -> list[tuple[str, str]]:
    """(interface, address) for every address the kernel holds, IPv4 and IPv6, secondary ones too."""
    found: list[tuple[str, str]] = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0) as sock:  # NETLINK_ROUTE
        sock.bind((0, 0))
        sock.send(HEADER.pack(HEADER.size + IFADDR.size, RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP, 1, 0)
                  + IFADDR.pack(socket.AF_UNSPEC, 0, 0, 0, 0))
        while True:
            data = sock.recv(1 << 16)
            offset = 0
            while offset + HEADER.size <= len(data):
                length, kind = HEADER.unpack_from(data, offset)[:2]
                if kind == NLMSG_DONE or length < HEADER.size:
                    return found
                if kind == NLMSG_ERROR:
                    raise OSError("the kernel refused to list its addresses (netlink)")
                if kind == RTM_NEWADDR:
                    found.extend(_address(data[offset + HEADER.size:offset + length]))
                offset += (length + 3) & ~3
            if not data:
                return found


def _address(message: bytes) -> list[tuple[str, str]]:
    """The (interface, address) of one RTM_NEWADDR message: the local address (IFA_LOCAL), else IFA_ADDRESS."""
    family, _prefix, _flags, _scope, index = IFADDR.unpack_from(message)
    values: dict[int, bytes] = {}
    offset = IFADDR.size
    while offset + ATTR.size <= len(message):
        length, kind = ATTR.unpack_from(message, offset)
        if length < ATTR.size:
            break
        values[kind] = message[offset + ATTR.size:offset + length]
        offset += (length + 3) & ~3
    raw = values.get(IFA_LOCAL) or values.get(IFA_ADDRESS)
    if raw is None or family not in (socket.AF_INET, socket.AF_INET6):
        return []
    try:
        name = socket.if_indextoname(index)
    except OSError:  # the interface went away meanwhile
        return []
    return [(name, socket.inet_ntop(family, raw))]
