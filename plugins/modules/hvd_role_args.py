#!/usr/bin/python
"""Ansible module: check roles' variables against their argument specs, for every host of the play at once.

The work is its action plugin's (plugins/action/hvd_role_args.py), on the controller; this file is its documentation
and argument spec. Ansible checks a role's argument spec in a task it prepends to the role, for each host: 7 tasks a
node in a converge, each costing the controller about as much as any other task (a host's variables, a queued
worker, a callback event). Our playbooks turn that check off (``rolespec_validate: false``) and run this one task
with ``run_once`` instead: the same specs, the same validator, each host's own variables, one task.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: hvd_role_args
short_description: Check roles' variables against their argument specs on every host of the play, in one task
description:
  - For each host of the play's current batch (or I(hosts)) and each role of I(roles), reads the role's
    C(meta/argument_specs.yml) (entry point C(main)), takes the host's variables as a task of this play sees them
    (inventory, facts, the play's variables and the imported roles' defaults), templates those the spec names and
    checks them with Ansible's own validator, as the role's prepended check would.
  - Fails, naming each host, role and message, where any host's variables do not fit; with C(run_once) the whole play
    stops before any role's task runs on any node.
  - Runs on the controller only; never changes anything; runs in check mode too.
options:
  roles:
    description: The roles of this collection to check, by name (C(hvd.cluster.hvd_openmpi) or C(hvd_openmpi)).
    type: list
    elements: str
    required: true
  hosts:
    description: The hosts to check; the play's current batch (C(ansible_play_batch)) when left out.
    type: list
    elements: str
attributes:
  check_mode: {description: Can run in check mode., support: full, details: It only reads.}
author: hvdcluster developers (@hvdcluster)
"""

EXAMPLES = r"""
- name: Check every node's Open MPI variables (once for the play)
  hvd.cluster.hvd_role_args:
    roles: [hvd.cluster.hvd_openmpi]
  run_once: true
  tags: [always]

- name: Open MPI
  ansible.builtin.import_role:
    name: hvd.cluster.hvd_openmpi
    rolespec_validate: false
  tags: [hvd_openmpi]
"""

RETURN = r"""
hosts: {description: The hosts checked., type: list, elements: str, returned: always}
roles: {description: The roles checked (fully qualified)., type: list, elements: str, returned: always}
argument_errors:
  description: Each host whose variables do not fit -> its messages, each prefixed with the role.
  type: dict
  returned: always
"""

ARGUMENT_SPEC = {"roles": {"type": "list", "elements": "str", "required": True},
                 "hosts": {"type": "list", "elements": "str"}}


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.fail_json(msg="hvd_role_args runs on the controller through its action plugin, not on a node")


if __name__ == "__main__":
    main()
