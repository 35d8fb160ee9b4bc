"""Readers of a node's state for hvd_node_state: one look at a node, by plain file reads (no subprocess but one
``ssh -G`` per peer, a local process: :func:`ssh_resolved`; and under Slurm a munge round trip and one question to
slurmctld: :func:`slurm_state`).

Every reader takes ``root``, the prefix the node's files are read under ("/" on a node; a fake root in tests) and
returns items of one flat dict: key -> str, int or bool, "absent" for what is not there. Paths in values are the
node's paths (``root`` left out). Digests are the first 16 hex digits of a sha256 ("d16" below).

The readers live by concern: hvd_state_stack.py (OS, packages, driver, GPU components, MPI), hvd_state_env.py (the
Python env), hvd_state_mesh.py (the SSH mesh, hvd_base's blocks, what a rank inherits) and hvd_slurm.py (Slurm);
the file primitives (``ABSENT``, ``d16``, ``read_fact``) are hvd_files.py's. :func:`node_state` puts them together.
"""

from __future__ import annotations

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_slurm import slurm_state
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_state_env import env_state
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_state_mesh import base_state, launch_state, mesh_state
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_state_stack import (
    components_state,
    driver_state,
    mpi_state,
    os_state,
    packages_state,
)

# ------------------------------------------------------------------------------------------ all of it


SECTIONS = ("os", "packages", "driver", "components", "mpi", "env", "mesh", "base", "launch")


def node_state(root: str = "/", *, cluster: str, packages: list[str] | None = None, env_prefix: str = "/opt/hvd/env",
               user: str = "root", cluster_public_key: str = "", ssh_path: str = "",
               deep: bool = False, sections: list[str] | None = None, peers: list[str] | None = None,
               slurm: str = "") -> dict:
    """The node's state: one flat dict, sorted by key; ``sections``: only those parts (default: all); ``peers``: the
    names the node's ``ssh`` reaches its peers by (``launch.ssh.<peer>``); ``slurm``: under Slurm, "controller" or
    "node" (the ``slurm.*`` items, read with every section), "" for a cluster without it."""
    unknown = sorted(set(sections or ()) - set(SECTIONS))
    if unknown:
        raise ValueError(f"unknown sections {unknown} (known: {', '.join(SECTIONS)})")
    readers = {
        "os": lambda: os_state(root),
        "packages": lambda: packages_state(root, list(packages or [])),
        "driver": lambda: driver_state(root),
        "components": lambda: components_state(root, deep),
        "mpi": lambda: mpi_state(root, ssh_path),
        "env": lambda: env_state(root, env_prefix, deep),
        "mesh": lambda: mesh_state(root, cluster, user, cluster_public_key),
        "base": lambda: base_state(root, cluster),
        "launch": lambda: launch_state(root, user, peers, ssh_path),
    }
    state = {}
    for section in SECTIONS:
        if not sections or section in sections:
            state.update(readers[section]())
    if slurm and not sections:
        state.update(slurm_state(root, slurm))
    return dict(sorted(state.items()))
