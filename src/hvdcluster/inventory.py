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
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .compat import Plan, preflight_vars, sdist_sha256
from .errors import HvdError
from .spec import ClusterSpec, host_matches, known_hosts_name

GROUP = "hvd_nodes"
GROUP_VAR_TITLES = {
    "cluster.yml": "Cluster settings",
    "ssh.yml": "SSH settings",
    "network.yml": "Network settings",
    "stack.yml": "Software stack",
}

BASTION_KNOWN_HOSTS = "bastion_known_hosts"  # in <inventory>/ssh/: the bastion's pinned key, from hosts.yaml

# A path goes through up to four readers on its way into ssh, each with its own syntax, so it is quoted for each, in
# order, after Ansible has templated inventory_dir into it (never before: a quote in the folder's name would end it):
#   1. ssh's option parser splits a value at spaces and reads quotes and backslashes: the path is written as one
#      double-quoted word, `\` and `"` escaped; ssh then expands %-tokens in it: `%` is doubled (ssh_word);
#   2. ProxyCommand is run by a shell: each argument is shell-quoted (Ansible's `quote`, Python's shlex.quote);
#   3. ssh expands %-tokens in ProxyCommand (%h, %p): every `%` of ours is doubled once more;
#   4. Ansible splits ansible_ssh_common_args like a shell (shlex): each -o value is shell-quoted as a whole.
# So a folder named `it's $HOME 100% mine` works. Written with Jinja's own filters, so a hand-written inventory needs
# nothing of hvdcluster's.


_JINJA_BACKSLASH = "('%c' | format(92))"  # no backslash literal: Ansible versions differ in how they read one in Jinja


def _jinja_ssh_word(path: str) -> str:
    """Jinja: the path expression ``path`` as one word of an ssh option (reader 1)."""
    bs = _JINJA_BACKSLASH
    return f"""'"' ~ ({path}) | replace({bs}, {bs} ~ {bs}) | replace('"', {bs} ~ '"') | replace('%', '%%') ~ '"'"""


# How the controller checks node host keys (ours, templated by Ansible on purpose: the one value written without
# !unsafe): against ssh/known_hosts beside the inventory; a node with pinned keys (hvd_host_keys, from hosts.yaml,
# written there before any contact) strictly, any other by recording its key on first contact (accept-new). A key
# other than the recorded one is refused either way; checking is never off.
SSH_COMMON_ARGS = (
    "-o StrictHostKeyChecking={{ 'yes' if hvd_host_keys | default([]) else 'accept-new' }} "
    "-o {{ ('UserKnownHostsFile=' ~ " + _jinja_ssh_word("inventory_dir ~ '/ssh/known_hosts'") + ") | quote }}"
)
# Through the bastion (hvd_ssh_proxy_jump): ssh to it, checking its key against ssh/bastion_known_hosts only.
PROXY_COMMAND_ARG = (
    "-o {{ ('ProxyCommand=ssh -W %h:%p ' ~ (['-p', hvd_ssh_proxy_jump.port | string, '-o', 'BatchMode=yes', "
    "'-o', 'StrictHostKeyChecking=yes', '-o', 'UserKnownHostsFile=' ~ "
    + _jinja_ssh_word(f"inventory_dir ~ '/ssh/{BASTION_KNOWN_HOSTS}'") + "]"
    " + (['-o', 'IdentityFile=' ~ " + _jinja_ssh_word("hvd_ssh_proxy_jump.identity") + "]"
    " if hvd_ssh_proxy_jump.identity else [])"
    " + [hvd_ssh_proxy_jump.user ~ '@' ~ hvd_ssh_proxy_jump.host]) | map('quote') | map('replace', '%', '%%')"
    " | join(' ')) | quote }}"
)


def ssh_word(value: str) -> str:
    """``value`` as one word of an OpenSSH option (``-o Key=VALUE`` or a config line): double-quoted with ``\\`` and
    ``"`` escaped, ``%`` doubled (ssh expands %-tokens in file names and commands)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%") + '"'


def known_hosts_pattern(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


def bastion_argv(jump: dict[str, Any], ssh_dir: str, *options: str) -> list[str]:
    """ssh to the bastion ``jump`` (host, port, user, identity): its host key is checked against
    ``<ssh_dir>/bastion_known_hosts`` only, and never learnt (StrictHostKeyChecking=yes). An argv (no shell); any
    folder name works."""
    argv = ["ssh", *options, "-p", str(jump["port"]), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
            "-o", "UserKnownHostsFile=" + ssh_word(f"{ssh_dir}/{BASTION_KNOWN_HOSTS}")]
    if jump.get("identity"):  # not -i, which looks for the file before expanding %-tokens in its name
        argv += ["-o", "IdentityFile=" + ssh_word(str(jump["identity"]))]
    return [*argv, f"{jump['user']}@{jump['host']}"]


def proxy_command(jump: dict[str, Any], ssh_dir: str) -> str:
    """OpenSSH's ProxyCommand through the bastion ``jump`` (the value of ``-o ProxyCommand=``): each argument
    shell-quoted, then every ``%`` of ours doubled (ssh expands %h and %p in it before a shell runs it)."""
    argv = bastion_argv(jump, ssh_dir)
    return "ssh -W %h:%p " + " ".join(shlex.quote(arg).replace("%", "%%") for arg in argv[1:])


def bastion_problem(jump: dict[str, Any], ssh_dir: str, timeout: float = 20) -> str:
    """Why the bastion cannot be used ("" when a login to it works): what ssh said, in one line."""
    import subprocess

    argv = bastion_argv(jump, ssh_dir, "-o", f"ConnectTimeout={int(timeout)}")
    try:
        proc = subprocess.run([*argv, "true"], capture_output=True, text=True, timeout=timeout + 10, check=False)
    except (OSError, subprocess.SubprocessError) as err:
        return f"cannot run ssh: {err}"
    if proc.returncode == 0:
        return ""
    text = proc.stderr
    where = f"the bastion {jump['host']}:{jump['port']}"
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in text or "Host key verification failed" in text:
        return (f"{where} presented a host key other than ssh.proxy_jump.host_key in hosts.yaml (refused: possible "
                "man-in-the-middle); check the bastion's key with its operator (ssh-keyscan) and correct host_key")
    last = [line for line in text.splitlines() if line.strip()][-1:] or [f"ssh exited {proc.returncode}"]
    return f"{where} refused or failed the login ({last[0].strip()})"


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
    "hvd_pyenv_index_wheels": "The bundle's locked distributions, offered to pip in the index's place.",
    "hvd_base_bundle_sha256": "The pinned sha256 of the bundle's manifest.yaml (network.bundle_sha256).",
    "hvd_base_bundle_signers": "OpenSSH allowed-signers file for the bundle's signature (network.bundle_signers).",
    "hvd_stack": "The software stack: hosts.yaml's, completed by the resolver (`hvdcluster plan` says why).\n"
    "The role variables below are taken from it.",
}


@dataclass(frozen=True)
class Inventory:
    """A rendered inventory read back: host -> its variables, and the variables of every host."""

    path: Path
    hosts: dict[str, dict[str, Any]]
    vars: dict[str, Any]


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


# ------------------------------------------------------------------------------------------ node host keys
# ssh/known_hosts beside the inventory is what the controller checks node keys against (ansible_ssh_common_args,
# `run`, `plan --probe`). A node whose keys hosts.yaml pins gets exactly those keys there, written by render before any
# contact, and is checked strictly; any other node's key is recorded there by ssh on first contact (accept-new).

KNOWN_HOSTS = "known_hosts"  # in <inventory>/ssh/


def pinned_keys(spec: ClusterSpec) -> dict[str, tuple[str, ...]]:
    """known_hosts name ("addr" or "[addr]:port") -> the keys hosts.yaml pins for it."""
    return {known_hosts_name(h.address, h.port): h.host_keys for h in spec.hosts if h.host_keys}


def pinned_hosts(spec: ClusterSpec) -> list[str]:
    """The nodes whose host keys hosts.yaml pins (hosts[].host_key or ssh.known_hosts)."""
    return [h.name for h in spec.hosts if h.host_keys]


def _known_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="surrogateescape").splitlines()
    except FileNotFoundError:
        return []


def _unpinned_line(line: str, names: set[str]) -> str | None:
    """A known_hosts line with the names in ``names`` taken out of it (None: nothing of it is left), so that no key
    but the pinned ones is accepted for them: exact names dropped, a wildcard that still matches one negated
    (``10.0.0.*,!10.0.0.1``), a hashed name that is one of them dropped with its line. ``@revoked`` lines stay."""
    fields = line.split()
    if not fields or fields[0].startswith("#") or fields[0] == "@revoked":
        return line
    marker = f"{fields[0]} " if fields[0].startswith("@") else ""
    patterns, tail = fields[1 if marker else 0], " ".join(fields[2 if marker else 1:])
    if not any(host_matches(patterns, name) for name in names):
        return line
    if patterns.startswith("|"):
        return None
    kept = [p for p in patterns.split(",") if p.lower() not in names]
    kept += sorted(f"!{name}" for name in names if host_matches(",".join(kept), name))
    if not any(p and not p.startswith("!") for p in kept):
        return None
    return f"{marker}{','.join(kept)} {tail}"


def write_pins(spec: ClusterSpec, ssh_dir: Path) -> None:
    """Put the pinned node keys into ``<ssh_dir>/known_hosts`` (before any contact): every other key for a pinned node's
    name is taken out, its pinned keys added; keys recorded on first contact for the other nodes are kept."""
    pins = pinned_keys(spec)
    if not pins:
        return
    path = ssh_dir / KNOWN_HOSTS
    lines = [kept for line in _known_lines(path) if (kept := _unpinned_line(line, set(pins))) is not None]
    lines += [f"{name} {key}" for name, keys in pins.items() for key in keys]
    _write(path, "".join(f"{line}\n" for line in lines), private=True)


def _known(path: Path, name: str) -> bool:
    """Whether the known_hosts file ``path`` holds a key for ``name`` (ssh would not trust a new one on first use)."""
    for line in _known_lines(path):
        fields = line.split()
        if len(fields) >= 3 and not fields[0].startswith(("#", "@")) and host_matches(fields[0], name):
            return True
    return False


def first_use_hosts(spec: ClusterSpec, root: Path) -> list[str]:
    """The nodes whose next contact trusts whatever key they show: no pin in hosts.yaml, and no key recorded in the
    inventory's ssh/known_hosts yet. Ask after rendering and before the run (see :func:`trusted_on_first_use`)."""
    path = root / "ssh" / KNOWN_HOSTS
    return [h.name for h in spec.hosts if not h.host_keys and not _known(path, known_hosts_name(h.address, h.port))]


def trusted_on_first_use(spec: ClusterSpec, root: Path, unknown_before: list[str] | tuple[str, ...],
                         *, bastion_only: bool = True) -> str:
    """The line to print after a run that reached nodes through a bastion (ssh.proxy_jump) without pinned keys:
    "trusted on first use (no pinned host key): node1, node2" naming those of ``unknown_before`` (from
    :func:`first_use_hosts`, asked before the run) whose key the run recorded; "" when there are none, or without a
    bastion unless ``bastion_only`` is False."""
    if bastion_only and spec.ssh.proxy_jump is None:
        return ""
    path = root / "ssh" / KNOWN_HOSTS
    by_name = {h.name: h for h in spec.hosts}
    trusted = [name for name in unknown_before if name in by_name and not by_name[name].host_keys
               and _known(path, known_hosts_name(by_name[name].address, by_name[name].port))]
    if not trusted:
        return ""
    return (f"trusted on first use (no pinned host key): {', '.join(trusted)} (their keys are now recorded in "
            f"{path}; pin them with hosts[].host_key or ssh.known_hosts in hosts.yaml to check them from the start)")


def members(spec: ClusterSpec) -> list[dict[str, Any]]:
    """Every member in inventory order, as the roles use it: name, fabric address, the SSH port the other nodes
    use, slots. The rules of filter_plugins/hvd_cluster.py, which derives the same list from the host variables
    of a hand-written inventory: fabric = hvd_fabric_address, else ansible_host, else the name; port =
    hvd_fabric_port, else ansible_port, else 22; slots = hvd_slots, else None: one per GPU the node reports
    (ansible_local.hvd_nvidia_driver.gpu_count), else 1, decided where the GPUs are known."""
    out = []
    for name, entry in host_vars(spec).items():
        out.append({
            "name": name,
            "fabric": entry.get("hvd_fabric_address") or entry.get("ansible_host") or name,
            "port": int(entry.get("hvd_fabric_port") or entry.get("ansible_port") or 22),
            "slots": int(entry["hvd_slots"]) if entry.get("hvd_slots") else None,
        })
    return out


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
    jump = spec.ssh.proxy_jump
    if jump is not None:
        ssh["hvd_ssh_proxy_jump"] = {"host": jump.host, "port": jump.port, "user": jump.user,
                                     "identity": canonical(jump.identity)}
        ssh["ansible_ssh_common_args"] = f"{SSH_COMMON_ARGS} {PROXY_COMMAND_ARG}"
    ssh["hvd_ssh_mesh_user"] = spec.ssh.user
    net = spec.network
    return {
        "cluster.yml": {"hvd_cluster_name": spec.cluster, "hvd_set_hostname": spec.set_hostname,
                        "hvd_members": members(spec)},
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
        "stack.yml": {"hvd_stack": stack, **stack_vars(stack, plan.patches if plan else ()),
                      **(preflight_vars(stack) if plan else {}), **bundled_tarball(stack, net.bundle)},
    }


def canonical(path: str | None) -> str:
    """A controller path in one spelling: absolute, every symlink resolved ("" for none). hosts.yaml's paths are
    absolute already (relative ones are taken from its folder), but that folder is spelled as it was reached: through
    a symlink, or relative to wherever `up` was started. The inventory, and so the inputs digest that decides `up`'s
    fast path, must not change with that."""
    return os.path.realpath(path) if path else ""


def bundle_vars(folder: str, sha256: str | None = None, signers: str | None = None) -> dict[str, Any]:
    """An offline bundle (network.bundle or ``up --bundle``): hvd_base installs from its apt repository only (pip
    with --no-index), hvd_pyenv is offered its wheelhouse (as when it was made: part of the env's key) and its
    locked distributions in the index's place; the cache entries it carries reach the controller cache in hvd_base."""
    folder = canonical(folder)
    wheelhouse = os.path.join(folder, "wheelhouse")
    conda = os.path.join(folder, "conda")
    return {"hvd_base_bundle": folder,
            # what the bundle is trusted through, checked again by hvd_base (a hand-run playbook too)
            "hvd_base_bundle_sha256": sha256 or "", "hvd_base_bundle_signers": canonical(signers or ""),
            "hvd_pyenv_wheelhouse": wheelhouse if os.path.isdir(wheelhouse) and os.listdir(wheelhouse) else "",
            "hvd_pyenv_index_wheels": os.path.join(folder, "pypi"),
            # a conda env's locked packages, indexed: the only channel
            "hvd_pyenv_conda_channel": conda if os.path.isdir(conda) else ""}


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
    ("mpi", "impl"): "hvd_openmpi_impl",
    ("mpi", "version"): "hvd_openmpi_version",
    ("mpi", "source"): "hvd_openmpi_source",
    ("mpi", "url"): "hvd_openmpi_url",
    ("mpi", "sha256"): "hvd_openmpi_sha256",
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
        if var == "hvd_horovod_version" and value is not None:
            out["hvd_horovod_sdist_sha256"] = sdist_sha256(str(value))
    if patches:
        out["hvd_horovod_patches"] = list(patches)
    if stack.get("cuda") and stack.get("gcc"):  # nvcc's host compiler: the gcc the resolver chose for this CUDA
        out["hvd_cuda_host_compiler_packages"] = [f"g++-{stack['gcc']}"]
        out["hvd_cuda_host_cxx"] = f"/usr/bin/g++-{stack['gcc']}"
    return out


VAR_DOCS.update({var: f"= hvd_stack.{'.'.join(path)}" for path, var in STACK_VARS.items()})
VAR_DOCS["hvd_gpu"] = "= hvd_stack.gpu: false turns the GPU roles (driver, CUDA, cuDNN, NCCL) off."
VAR_DOCS["hvd_horovod_patches"] = "Horovod patches the resolver chose for this stack."
VAR_DOCS["hvd_horovod_sdist_sha256"] = (
    "sha256 of that release's sdist (compat.yaml artifacts), checked before it is unpacked; empty: no pin known."
)
VAR_DOCS["hvd_cuda_host_compiler_packages"] = "= g++-<hvd_stack.gcc>: the host compiler nvcc gets."
VAR_DOCS["hvd_cuda_host_cxx"] = "= /usr/bin/g++-<hvd_stack.gcc> (CUDAHOSTCXX for CUDA builds)."
VAR_DOCS["hvd_preflight_gpu_rules"] = "GPU models -> CUDA and driver limits (version matrix), for hvd_preflight."
VAR_DOCS["hvd_preflight_gcc_max"] = "Newest gcc the planned nvcc accepts (version matrix), for hvd_preflight."


class Unsafe(str):
    """A string Ansible must never template: written as ``!unsafe '...'``."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(Unsafe, lambda dumper, value: dumper.represent_scalar("!unsafe", str(value), style="'"))

_BARE_WORD = re.compile(r"[A-Za-z0-9_.+-]*")  # no Jinja delimiter can be spelled with these


def data_only(value: Any) -> Any:
    """``value`` with every string that is not a bare word marked :class:`Unsafe` (lists and dicts walked)."""
    if isinstance(value, str) and not isinstance(value, Unsafe) and not _BARE_WORD.fullmatch(value):
        return Unsafe(value)
    if isinstance(value, dict):
        return {key: data_only(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [data_only(item) for item in value]
    return value


class _Reader(yaml.SafeLoader):
    """Reads what :func:`render` writes: ``!unsafe`` values are plain data."""


def _construct_unsafe(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]


_Reader.add_constructor("!unsafe", _construct_unsafe)

# Not from hosts.yaml: our templated SSH arguments and the matrix's pre-flight rules, written plain.
_OURS = ("ansible_ssh_common_args", "hvd_preflight_gpu_rules", "hvd_preflight_gcc_max")


def _dump(value: Any) -> str:
    return yaml.dump(value, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)


def _commented(mapping: dict[str, Any]) -> str:
    parts = []
    for key, value in mapping.items():
        doc = VAR_DOCS.get(key)
        if doc:
            parts.append("".join(f"# {line}\n" for line in doc.splitlines()))
        parts.append(_dump({key: value if key in _OURS else data_only(value)}))
    return "".join(parts)


_NOT_IN_A_COMMENT = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _header(spec: ClusterSpec, what: str) -> str:
    # The file's name only: the path it was reached by (the folder `up` ran from, a symlink) is spelling, not meaning,
    # and would change the inventory and its inputs digest. A name must not end the comment line.
    source = _NOT_IN_A_COMMENT.sub("?", os.path.basename(spec.path) or spec.path)
    return (
        f"# {what} of cluster {spec.cluster!r}, generated by hvdcluster from {source}.\n"
        "# Plain YAML: readable and editable. `hvdcluster inventory` rewrites this file; put your own\n"
        "# overrides in another file of group_vars/all/.\n"
    )


def render(spec: ClusterSpec, out_dir: str | os.PathLike[str], plan: Plan | None = None) -> Path:
    """Write ``<out_dir>/<cluster>/`` and return its path."""
    root = Path(out_dir) / spec.cluster
    (root / "group_vars" / "all").mkdir(parents=True, exist_ok=True)
    (root / "ssh").mkdir(mode=0o700, exist_ok=True)
    os.chmod(root / "ssh", 0o700)
    jump = spec.ssh.proxy_jump
    if jump is not None:  # the bastion's own key, as hosts.yaml pins it; never learnt on first contact
        _write(root / "ssh" / BASTION_KNOWN_HOSTS, f"{known_hosts_pattern(jump.host, jump.port)} {jump.host_key}\n")
    write_pins(spec, root / "ssh")

    hosts_doc = {"all": {"children": {GROUP: {"hosts": data_only(host_vars(spec))}}}}
    _write(root / "hosts.yml", _header(spec, "Nodes") + "---\n" + HOST_VAR_DOC + _dump(hosts_doc))
    for name, mapping in group_vars(spec, plan).items():
        _write(root / "group_vars" / "all" / name, _header(spec, GROUP_VAR_TITLES[name]) + "---\n" + _commented(mapping),
               private=name in PRIVATE_FILES)
    return root


# Files that can carry credentials (a proxy or index URL with a user and password, an Open MPI or installer URL with a
# token): readable by their owner only.
PRIVATE_FILES = ("network.yml", "stack.yml")


def _write(path: Path, text: str, private: bool = False) -> None:
    """Write ``text`` to ``path`` atomically: a new file beside it, then a rename, so a reader sees the old file or the
    new one, never a part. ``private``: mode 0600 from the moment the file exists, whatever the umask (else the
    umask's 0666)."""
    mode = 0o600 if private else 0o666
    if path.is_file() and not path.is_symlink() and path.read_text() == text:
        if private and path.stat().st_mode & 0o077:
            os.chmod(path, 0o600)
        return
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), mode)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            if private:
                os.fchmod(fh.fileno(), 0o600)
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read(path: str | os.PathLike[str]) -> Inventory:
    """Read an inventory folder written by :func:`render` (or by hand in the same shape)."""
    root = Path(path)
    doc = _load(root / "hosts.yml")
    hosts = doc.get("all", {}).get("children", {}).get(GROUP, {}).get("hosts", {}) or {}
    variables: dict[str, Any] = {}
    for file in sorted((root / "group_vars" / "all").glob("*.yml")):
        variables.update(_load(file))
    return Inventory(path=root, hosts={name: dict(v or {}) for name, v in hosts.items()}, vars=variables)


def _load(file: Path) -> dict[str, Any]:
    """One inventory file as a mapping; a broken or hand-mangled file is one line naming it (exit 2)."""
    try:
        with open(file, encoding="utf-8") as fh:
            doc = yaml.load(fh, Loader=_Reader) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f":{mark.line + 1}:{mark.column + 1}"
        reason = getattr(exc, "strerror", None) or getattr(exc, "problem", None) or str(exc)
        raise HvdError(f"{file}{where}: cannot read the inventory: {reason}") from None
    if not isinstance(doc, dict):
        raise HvdError(f"{file}: cannot read the inventory: expected a mapping at the top")
    return doc
