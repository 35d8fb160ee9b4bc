#!/usr/bin/python
"""Ansible module: fingerprint a Python distribution installed in an environment, by its RECORD.

Every ``pip install`` of a distribution (a reinstall of the same wheel too) rewrites its
``<name>-<version>.dist-info/RECORD``, so the digest of that file's modification time and content changes with
any install: hvd_horovod runs its ``horovodrun --check-build`` gate again when it differs from the one that last
passed. With ``files``, one more digest covers those files (path, modification time and content; a missing one
counted as missing) and then the RECORD the same way: hvd_verify's fingerprint of what its allreduce depends on.

It only reads: safe in check mode, never changes anything.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re

from ansible.module_utils.hvd_files import add_stamped

DOCUMENTATION = r"""
module: hvd_dist_record
short_description: Find a Python distribution's installed RECORD in an environment and fingerprint it
description:
  - Looks for I(prefix)/lib/python*/site-packages/<name>-*.dist-info/RECORD, the name compared as packaging
    normalises it (case, and runs of '-', '_', '.'). Several (one per Python version of the prefix) are all
    fingerprinted, in path order.
  - Its fingerprint is the sha256 of its modification time (ns) and its content, 'none' when it is not installed.
  - With I(files), also the sha256 of each of those files (path, modification time, content; missing ones counted
    as missing) followed by the RECORD the same way ('no <name>' when it is not installed).
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
    description: More files to fingerprint, with the RECORD, into I(files_sha256).
    type: list
    elements: str
    default: []
author: hvdcluster
"""

EXAMPLES = r"""
- name: Fingerprint the installed Horovod
  hvd_dist_record:
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
  description: sha256 of I(files) and then the RECORD (path, modification time and content each).
  type: str
  returned: when files are given
"""

_RUNS = re.compile(r"[-_.]+")


def canonical(name: str) -> str:
    """A distribution name as packaging's ``canonicalize_name`` writes it."""
    return _RUNS.sub("-", name).lower()


def records(prefix: str, name: str) -> list[str]:
    """Every ``<prefix>/lib/python*/site-packages/<name>-*.dist-info/RECORD`` of the distribution, sorted."""
    want = canonical(name)
    found = []
    for info in glob.glob(os.path.join(glob.escape(prefix), "lib", "python*", "site-packages", "*.dist-info")):
        dist = os.path.basename(info)[: -len(".dist-info")].split("-", 1)[0]
        if canonical(dist) == want and os.path.isfile(os.path.join(info, "RECORD")):
            found.append(os.path.join(info, "RECORD"))
    return sorted(found)


def record_sha256(paths: list[str]) -> str:
    """sha256 of each RECORD's modification time (ns, then a space) and content; 'none' without one (or when one
    cannot be read)."""
    digest = hashlib.sha256()
    try:
        for path in paths:
            with open(path, "rb") as handle:
                digest.update(b"%d " % os.fstat(handle.fileno()).st_mtime_ns + handle.read())
    except OSError:
        return "none"
    return digest.hexdigest() if paths else "none"


def files_sha256(files: list[str], paths: list[str], name: str) -> str:
    """sha256 of ``files`` then the RECORDs, each as its path, modification time and content (a missing file as
    its path and '-'); ``no <name>`` in place of the RECORD when the distribution is not installed."""
    digest = hashlib.sha256()
    for path in files:
        add_stamped(digest, path)
    for path in paths:
        add_stamped(digest, path)
    if not paths:
        digest.update(b"no " + name.encode())
    return digest.hexdigest()


def fingerprint(prefix: str, name: str, files: list[str] | None = None) -> dict[str, str]:
    """What the module returns: record, sha256 and, with ``files``, files_sha256."""
    paths = records(prefix, name)
    out = {"record": paths[0] if paths else "", "sha256": record_sha256(paths)}
    if files:
        out["files_sha256"] = files_sha256(files, paths, name)
    return out


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "prefix": {"type": "path", "required": True},
            "name": {"type": "str", "default": "horovod"},
            "files": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    module.exit_json(changed=False, **fingerprint(module.params["prefix"], module.params["name"],
                                                  module.params["files"]))


if __name__ == "__main__":
    main()
