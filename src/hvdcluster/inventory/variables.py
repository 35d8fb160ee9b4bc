"""The inventory's variables: per host, and for every host by the group_vars file they are written to (the
cluster, SSH, the network and offline bundle, the resolved stack and the role variables taken from it), with the
comment each is written with."""

from __future__ import annotations

import os
from typing import Any

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_members as member_rules

from .. import redact
from ..compat import Plan, preflight_vars, sdist_sha256
from ..spec import ClusterSpec
from .ssh import CONTROL_PATH_DIR, PROXY_COMMAND_ARG, SSH_COMMON_ARGS
from .yamlio import Expression

HOST_VAR_DOC = """\
# Per-host variables:
#   ansible_host, ansible_port   how the controller reaches the node over SSH
#   hvd_fabric_address           how the other nodes reach it (/etc/hosts, known_hosts, launches)
#   hvd_fabric_port              the SSH port the other nodes use
#   hvd_slots                    processes to start on it (absent: one per GPU found)
#   hvd_host_keys                its pinned host keys (hosts.yaml host_key or ssh.known_hosts): written to
#                                ssh/known_hosts before any contact and checked strictly, by the controller and by
#                                the other nodes (absent: its key is trusted on first contact)
"""

VAR_DOCS: dict[str, str] = {
    "hvd_cluster_name": "Name of the cluster (file markers, key comments).",
    "hvd_set_hostname": "Set each node's hostname to its inventory name.",
    "hvd_members": "Every node in inventory order, as the roles use it: name, fabric address, the SSH port the\n"
    "other nodes use, slots (hosts.yml's hvd_fabric_address, hvd_fabric_port and hvd_slots; slots null: one per\n"
    "GPU found, else 1). Editing "
    "hosts.yml by hand? Edit this too, or remove it: the roles then derive it from hosts.yml.",
    "ansible_user": "Account the controller logs in as; nodes reach each other as it too.",
    "hvd_become": "Use sudo for tasks (the account is not root). The playbooks' `become` keyword reads it; an\n"
    "ansible_become variable would override the tasks that must not use sudo.",
    "ansible_ssh_private_key_file": "The controller's key for that account.",
    "ansible_ssh_common_args": "Host keys are checked against ssh/known_hosts beside this inventory: strictly for a node\n"
    "whose keys hosts.yaml pins (hvd_host_keys, written there before any contact), else recorded on first contact\n"
    "(accept-new); a changed key is refused. Never turn host key checking off. Paths are quoted for ssh and the\n"
    "shell after inventory_dir is templated into them, so any folder name works.",
    "ansible_control_path_dir": "Ansible's ssh connection masters for this inventory, in a folder named by its ssh/\n"
    "folder: a master opened through another inventory (other host keys, another bastion) is never used here.",
    "hvd_ssh_mesh_user": "Account that nodes use to reach each other (horovodrun / mpirun run as it).",
    "hvd_ssh_proxy_jump": "The bastion the controller reaches every node through (hosts.yaml ssh.proxy_jump); its host\n"
    "key is pinned in ssh/bastion_known_hosts and never learnt.",
    "hvd_base_ca_bundle": "Controller path of a CA bundle the nodes trust (TLS-intercepting proxies); empty: none.",
    "hvd_base_apt_proxy": "apt proxy URL; empty: none.",
    "hvd_base_pip_index": "pip index URL; empty: pip's default.",
    "hvd_pyenv_wheelhouse": "Controller folder of wheels offered to pip on the nodes; empty: none.",
    "hvd_pyenv_conda_channel": "conda: the only channel (network.conda_channel: a mirror URL or a local indexed\n"
    "channel folder); empty: the channels of stack.python / the environment file.",
    "hvd_base_bundle": "An offline bundle (hvdcluster bundle): apt installs from its repository only, pip with\n"
    "--no-index.",
    "hvd_pyenv_bundle_files": "The bundle's pypi/, wheelhouse/ and conda/ files as its checked manifest lists them\n"
    "(src: the controller path, path: the manifest's, sha256): hvd_pyenv copies exactly these to the builder and\n"
    "hashes them there again before anything uses them.",
    "hvd_base_bundle_sha256": "The pinned sha256 of the bundle's manifest.yaml (network.bundle_sha256).",
    "hvd_base_bundle_signers": "OpenSSH allowed-signers file for the bundle's signature (network.bundle_signers).",
    "hvd_stack": "The software stack: hosts.yaml's, completed by the resolver (`hvdcluster plan` says why).\n"
    "The role variables below are taken from it.",
}


def host_vars(spec: ClusterSpec) -> dict[str, dict[str, Any]]:
    hosts: dict[str, dict[str, Any]] = {}
    for host in spec.hosts:
        entry: dict[str, Any] = {
            "ansible_host": host.address,
            "ansible_port": host.port,
            "hvd_fabric_address": host.fabric_address,
            "hvd_fabric_port": host.fabric_port,
        }
        if host.slots is not None:
            entry["hvd_slots"] = host.slots
        if host.host_keys:
            entry["hvd_host_keys"] = list(host.host_keys)
        hosts[host.name] = entry
    return hosts


def members(spec: ClusterSpec) -> list[dict[str, Any]]:
    """Every member in inventory order, as the roles use it: name, fabric address, the SSH port the other nodes
    use, slots (None: one per GPU the node reports, else 1, decided where the GPUs are known). The rules are
    plugins/module_utils/hvd_members.py's, which the roles apply to a hand-written inventory's host variables."""
    return [member_rules.member(name, entry) for name, entry in host_vars(spec).items()]


def group_vars(spec: ClusterSpec, plan: Plan | None = None) -> dict[str, dict[str, Any]]:
    """The variables of every host, by the file they are written to.

    With a resolved ``plan`` the stack is the resolved one and its role variables are written too;
    without, only what hosts.yaml says.
    """
    stack = plan.stack if plan else spec.stack
    ssh: dict[str, Any] = {"ansible_user": spec.ssh.user, "hvd_become": bool(spec.ssh.become)}
    if spec.ssh.identity:
        ssh["ansible_ssh_private_key_file"] = canonical(spec.ssh.identity)
    ssh["ansible_ssh_common_args"] = SSH_COMMON_ARGS
    ssh["ansible_control_path_dir"] = CONTROL_PATH_DIR
    jump = spec.ssh.proxy_jump
    if jump is not None:
        ssh["hvd_ssh_proxy_jump"] = {"host": jump.host, "port": jump.port, "user": jump.user,
                                     "identity": canonical(jump.identity)}
        ssh["ansible_ssh_common_args"] = f"{SSH_COMMON_ARGS} {PROXY_COMMAND_ARG}"
    ssh["hvd_ssh_mesh_user"] = spec.ssh.user
    net = spec.network
    return {
        "cluster.yml": {"hvd_cluster_name": spec.cluster, "hvd_set_hostname": spec.set_hostname,
                        "hvd_members": members(spec), **scheduler_vars(spec)},
        "ssh.yml": ssh,
        "network.yml": {
            "hvd_base_ca_bundle": canonical(net.ca_bundle),
            "hvd_base_apt_proxy": net.apt_proxy or "",
            "hvd_base_pip_index": net.pip_index or "",
            "hvd_pyenv_wheelhouse": canonical(net.wheelhouse),
            "hvd_pyenv_conda_channel": net.conda_channel if "://" in (net.conda_channel or "")
            else canonical(net.conda_channel),
            **(bundle_vars(net.bundle, net.bundle_sha256, net.bundle_signers) if net.bundle else {}),
        },
        "stack.yml": {"hvd_stack": redact.redact_data(stack), **stack_vars(stack, plan.patches if plan else ()),
                      **(preflight_vars(stack) if plan else {}), **bundled_tarball(stack, net.bundle)},
    }


def scheduler_vars(spec: ClusterSpec) -> dict[str, Any]:
    """hosts.yaml's ``scheduler:`` as the playbooks read it (site.yml runs hvd_slurm only where hvd_scheduler is set)
    and the role variables taken from it; {} without a scheduler."""
    sched = spec.scheduler
    if sched is None:
        return {}
    out = {"hvd_scheduler": {"kind": sched.kind, "controller": sched.controller, "partition": sched.partition,
                             **({"containers": sched.containers} if sched.containers else {})},
           "hvd_slurm_controller": sched.controller, "hvd_slurm_partition": sched.partition,
           "hvd_openmpi_slurm": True}
    for name, source in (("enroot", sched.enroot), ("pyxis", sched.pyxis)):
        prefix = "hvd_pyxis" if name == "pyxis" else "hvd_pyxis_enroot"
        out.update({f"{prefix}_{key}": value for key, value in (source or {}).items()})
    return out


VAR_DOCS.update({
    "hvd_scheduler": "The workload manager (hosts.yaml scheduler): site.yml runs hvd_slurm only where it is set;\n"
    "`hvdcluster run --slurm/--sbatch` launch through it.",
    "hvd_slurm_controller": "= hvd_scheduler.controller: the node that runs slurmctld (and srun/sbatch for `run`).",
    "hvd_slurm_partition": "= hvd_scheduler.partition: the partition every node is in.",
    "hvd_openmpi_slurm": "Open MPI built from source speaks Slurm's PMIx (--with-slurm, Debian's libpmix).",
    "hvd_pyxis_enroot_url": "= scheduler.enroot.url: enroot's release tarball (hvd_pyxis builds it where\n"
    "scheduler.containers is pyxis).",
    "hvd_pyxis_enroot_sha256": "= scheduler.enroot.sha256: that tarball's sha256.",
    "hvd_pyxis_url": "= scheduler.pyxis.url: pyxis's release tarball.",
    "hvd_pyxis_sha256": "= scheduler.pyxis.sha256: that tarball's sha256.",
})


def canonical(path: str | None) -> str:
    """A controller path in one spelling: absolute, every symlink resolved ("" for none). hosts.yaml's paths are
    absolute already (relative ones are taken from its folder), but that folder is spelled as it was reached: through
    a symlink, or relative to wherever `up` was started. The inventory, and so the inputs digest that decides `up`'s
    fast path, must not change with that."""
    return os.path.realpath(path) if path else ""


# The bundle's folders whose files hvd_pyenv is handed (hvd_pyenv_bundle_files).
PYENV_FOLDERS = ("pypi", "wheelhouse", "conda")


def bundle_vars(folder: str, sha256: str | None = None, signers: str | None = None,
                manifest: dict[str, Any] | None = None) -> dict[str, Any]:
    """An offline bundle (network.bundle or ``up --bundle``): hvd_base installs from its apt repository only (pip
    with --no-index); hvd_pyenv is handed the exact files of the bundle's pypi/ (its locked distributions, in the
    index's place), wheelhouse/ (as when it was made: their names are part of the env's key) and conda/ (a conda env's
    locked packages, indexed: the only channel), each with its sha256, from ``manifest`` (default: the one `up`'s
    check authenticated for this folder in this run, bundle.trusted_manifest), never a folder to list; the cache
    entries it carries reach the controller cache in hvd_base."""
    from ..bundle import trusted_manifest

    entries = (manifest or trusted_manifest(folder))["entries"]
    folder = canonical(folder)
    return {"hvd_base_bundle": folder,
            # what the bundle is trusted through, checked again by hvd_base (a hand-run playbook too)
            "hvd_base_bundle_sha256": sha256 or "", "hvd_base_bundle_signers": canonical(signers or ""),
            # the bundle is the only source: no wheelhouse or channel folder besides its listed files
            "hvd_pyenv_wheelhouse": "", "hvd_pyenv_conda_channel": "",
            "hvd_pyenv_bundle_files": [{"src": os.path.join(folder, entry["path"]), "path": entry["path"],
                                        "sha256": entry["sha256"]}
                                       for entry in entries if entry["path"].split("/", 1)[0] in PYENV_FOLDERS]}


def bundled_tarball(stack: dict[str, Any], folder: str | None) -> dict[str, Any]:
    """With an offline bundle, hvd_openmpi builds from the bundle's copy of the Open MPI tarball (`bundle` checked
    it against stack.mpi.sha256, which the role checks again)."""
    url = str((stack.get("mpi") or {}).get("url") or "")
    if not (folder and url and (stack.get("mpi") or {}).get("source") == "source"):
        return {}
    copy = os.path.join(canonical(folder), "openmpi", os.path.basename(url.rstrip("/").split("?", 1)[0]))
    return {"hvd_openmpi_url": copy} if os.path.isfile(copy) else {}


# Resolved stack field -> the role variable that consumes it.
STACK_VARS: dict[tuple[str, ...], str] = {
    ("gpu",): "hvd_gpu",
    ("driver",): "hvd_nvidia_driver_version",
    ("cuda",): "hvd_cuda_version",
    ("cudnn",): "hvd_cudnn_version",
    ("nccl",): "hvd_nccl_version",
    ("gpu_source",): "hvd_gpu_source",
    ("gpu_repo",): "hvd_gpu_repo",
    ("cudnn_source",): "hvd_cudnn_source",
    ("nccl_source",): "hvd_nccl_source",
    ("without_device",): "hvd_nvidia_driver_force",
    ("mpi", "impl"): "hvd_openmpi_impl",
    ("mpi", "version"): "hvd_openmpi_version",
    ("mpi", "source"): "hvd_openmpi_source",
    ("mpi", "url"): "hvd_openmpi_url",
    ("mpi", "sha256"): "hvd_openmpi_sha256",
    ("nccl_tests", "version"): "hvd_nccl_tests_version",
    ("nccl_tests", "url"): "hvd_nccl_tests_url",
    ("nccl_tests", "sha256"): "hvd_nccl_tests_sha256",
    ("python", "manager"): "hvd_pyenv_manager",
    ("python", "version"): "hvd_pyenv_python",
    ("python", "prefix"): "hvd_pyenv_prefix",
    ("python", "packages"): "hvd_pyenv_packages",
    ("python", "environment_file"): "hvd_pyenv_environment_file",
    ("python", "conda_packages"): "hvd_pyenv_conda_packages",
    ("python", "channels"): "hvd_pyenv_channels",
    ("horovod", "version"): "hvd_horovod_version",
    ("horovod", "frameworks"): "hvd_horovod_frameworks",
    ("horovod", "gpu_operations"): "hvd_horovod_gpu_operations",
    ("horovod", "cpu_operations"): "hvd_horovod_cpu_operations",
    ("horovod", "controllers"): "hvd_horovod_controllers",
}


def stack_vars(stack: dict[str, Any], patches: tuple[str, ...] = ()) -> dict[str, Any]:
    """Role variables for a (resolved) stack: only the fields it has."""
    out: dict[str, Any] = {}
    for path, var in STACK_VARS.items():
        value: Any = stack
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None:
            out[var] = value
        if var == "hvd_openmpi_url" and redact.openmpi_url(stack):  # named, never held (hvdcluster.redact)
            out[var] = Expression(f"{{{{ lookup('ansible.builtin.env', '{redact.OPENMPI_URL_ENV}') }}}}")
        if var == "hvd_horovod_version" and value is not None:
            out["hvd_horovod_sdist_sha256"] = sdist_sha256(str(value))
    if patches:
        out["hvd_horovod_patches"] = list(patches)
    from_wheel = "env" in (stack.get("nccl_source"), stack.get("gpu_source"))
    if stack.get("gpu") and from_wheel and (stack.get("horovod") or {}).get("gpu_operations") == "nccl":
        out["hvd_horovod_nccl_link"] = "SHARED"  # NVIDIA's NCCL wheels carry libnccl.so.2 only, no static library
    if stack.get("cuda") and stack.get("gcc"):  # nvcc's host compiler: the gcc the resolver chose for this CUDA
        out["hvd_cuda_host_compiler_packages"] = [f"g++-{stack['gcc']}"]
        out["hvd_cuda_host_cxx"] = f"/usr/bin/g++-{stack['gcc']}"
    return out


VAR_DOCS.update({var: f"= hvd_stack.{'.'.join(path)}" for path, var in STACK_VARS.items()})
VAR_DOCS["hvd_openmpi_url"] = (
    "= hvd_stack.mpi.url. One carrying credentials (a user, a token in its query) is not written here: it is read\n"
    f"from the environment variable {redact.OPENMPI_URL_ENV}, which `hvdcluster up` sets from hosts.yaml (export it "
    "to run\nthe playbook by hand).")
VAR_DOCS["hvd_gpu"] = "= hvd_stack.gpu: false turns the GPU roles (driver, CUDA, cuDNN, NCCL) off."
VAR_DOCS["hvd_horovod_patches"] = "Horovod patches the resolver chose for this stack."
VAR_DOCS["hvd_horovod_sdist_sha256"] = (
    "sha256 of that release's sdist (compat.yaml artifacts), checked before it is unpacked; empty: no pin known."
)
VAR_DOCS["hvd_cuda_host_compiler_packages"] = "= g++-<hvd_stack.gcc>: the host compiler nvcc gets."
VAR_DOCS["hvd_horovod_nccl_link"] = "SHARED where NCCL comes from NVIDIA's wheel (it has no static library)."
VAR_DOCS["hvd_cuda_host_cxx"] = "= /usr/bin/g++-<hvd_stack.gcc> (CUDAHOSTCXX for CUDA builds)."
VAR_DOCS["hvd_preflight_gpu_rules"] = "GPU models -> CUDA and driver limits (version matrix), for hvd_preflight."
VAR_DOCS["hvd_preflight_supported_os"] = "gpu_repo distro: only the OS whose archive's CUDA toolkit the plan took."
VAR_DOCS["hvd_preflight_supported_os_why"] = "Shown with a node the pre-flight refuses for its OS."
VAR_DOCS["hvd_preflight_gcc_max"] = "Newest gcc the planned nvcc accepts (version matrix), for hvd_preflight."
