#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Resolve names to addresses the way this node sees them (read-only), never through hvdcluster's own lines."""

from __future__ import annotations

DOCUMENTATION = r"""
module: hvd_resolve
short_description: Resolve host names to IP addresses on the managed node, not through hvdcluster's /etc/hosts block
description:
  - An IP address resolves to itself.
  - A name is looked up in the node's /etc/hosts outside every block hvdcluster manages (its own lines there are
    what it wrote, not the truth), then in DNS as an absolute name (a trailing dot - the files source of the name
    service never matches it, so the block is bypassed), then with each search domain of /etc/resolv.conf.
    Where none of those answers, the address hvdcluster's block already gives is kept (a node that is down has left
    DNS; its peers must not fail for it), else the node's full resolver is asked (other name services).
  - Prefers IPv4. Changes nothing; supports check mode.
options:
  names:
    description: Names or addresses to resolve.
    type: list
    elements: str
    required: true
  hosts_file:
    description: The hosts file to read (tests only).
    type: path
    default: /etc/hosts
  resolv_conf:
    description: The resolver's configuration, for its search domains (tests only).
    type: path
    default: /etc/resolv.conf
  interface_of:
    description:
      - One of I(names) (this node's own fabric address). Also name the interface that carries the address it
        resolved to, as the kernel lists its addresses (secondary ones too, as C(ip addr show to ADDRESS) finds them),
        without iproute2.
    type: str
author: hvdcluster developers (@hvdcluster)
"""

EXAMPLES = r"""
- name: Resolve every node's fabric address as this node sees it
  hvd.cluster.hvd_resolve:
    names: "{{ nodes | map(attribute='fabric') | unique | list }}"
  register: resolved

- name: Resolve every node's fabric address, and name the interface that carries this node's own
  hvd.cluster.hvd_resolve:
    names: [gpu01, gpu02]
    interface_of: gpu01
  register: resolved  # resolved.interface: eth0, or "" where no interface carries gpu01's address

- name: Resolve two names and an address (an address resolves to itself)
  hvd.cluster.hvd_resolve:
    names: [gpu01, gpu02.cluster.example, 10.0.0.3]
  register: resolved
"""

RETURN = r"""
addresses:
  description: Name -> IP address.
  type: dict
  returned: success
sources:
  description: Name -> where its address came from (address, hosts, dns, search, kept, resolver).
  type: dict
  returned: success
interface:
  description: The interface that carries I(interface_of)'s address; "" where none does.
  type: str
  returned: with interface_of
"""

import ipaddress

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_netlink import kernel_addresses
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_module import AnsibleModule
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_resolver import resolve


def interface_of(address: str) -> str:
    """The interface that carries ``address`` ("" where none does)."""
    wanted = ipaddress.ip_address(address)
    return next((name for name, held in kernel_addresses() if ipaddress.ip_address(held) == wanted), "")


ARGUMENT_SPEC = {
    "names": {"type": "list", "elements": "str", "required": True},
    "hosts_file": {"type": "path", "default": "/etc/hosts"},
    "resolv_conf": {"type": "path", "default": "/etc/resolv.conf"},
    "interface_of": {"type": "str"},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    answers = {name: resolve(name, p["hosts_file"], p["resolv_conf"]) for name in p["names"]}
    addresses = {name: answer[0] for name, answer in answers.items()}
    sources = {name: answer[1] for name, answer in answers.items()}
    missing = sorted(name for name, ip in addresses.items() if ip is None)
    if missing:
        module.fail_json(
            msg="cannot resolve %s on this node: give an IP address as fabric_address "
            "or make the name resolvable (DNS or /etc/hosts)" % ", ".join(missing),
            addresses=addresses,
        )
    extra = {}
    if p["interface_of"] is not None:
        if p["interface_of"] not in addresses:
            module.fail_json(msg=f"interface_of: {p['interface_of']} is not one of names")
        try:
            extra["interface"] = interface_of(addresses[p["interface_of"]])
        except OSError as exc:
            module.fail_json(msg=f"cannot list this node's interface addresses: {exc}")
    module.exit_json(changed=False, addresses=addresses, sources=sources, **extra)


if __name__ == "__main__":
    main()
