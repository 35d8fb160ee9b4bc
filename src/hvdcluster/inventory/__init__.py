"""Spec -> a plain, commented Ansible inventory on disk, and back.

Layout of ``<out>/<cluster>/``::

    hosts.yml                 the nodes, with how the controller and the other nodes reach them
    group_vars/all/cluster.yml, ssh.yml, network.yml, stack.yml
    ssh/                      cluster keypair and pinned host keys (made by hvdcluster / hvd_ssh_mesh)
    runs/                     one folder of logs per run

The files hvdcluster writes are rewritten on every render; anything else in the folder is kept, so
site-specific overrides belong in another file of ``group_vars/all/``.

Values from hosts.yaml are data, never templates: every string taken from it (or from the stack resolved
from it) that is not a bare word (letters, digits, ``.``, ``_``, ``+``, ``-``: no Jinja delimiter can be
spelled with these) is written with Ansible's ``!unsafe`` tag, so Ansible never evaluates it, whatever it
holds. Written plain: our own templated SSH arguments (they name ``inventory_dir``) and the version matrix's
pre-flight rules (reviewed data shipped with hvdcluster, not input).

The package: :mod:`.files` (render and read), :mod:`.variables` (what is written), :mod:`.ssh` (the SSH arguments,
the bastion), :mod:`.hostkeys` (pinned and first-use node keys) and :mod:`.yamlio` (``!unsafe``, atomic writes).
"""

from __future__ import annotations

# Every name importable from hvdcluster.inventory when it was one module still is.
from ..spec import host_matches, known_hosts_name
from .files import GROUP, GROUP_VAR_TITLES, PRIVATE_FILES, Inventory, read, render
from .hostkeys import KNOWN_HOSTS, first_use_hosts, pinned_hosts, pinned_keys, trusted_on_first_use, write_pins
from .ssh import (
    BASTION_KNOWN_HOSTS,
    CONTROL_PATH_DIR,
    PROXY_COMMAND_ARG,
    SSH_COMMON_ARGS,
    bastion_argv,
    bastion_problem,
    known_hosts_pattern,
    proxy_command,
    ssh_word,
)
from .variables import (
    HOST_VAR_DOC,
    STACK_VARS,
    VAR_DOCS,
    bundle_vars,
    bundled_tarball,
    canonical,
    group_vars,
    host_vars,
    members,
    stack_vars,
)
from .yamlio import Unsafe, data_only
