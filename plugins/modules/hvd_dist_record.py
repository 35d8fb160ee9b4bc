#!/usr/bin/python
"""Ansible module: fingerprint a Python distribution installed in an environment, by its RECORD.

Every ``pip install`` of a distribution (a reinstall of the same wheel too) rewrites its
``<name>-<version>.dist-info/RECORD``, so the digest of that file's modification time and content changes with
any install: hvd_horovod runs its ``horovodrun --check-build`` gate again when it differs from the one that last
passed. With ``files``, one more digest covers those files (path and content; a missing one counted as missing) and
then the RECORD the same way: hvd_verify's fingerprint of what its allreduce depends on, which a repair that puts
back the same bytes leaves as it was.

It only reads: safe in check mode, never changes anything (with ``run``, the read-only check it is given runs in the
same module run: hvd_horovod's build gate, fingerprinted as it asks). The readers are hvd_node_state's
(plugins/module_utils/hvd_state_env.py): one way of finding and reading a distribution's RECORD.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: hvd_dist_record
short_description: Find a Python distribution's installed RECORD in an environment and fingerprint it
description:
  - Looks for I(prefix)/lib/python*/site-packages/<name>-*.dist-info/RECORD, the name compared as packaging
    normalises it (case, and runs of '-', '_', '.'). Several (one per Python version of the prefix) are all
    fingerprinted, in path order.
  - Its fingerprint is the sha256 of its modification time (ns) and its content, 'none' when it is not installed.
  - With I(files), also the sha256 of each of those files (path and content; missing ones counted as missing)
    followed by the RECORD the same way ('no <name>' when it is not installed). This is the post-flight's record of
    what its allreduce depends on, which a rewrite with the same bytes leaves as it was.
  - With I(run), a read-only check (a program and its arguments, no shell) runs after the fingerprint; its exit
    status and output are returned, and a non-zero exit fails the task. hvd_horovod asks Horovod what it was built
    with this way, so the gate's record carries the fingerprint of exactly what it asked.
  - Reads only; supports check mode.
options:
  prefix:
    description: The environment (a venv or conda prefix).
    type: path
    required: true
  name:
    description: The distribution's name.
    type: str
    default: horovod
  files:
    description: More files to fingerprint, with the RECORD, into I(files_sha256); a path may start with C(~user).
    type: list
    elements: str
    default: []
  present:
    description: Paths to look for, outside the fingerprint; those not there are returned in RV(absent).
    type: list
    elements: str
    default: []
  read:
    description: Small text files to read in the same run (as M(hvd.cluster.hvd_read) does), returned in
      RV(content); hvd_horovod reads the keys it decides by with the fingerprint, in one module run.
    type: list
    elements: str
    default: []
  run:
    description: A read-only check to run after the fingerprint (argv, no shell); see RV(rc), RV(stdout).
    type: list
    elements: str
    default: []
author: hvdcluster developers (@hvdcluster)
"""

EXAMPLES = r"""
- name: Fingerprint the installed Horovod
  hvd.cluster.hvd_dist_record:
    prefix: /opt/hvd/env
    name: horovod
  register: record
"""

RETURN = r"""
record:
  description: The RECORD's path (the first, when there are several); empty when the distribution is not installed.
  type: str
  returned: always
sha256:
  description: sha256 of the RECORD's modification time and content; 'none' when the distribution is not installed.
  type: str
  returned: always
files_sha256:
  description: sha256 of I(files) and then the RECORD (path and content each).
  type: str
  returned: when files are given
content:
  description: Each path of I(read) (as given) -> its text, or null where it is missing.
  type: dict
  returned: always
rc:
  description: I(run)'s exit status.
  type: int
  returned: with run
stdout:
  description: I(run)'s standard output.
  type: str
  returned: with run
stderr:
  description: I(run)'s standard error.
  type: str
  returned: with run
absent:
  description: The paths of I(present) that are not there (the post-flight's check script, say, which an env
    installed again from its archive does not hold).
  type: list
  elements: str
  returned: always
"""

import os

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import read_all
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_state_env import fingerprint
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_module import AnsibleModule


ARGUMENT_SPEC = {
    "prefix": {"type": "path", "required": True},
    "name": {"type": "str", "default": "horovod"},
    "files": {"type": "list", "elements": "str", "default": []},
    "present": {"type": "list", "elements": "str", "default": []},
    "read": {"type": "list", "elements": "str", "default": []},
    "run": {"type": "list", "elements": "str", "default": []},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    absent = [path for path in module.params["present"] if not os.path.lexists(path)]
    try:
        content = read_all(module.params["read"])
    except (ValueError, OSError) as error:
        module.fail_json(msg=f"hvd_dist_record: {error}")
    found = fingerprint(module.params["prefix"], module.params["name"], module.params["files"])
    if module.params["run"]:
        rc, out, err = module.run_command(module.params["run"])
        found.update(rc=rc, stdout=out, stderr=err)
        if rc != 0:
            tail = " ".join(line.strip() for line in (err or out).strip().splitlines()[-3:])
            module.fail_json(msg=f"{module.params['run'][0]} exited {rc}: {tail}", absent=absent, content=content,
                             **found)
    module.exit_json(changed=False, absent=absent, content=content, **found)


if __name__ == "__main__":
    main()
