#!/usr/bin/python
"""Ansible module: take out of an installed env what was added to it and nothing accounts for, where that is all that
differs from what was installed (hvd_pyenv's repair of an added ``.pth``, module or distribution: seconds, where
installing the env again from the cache, and Horovod on top, took a minute)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: hvd_env_prune
short_description: Take out of an env the files added since it was installed, where that is all that differs
description:
  - Reads the env at O(prefix) with the reader C(hvdcluster check) uses (hvd_node_state's C(env.files)), that is every
    file its manifest lists, every file of Horovod's RECORD, and what nothing accounts for (added).
  - Where every difference is an addition (a C(*.pth) or C(sitecustomize.py), which run at every interpreter start, a
    stray module, a distribution, a planted byte cache), each added file or link is removed (a link itself, never what
    it points at), then each folder left empty by that up to the env's site-packages or prefix, and the env is read
    again. The env as it was installed is what remains, and nothing of it is written.
  - Where anything it holds is missing or changed, nothing is removed; the env is installed again whole (hvd_pyenv).
  - Supports check mode (what would be removed, nothing removed).
options:
  prefix:
    description: The env (a venv or conda prefix) as hvd_pyenv installed it, with its C(.hvd-manifest).
    type: path
    required: true
  deep:
    description: Read the listed files by their sha256, not their size and modification time.
    type: bool
    default: false
author: hvdcluster developers (@hvdcluster)
"""

EXAMPLES = r"""
- name: Take out what was added to the environment
  hvd.cluster.hvd_env_prune:
    prefix: /opt/hvd/env
  register: pruned
"""

RETURN = r"""
pruned:
  description: What was removed (or would be, in check mode), named as C(env.files) names it.
  type: list
  elements: str
  returned: always
files:
  description: C(env.files) after it, as hvd_node_state reads it ("ok", or what still differs).
  type: str
  returned: always
"""

import os

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import describe_problems
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_state_env import (
    distributions,
    env_namer,
    env_problems,
    verify_env,
)
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_module import AnsibleModule


def prune(prefix: str, deep: bool = False, check: bool = False) -> dict:
    """``pruned`` (names) and ``files`` (env.files after). Nothing is removed unless every problem is "added"."""
    prefix = os.path.normpath(prefix)
    dists = distributions(prefix)
    found = env_problems(prefix, dists, deep, full_paths=True)
    name = env_namer(prefix, dists)
    # Nothing but additions, each inside the prefix (the walk names nothing else; never outside): else nothing is
    # removed and the reader's answer is returned
    if not found or any(kind != "added" or not path.startswith(prefix + os.sep) for kind, path in found):
        return {"pruned": [], "files": describe_problems([(kind, name(path)) for kind, path in found])}
    paths = sorted({path for dummy_kind, path in found})
    if check:
        return {"pruned": [name(path) for path in paths], "files": "ok"}
    stops = {prefix} | {site for dummy_name, dummy_version, site, dummy_info in dists}
    for path in paths:
        remove(prefix, os.path.relpath(path, prefix), stops)
    return {"pruned": [name(path) for path in paths], "files": verify_env(prefix, distributions(prefix), deep)}


def remove(prefix: str, rel: str, stops: set[str]) -> None:
    """Remove ``rel`` (a file or a link) below ``prefix``, then each folder it leaves empty up to one of ``stops``.
    Every folder on the way is opened without following a link (O_NOFOLLOW, from the prefix down) and the entry
    removed relative to it: a folder swapped for a link after the env was read never leads the removal elsewhere."""
    parts = rel.split(os.sep)
    fds = [os.open(prefix, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)]
    try:
        for part in parts[:-1]:
            try:
                fds.append(os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fds[-1]))
            except OSError:
                return  # gone, or no longer a folder: nothing of ours to remove there
        try:
            os.unlink(parts[-1], dir_fd=fds[-1])  # a file or a link itself (the walk never enters a linked folder)
        except (FileNotFoundError, IsADirectoryError, PermissionError):
            return
        for depth in range(len(parts) - 1, 0, -1):
            if os.path.join(prefix, *parts[:depth]) in stops:
                break
            try:
                os.rmdir(parts[depth - 1], dir_fd=fds[depth - 1])  # only while empty: anything else keeps it
            except OSError:
                break
    finally:
        for fd in fds:
            os.close(fd)


ARGUMENT_SPEC = {
    "prefix": {"type": "path", "required": True},
    "deep": {"type": "bool", "default": False},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    result = prune(module.params["prefix"], module.params["deep"], module.check_mode)
    module.exit_json(changed=bool(result["pruned"]), **result)


if __name__ == "__main__":
    main()
