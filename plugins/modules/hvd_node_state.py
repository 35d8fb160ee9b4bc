#!/usr/bin/python
"""Ansible module: one look at a node, read-only: what hvdcluster installed and manages there, as one flat dict.

``plan --probe``, the pre-flight, ``check``, the fast path of ``up`` and ``run``'s launch gate compare it with
what the controller recorded. Plain file reads only (no dpkg-query, no python -c; the one process it starts is
``ssh -G`` per peer, local and as fast as a file read), so a node
answers in well under a second even with a multi-GB torch env: the env's files are checked by size (and, where
hvd_tree's manifest lists them, modification time); ``deep`` reads every file's content too. The readers live in
plugins/module_utils/hvd_state.py.

With ``look`` it also looks at the host itself (plugins/module_utils/hvd_host.py): what the pre-flight judges and
``plan --probe`` resolves for (kernel and headers, disks, /dev/shm, GPUs, compilers, the interpreter, the MPI of
non-interactive SSH commands, routes and ports to the peers). That look asks programs and opens connections, so
it is only made when asked for.

It only reads: safe in check mode, never changes anything.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: hvd_node_state
short_description: Read a node's state (packages, GPU stack, MPI, the Python env, SSH mesh, managed blocks) in one call
description:
  - Returns I(state), a flat dict of item -> string, integer or boolean, sorted by key; what is not there reads
    C(absent). Digests are the first 16 hex digits of a sha256.
  - C(os.release) (ID and VERSION_ID, e.g. C(debian 12)), C(os.kernel).
  - C(pkg.<name>) (installed version or C(absent)) and C(pkg.<name>.hold), from dpkg's status file, for every
    package in I(packages) and every package held.
  - C(driver.installed) (the NVML library's version), C(driver.loaded) (/proc/driver/nvidia/version),
    C(gpu.count) (ansible_local.hvd_nvidia_driver); where that fact's mode is C(kernel), C(driver.next_boot)
    (C(ok) when the kernel the boot loader starts next has the nvidia, nvidia-modeset and nvidia-uvm modules, else
    which are missing and why); where the role also blacklists nouveau, C(driver.nouveau) (C(ok) when a modprobe.d
    file blacklists it and that kernel's initramfs was built after it, else which is not so).
  - C(cuda.version), C(cuda.home), C(cudnn.version), C(cudnn.home), C(nccl.version), C(nccl.home) (their local
    facts) and C(nccl.header) (the version nccl.h under the NCCL home says).
  - Where ansible_local.hvd_nccl_tests names a prefix - C(nccl_tests.version), C(nccl_tests.key) (the build key in
    the prefix) and C(nccl_tests.files) (C(ok) or what is missing or changed against the prefix's manifest; I(deep) -
    by sha256 too).
  - C(mpi.path) (the first mpirun on I(ssh_path), resolved), C(mpi.version) (ansible_local.hvd_openmpi).
  - C(env.python) ("<real interpreter> <version>"), C(env.key), C(env.lock) (sha256 of hvd-requirements.lock),
    C(env.dist.<name>) ("<version> <digest of its RECORD>") for every distribution but Horovod, C(env.files)
    (C(ok) or what is missing, changed or added, checked against hvd_tree's manifest, each RECORD and Horovod's
    RECORD; nothing else may be in the env), C(env.manifest) (digest of what the manifest says was installed).
  - C(os.release), C(os.kernel), C(os.machine-id) (digest; a reinstalled node has another).
  - C(horovod.version), C(horovod.record), C(horovod.key), C(horovod.checked).
  - C(mesh.authorized), C(mesh.known_hosts), C(mesh.ssh_config), C(base.hosts), C(base.fabric_interface), C(base.ca),
    C(profile.<file>) (/etc/profile.d/hvd-*.sh), C(ldconf.<file>) (/etc/ld.so.conf.d/hvd-*.conf).
  - C(mesh.other_keys), the keys in the user's authorized_keys beyond the cluster's (type, SHA256 fingerprint,
    comment; a notice C(hvdcluster check) names, never a drift).
  - What changes what a rank runs or how it reaches its peers, as text, one line per setting, the file's path first -
    C(launch.env) (what pam_env and sshd give a non-interactive SSH command - /etc/environment, /etc/default/locale,
    /etc/security/pam_env.conf, ~/.pam_environment, ~/.ssh/environment where PermitUserEnvironment allows it),
    C(launch.sshd) (sshd_config's PermitUserEnvironment, SetEnv, AcceptEnv), C(launch.mpi) (Open MPI's
    openmpi-mca-params.conf files and ~/.openmpi/mca-params.conf, but hvd_openmpi's own block in them, which is
    C(mpi.single_copy), the node's own setting, its single-copy path off where its ranks may not read each other's
    memory), C(launch.nccl) (/etc/nccl.conf, ~/.nccl.conf),
    C(launch.ld) (/etc/ld.so.preload, /etc/ld.so.conf and what it includes, but hvd-*.conf); and C(launch.ssh.<peer>)
    for every name in I(peers) - what C(ssh -G <peer>) resolves for the user (host name, port, user, proxy, identity
    files, host key checking and files, host key alias, SendEnv, SetEnv), one option per line; the only process the
    look starts, one per peer, run as the user.
  - With I(slurm) - C(slurm.config.<file>) (digests of /etc/slurm/slurm.conf, cgroup.conf, gres.conf),
    C(slurm.slurmd) and on the controller C(slurm.slurmctld) (C(running) or C(not running)), C(slurm.munge) (C(ok) when
    munged answers and slurmctld accepts this node's credentials; the key is never read), C(slurm.pmix) (C(ok) when the
    libpmix.so that Slurm's mpi/pmix plugin loads is there and slurmd started after it was; else what is wrong),
    C(slurm.node) (C(ok), or
    down or drained by Slurm itself and why) and C(slurm.drain) (an operator's or hvdcluster's drain, its reason and who
    set it). These start C(munge), C(unmunge) and C(scontrol) as the user.
  - With I(look), also I(host), the host as the pre-flight judges it and C(plan --probe) resolves for it.
  - With I(health), also I(health), the quick health reading C(hvd_health_read) returns (no dcgmi diag), in the same
    module run - `up`'s read-back and its fast path read state and health in one run a node.
  - Reads only; supports check mode.
options:
  cluster: {description: The cluster's name (in the markers of the blocks hvdcluster writes)., type: str,
            required: true}
  packages: {description: Debian packages to report (held ones are reported anyway)., type: list, elements: str,
             default: []}
  env_prefix: {description: The Python environment., type: path, default: /opt/hvd/env}
  user: {description: The cluster user (its authorized_keys and ~/.ssh/config)., type: str, default: root}
  cluster_public_key: {description: The cluster's OpenSSH public key line (type and base64 are compared)., type: str,
                       default: ""}
  ssh_path:
    description:
      - The PATH a non-interactive SSH command gets. Empty - /etc/environment's PATH where it sets one, else
        Debian's sshd default (/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games).
    type: str
    default: ""
  deep: {description: "Check every env file's sha256 too, not only its size (and time).", type: bool, default: false}
  peers: {description: "The names the node's ssh reaches its peers by (C(launch.ssh.<peer>)); none - no such item.",
          type: list, elements: str, default: []}
  sections:
    description: Read only these parts (C(os), C(packages), C(driver), C(components), C(mpi), C(env), C(mesh), C(base),
      C(launch));
      empty - all. hvd_pyenv reads C(env) with it, the reader C(hvdcluster check) uses.
    type: list
    elements: str
    default: []
  slurm:
    description: Under Slurm, C(controller) on the node that runs slurmctld, else C(node); empty - no Slurm items.
    type: str
    choices: ["", node, controller]
    default: ""
  look:
    description:
      - Look at the host too (returned as I(host)). Keys, all optional - C(peers) (list of name, address, port,
        probe_port), C(paths) (folders whose free space matters), C(tmp_dir) (must be writable), C(host_cxx)
        (the CUDA host compiler), C(login_user) (whose login shell is asked for mpirun, returned as C(mpi.login)).
    type: dict
  health:
    description: Read the node's quick health too (C(hvd_health_read) with I(quick); returned as I(health)).
    type: bool
    default: false
  root:
    description: For tests only - read the node's files below this folder instead of /. The kernel is the running one.
    type: path
    default: /
author: hvdcluster developers (@hvdcluster)
"""

EXAMPLES = r"""
- name: Read the node's state
  hvd.cluster.hvd_node_state:
    cluster: lab
    packages: [openmpi-bin, nvidia-driver]
    env_prefix: /opt/hvd/env
    cluster_public_key: "{{ lookup('ansible.builtin.file', 'cluster_key.pub') }}"
  register: node
"""

RETURN = r"""
state:
  description: Item -> value (str, int or bool), sorted by key; C(absent) for what is not there.
  type: dict
  returned: always
host:
  description: With I(look) - release, python, kernel, secure_boot, nvidia, gcc, mpi, disks, shm, interfaces and peers.
  type: dict
  returned: when look is given
health:
  description: With I(health) - the reading C(hvd_health_read) returns as I(reading), dcgmi diag left out.
  type: dict
  returned: when health is true
health_seconds:
  description: With I(health) - how long the health reading took.
  type: float
  returned: when health is true
seconds:
  description: How long the look took.
  type: float
  returned: always
"""

import time

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_health_reader import TIMEOUT, read_health
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_host import look
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_state import node_state
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_module import AnsibleModule


ARGUMENT_SPEC = {
    "cluster": {"type": "str", "required": True},
    "packages": {"type": "list", "elements": "str", "default": []},
    "env_prefix": {"type": "path", "default": "/opt/hvd/env"},
    "user": {"type": "str", "default": "root"},
    "cluster_public_key": {"type": "str", "default": "", "no_log": False},
    "ssh_path": {"type": "str", "default": ""},
    "deep": {"type": "bool", "default": False},
    "sections": {"type": "list", "elements": "str", "default": []},
    "peers": {"type": "list", "elements": "str", "default": []},
    "slurm": {"type": "str", "default": "", "choices": ["", "node", "controller"]},
    "look": {"type": "dict"},
    "health": {"type": "bool", "default": False},
    "root": {"type": "path", "default": "/"},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    start = time.monotonic()
    try:
        state = node_state(p["root"], cluster=p["cluster"], packages=p["packages"], env_prefix=p["env_prefix"],
                           user=p["user"], cluster_public_key=p["cluster_public_key"], ssh_path=p["ssh_path"],
                           deep=p["deep"], sections=p["sections"], peers=p["peers"], slurm=p["slurm"])
        extra = {}
        if p["look"] is not None:
            want = p["look"]
            extra["host"] = look(peers=want.get("peers") or [], paths=want.get("paths") or [],
                                 tmp_dir=want.get("tmp_dir") or "/tmp", host_cxx=want.get("host_cxx") or "",
                                 ssh_path=p["ssh_path"], login_user=want.get("login_user") or "")
        if p["health"]:
            began = time.monotonic()
            extra["health"] = read_health(p["root"], "", True, TIMEOUT)
            extra["health_seconds"] = round(time.monotonic() - began, 3)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        module.fail_json(msg=f"reading the node's state failed: {exc}")
    module.exit_json(changed=False, state=state, seconds=round(time.monotonic() - start, 3), **extra)


if __name__ == "__main__":
    main()
