#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Read several small text files on the node in one module run (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: hvd_read
short_description: Read several small text files on the node in one module run
description:
  - Returns the text of each path in O(paths), or null for a path that is missing (or not a file). One run of this
    module replaces a C(slurp) task per file, each of which costs a module run on every node of every converge.
  - Changes nothing; supports check mode (it reads there too).
options:
  paths:
    description: The files to read.
    type: list
    elements: path
    required: true
  limit:
    description: The most bytes read of one file; a larger file fails the task, naming it.
    type: int
    default: 1048576
author: hvdcluster developers (@hvdcluster)
"""

EXAMPLES = r"""
- name: Read the keys the role decides by
  hvd.cluster.hvd_read:
    paths:
      - /opt/hvd/env/.hvd-env-key
      - /etc/ansible/facts.d/hvd_openmpi.fact
  register: keys
"""

RETURN = r"""
content:
  description: Path (as given) -> its text (UTF-8, undecodable bytes replaced), or null where it is missing.
  type: dict
  returned: success
"""

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import READ_LIMIT, read_all
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_module import AnsibleModule


ARGUMENT_SPEC = {
    "paths": {"type": "list", "elements": "path", "required": True},
    "limit": {"type": "int", "default": READ_LIMIT},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        content = read_all(module.params["paths"], module.params["limit"])
    except (ValueError, OSError) as error:
        module.fail_json(msg=f"hvd_read: {error}")
    module.exit_json(changed=False, content=content)


if __name__ == "__main__":
    main()
