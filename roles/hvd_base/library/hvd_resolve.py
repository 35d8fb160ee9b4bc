#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Resolve names to addresses the way this node sees them (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: hvd_resolve
short_description: Resolve host names to IP addresses on the managed node
description:
  - Looks each name up with the node's own resolver (/etc/hosts, DNS), preferring IPv4.
  - An IP address resolves to itself. Changes nothing; supports check mode.
options:
  names:
    description: Names or addresses to resolve.
    type: list
    elements: str
    required: true
author: hvdcluster
"""

RETURN = r"""
addresses:
  description: Name -> IP address.
  type: dict
  returned: success
"""

import ipaddress
import socket

from ansible.module_utils.basic import AnsibleModule


def resolve(name: str) -> str | None:
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        pass
    for family in (socket.AF_INET, socket.AF_UNSPEC):
        try:
            infos = socket.getaddrinfo(name, None, family, socket.SOCK_STREAM)
        except socket.gaierror:
            continue
        if infos:
            return infos[0][4][0]
    return None


def main() -> None:
    module = AnsibleModule(
        argument_spec={"names": {"type": "list", "elements": "str", "required": True}},
        supports_check_mode=True,
    )
    addresses = {name: resolve(name) for name in module.params["names"]}
    missing = sorted(name for name, ip in addresses.items() if ip is None)
    if missing:
        module.fail_json(
            msg="cannot resolve %s on this node: give an IP address as fabric_address "
            "or make the name resolvable (DNS or /etc/hosts)" % ", ".join(missing),
            addresses=addresses,
        )
    module.exit_json(changed=False, addresses=addresses)


if __name__ == "__main__":
    main()
