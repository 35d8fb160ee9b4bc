"""The ``hosts.yaml`` document: its sections (ssh, hosts, stack, network) and the entry points that load it."""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from typing import Any

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ..errors import SpecError
from .conda import _channel, _conda_channel, _conda_spec, _environment_file
from .files import _ca_bundle, _existing_directory, _existing_file, _plain_tarball, _private_key, _tarball
from .hostkeys import _host_key, _known_hosts, _pins, known_hosts_name
from .loader import _SEQ, MAX_FILE_BYTES, FileProblem, _check_expansion, _compose, _Context, read_regular_file
from .model import ClusterSpec, HostSpec, JumpSpec, KnownHostsFile, NetworkSpec, SchedulerSpec, SshSpec
from .names import _address, _address_key, _host_name, _name_for_address
from .schema import (
    _boolean,
    _choice,
    _expect,
    _fields,
    _get,
    _is_null,
    _join,
    _list_of,
    _mapping_node,
    _matching,
    _section,
    _Validator,
)
from .values import (
    _cluster_name,
    _driver_version,
    _env_prefix,
    _port,
    _requirement,
    _sha256,
    _slots,
    _url,
    _user_name,
    _version,
)


# --------------------------------------------------------------------------------------------- entry points


def load(path: str | os.PathLike[str]) -> ClusterSpec:
    """Read and validate a ``hosts.yaml`` file; raise :class:`SpecError` on any mistake."""
    shown = os.fspath(path)
    try:
        data = read_regular_file(shown, MAX_FILE_BYTES)
    except FileProblem as exc:
        raise SpecError(shown, 1, 1, "<file>", str(exc)) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise SpecError(shown, line, column, "<file>", "the file is not valid UTF-8") from None
    return loads(text, shown)


def loads(text: str, path: str = "<string>") -> ClusterSpec:
    """Validate ``hosts.yaml`` text; relative local paths resolve against ``dirname(path)``.

    ``path`` is only used in error messages and for resolving paths (the default resolves them against the
    current directory); nothing is read from it.
    """
    ctx = _Context(path=path, base_dir=os.path.dirname(os.path.abspath(path)))
    if len(text) > MAX_FILE_BYTES:
        raise SpecError(path, 1, 1, "<file>", f"the file is larger than {MAX_FILE_BYTES >> 20} MiB")
    root = _compose(ctx, text)
    _check_expansion(ctx, root)
    return _cluster_spec(ctx, root)


# --------------------------------------------------------------------------------------------- sections


_TOP_KEYS = ("cluster", "ssh", "hosts", "stack", "network", "set_hostname", "scheduler")
_SSH_KEYS = ("user", "port", "identity", "become", "proxy_jump", "known_hosts")
_JUMP_KEYS = ("host", "port", "user", "identity", "host_key")
_HOST_KEYS = ("name", "address", "port", "fabric_address", "fabric_port", "slots", "host_key")
_NETWORK_KEYS = ("ca_bundle", "apt_proxy", "pip_index", "wheelhouse", "conda_channel", "bundle", "bundle_sha256",
                 "bundle_signers")
# With an offline bundle, nodes use nothing else: these would be sources next to it.
NOT_WITH_BUNDLE = ("apt_proxy", "pip_index", "wheelhouse", "conda_channel")

_PYTHON_SCHEMA: dict[str, _Validator] = {
    "manager": _choice("venv", "conda"),
    "version": _version,
    "prefix": _env_prefix,
    "packages": _list_of(_requirement),
    "environment_file": _environment_file,
    "conda_packages": _list_of(_conda_spec, unique=True),
    "channels": _list_of(_channel, unique=True),
}
_python_fields = _section(_PYTHON_SCHEMA)
_CONDA_ONLY = ("environment_file", "conda_packages", "channels")


def _python(ctx: _Context, node: Node, field: str) -> dict[str, Any]:
    """stack.python; the conda fields only with manager: conda."""
    out = _python_fields(ctx, node, field)
    if out.get("manager", "venv") != "conda":
        for key in _CONDA_ONLY:
            if key in out:
                value = _fields(ctx, node, field, _PYTHON_SCHEMA)[key]
                raise ctx.error(value, _join(field, key), "only with manager: conda (this environment is a venv)")
    return out


_stack = _section(
    {
        "driver": _driver_version,
        "cuda": _version,
        "cudnn": _version,
        "nccl": _version,
        "gpu_source": _choice("system", "env"),
        # where the driver and the system CUDA/cuDNN/NCCL packages come from: NVIDIA's repository or the distro's
        # archive (Debian non-free, Ubuntu's -server drivers) (hvd_gpu_repo)
        "gpu_repo": _choice("nvidia", "distro"),
        # the driver on nodes without an NVIDIA device: a golden image being built, CI (hvd_nvidia_driver_force)
        "without_device": _boolean,
        "gcc": _version,
        "mpi": _section(
            {
                "impl": _choice("openmpi"),
                "version": _version,
                "source": _choice("package", "source"),
                "url": _tarball,
                "sha256": _sha256,
            }
        ),
        # NVIDIA's nccl-tests, built where the stack has NCCL (hvd_nccl_tests): the release's tarball (a mirror or a
        # controller path, without credentials) and its sha256
        "nccl_tests": _section({"version": _version, "url": _plain_tarball, "sha256": _sha256}),
        "python": _python,
        "horovod": _section(
            {
                "version": _version,
                "frameworks": _list_of(_choice("pytorch", "tensorflow", "mxnet"), unique=True),
                "gpu_operations": _choice("nccl", "mpi", "none"),
                "cpu_operations": _choice("gloo", "mpi", "ccl"),
                "controllers": _list_of(_choice("mpi", "gloo"), unique=True),
            }
        ),
    }
)


def _proxy_jump(ctx: _Context, node: Node, field: str, user: str, identity: str | None) -> JumpSpec:
    fields = _fields(ctx, node, field, _JUMP_KEYS, required=("host", "host_key"))
    return JumpSpec(
        host=_address(ctx, fields["host"], _join(field, "host")),
        port=_get(ctx, fields, "port", field, _port, 22),
        user=_get(ctx, fields, "user", field, _user_name, user),
        identity=_get(ctx, fields, "identity", field, _private_key, identity),
        host_key=_host_key(ctx, fields["host_key"], _join(field, "host_key")),
    )


def _ssh(ctx: _Context, node: Node, field: str) -> SshSpec:
    fields = _fields(ctx, node, field, _SSH_KEYS)
    user = _get(ctx, fields, "user", field, _user_name, "root")
    identity = _get(ctx, fields, "identity", field, _private_key)
    jump = fields.get("proxy_jump")
    known = _get(ctx, fields, "known_hosts", field, _known_hosts)
    return SshSpec(
        user=user,
        port=_get(ctx, fields, "port", field, _port, 22),
        identity=identity,
        become=_get(ctx, fields, "become", field, _boolean),
        proxy_jump=_proxy_jump(ctx, jump, _join(field, "proxy_jump"), user, identity) if jump is not None else None,
        known_hosts=known.path if known else None,
        known_hosts_file=known,
    )


def _bundle(ctx: _Context, node: Node, field: str) -> str:
    path = _existing_directory(ctx, node, field)
    if not os.path.isfile(os.path.join(path, "manifest.yaml")):
        raise ctx.error(node, field, f"{path} holds no manifest.yaml: make the bundle with `hvdcluster bundle`")
    return path


def _network(ctx: _Context, node: Node, field: str) -> NetworkSpec:
    fields = _fields(ctx, node, field, _NETWORK_KEYS)
    if fields.get("bundle") is not None and not _is_null(fields["bundle"]):
        for key in NOT_WITH_BUNDLE:
            if fields.get(key) is not None and not _is_null(fields[key]):
                raise ctx.error(fields[key], _join(field, key),
                                "not with network.bundle: an offline bundle is the nodes' only source (drop one)")
    return NetworkSpec(
        ca_bundle=_get(ctx, fields, "ca_bundle", field, _ca_bundle),
        apt_proxy=_get(ctx, fields, "apt_proxy", field, _url),
        pip_index=_get(ctx, fields, "pip_index", field, _url),
        wheelhouse=_get(ctx, fields, "wheelhouse", field, _existing_directory),
        conda_channel=_get(ctx, fields, "conda_channel", field, _conda_channel),
        bundle=_get(ctx, fields, "bundle", field, _bundle),
        bundle_sha256=_get(ctx, fields, "bundle_sha256", field, _sha256),
        bundle_signers=_get(ctx, fields, "bundle_signers", field, _existing_file),
    )


_SCHEDULER_KEYS = ("kind", "controller", "partition", "containers", "enroot", "pyxis")
# Container jobs: the releases hvd_pyxis builds, from a tarball only GitHub publishes (a mirror URL or a controller
# path, without credentials: it is written into the inventory) and its sha256 (default: a `git archive` of the tag).
_CONTAINER_SOURCE = _section({"url": _plain_tarball, "sha256": _sha256})
DEFAULT_PARTITION = "hvd"
# A Slurm partition name as hvdcluster writes it into slurm.conf (PartitionName=): a plain word; DEFAULT is Slurm's own
# keyword for the defaults of every partition, not a partition.
_partition_name = _matching(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}",
                            "a partition name (letters, digits, '-' and '_'; at most 63, not starting with '-' or '_')")


def _scheduler(ctx: _Context, node: Node, field: str, hosts: tuple[HostSpec, ...]) -> SchedulerSpec:
    """``scheduler:`` - {kind: slurm, controller: NODE, partition: NAME, containers: pyxis, enroot: SOURCE, pyxis:
    SOURCE}; the controller is a host of this file (default: the first), the partition a plain name (default: hvd);
    container jobs need both releases' tarballs."""
    fields = _fields(ctx, node, field, _SCHEDULER_KEYS, required=("kind",))
    kind = _choice("slurm")(ctx, fields["kind"], _join(field, "kind"))
    names = [host.name for host in hosts]
    controller = _get(ctx, fields, "controller", field, _host_name, names[0])
    if controller not in names:
        close = difflib.get_close_matches(controller, names, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise ctx.error(fields["controller"], _join(field, "controller"),
                        f"'{controller}' is not a host of this file ({hint}hosts: {', '.join(names)})")
    partition = _get(ctx, fields, "partition", field, _partition_name, DEFAULT_PARTITION)
    if partition.lower() == "default":
        raise ctx.error(fields["partition"], _join(field, "partition"),
                        "DEFAULT is Slurm's keyword for every partition's defaults; name the partition (e.g. hvd)")
    containers = _get(ctx, fields, "containers", field, _choice("pyxis"), "")
    sources = {name: _get(ctx, fields, name, field, _CONTAINER_SOURCE) for name in ("enroot", "pyxis")}
    for name, source in sources.items():
        if source is not None and not containers:
            raise ctx.error(fields[name], _join(field, name),
                            "only with scheduler.containers: pyxis (the release enroot and pyxis are built from)")
        if containers and not (source or {}).get("url"):
            raise ctx.error(fields.get(name) or node, _join(_join(field, name), "url"),
                            f"{name} is published only on GitHub: give the release tarball as a mirror URL or a copy on "
                            f"the controller (scheduler.{name}.url; scheduler.{name}.sha256 unless it is a `git "
                            "archive` of the tag)")
    return SchedulerSpec(kind=kind, controller=controller, partition=partition, containers=containers,
                         enroot=sources["enroot"], pyxis=sources["pyxis"])


@dataclass(frozen=True)
class _Origin:
    """Where a host's identifying values were written, for duplicate errors."""

    name: Node  # the name node, or the address node the name was derived from
    address: Node
    fabric: Node  # the fabric_address node, or the address node it defaults to
    fabric_defaulted: bool


def _host(ctx: _Context, node: Node, field: str, default_port: int,
          known: KnownHostsFile | None = None) -> tuple[HostSpec, _Origin]:
    line = node.start_mark.line + 1
    if isinstance(node, ScalarNode):  # shorthand: the address alone
        address = _address(ctx, node, field)
        pins = _pins(ctx, node, field, address, default_port, None, known)
        host = HostSpec(_name_for_address(address), address, default_port, address, default_port, None, line, pins)
        return host, _Origin(node, node, node, True)
    if not isinstance(node, MappingNode):
        raise _expect(ctx, node, field, "an address or a mapping with 'address'")

    fields = _fields(ctx, node, field, _HOST_KEYS, required=("address",))
    name = _get(ctx, fields, "name", field, _host_name)
    address = _address(ctx, fields["address"], _join(field, "address"))
    port = _get(ctx, fields, "port", field, _port, default_port)
    fabric_address = _get(ctx, fields, "fabric_address", field, _address)
    host_key = _get(ctx, fields, "host_key", field, _host_key)
    key_node = fields["host_key"] if host_key is not None else node
    key_field = _join(field, "host_key") if host_key is not None else field
    host = HostSpec(
        name=name or _name_for_address(address),
        address=address,
        port=port,
        fabric_address=fabric_address or address,
        fabric_port=_get(ctx, fields, "fabric_port", field, _port, port),
        slots=_get(ctx, fields, "slots", field, _slots),
        line=line,
        host_keys=_pins(ctx, key_node, key_field, address, port, host_key, known),
    )
    origin = _Origin(
        name=fields["name"] if name else fields["address"],
        address=fields["address"],
        fabric=fields["fabric_address"] if fabric_address else fields["address"],
        fabric_defaulted=not fabric_address,
    )
    return host, origin


def _hosts(ctx: _Context, node: Node, field: str, default_port: int,
           known: KnownHostsFile | None = None) -> tuple[HostSpec, ...]:
    if not isinstance(node, SequenceNode) or node.tag != _SEQ:
        raise _expect(ctx, node, field, "a list of hosts")
    if not node.value:
        raise ctx.error(node, field, "the host list is empty (list at least one host)")
    entries = [_host(ctx, item, f"{field}[{index}]", default_port, known) for index, item in enumerate(node.value)]
    if known is not None and not any(host.host_keys for host, _origin in entries):
        raise SpecError(ctx.path, known.line, known.column, "ssh.known_hosts",
                        f"{known.path} pins no node of this file (its lines are matched by each node's address and "
                        f"port, e.g. {known_hosts_name(entries[0][0].address, entries[0][0].port)})")
    _check_unique_hosts(ctx, entries, field)
    return tuple(host for host, _origin in entries)


def _check_unique_hosts(ctx: _Context, entries: list[tuple[HostSpec, _Origin]], field: str) -> None:
    """Names, controller endpoints (address + port) and fabric addresses must each be unique."""
    names: dict[str, int] = {}
    endpoints: dict[tuple[str, int], int] = {}
    fabrics: dict[str, int] = {}

    def first(seen: int) -> str:
        return f"{field}[{seen}] on line {entries[seen][0].line}"

    for index, (host, origin) in enumerate(entries):
        here = f"{field}[{index}]"
        if (seen := endpoints.setdefault((_address_key(host.address), host.port), index)) != index:
            raise ctx.error(
                origin.address,
                f"{here}.address",
                f"{host.address} port {host.port} is already used by {first(seen)}"
                " (hosts sharing an address need different ports)",
            )
        if (seen := names.setdefault(host.name, index)) != index:
            derived = " (derived from the address: give the host a 'name:')" if origin.name is origin.address else ""
            raise ctx.error(
                origin.name, f"{here}.name", f"duplicate host name '{host.name}'{derived} (first: {first(seen)})"
            )
        if (seen := fabrics.setdefault(_address_key(host.fabric_address), index)) != index:
            hint = (
                "; fabric_address defaults to address: set it to the address the other nodes reach this one at"
                if origin.fabric_defaulted
                else ""
            )
            raise ctx.error(
                origin.fabric,
                f"{here}.fabric_address",
                f"fabric address {host.fabric_address} is already used by {first(seen)}"
                f" (nodes must reach each other at distinct addresses){hint}",
            )


def _cluster_spec(ctx: _Context, root: Node | None) -> ClusterSpec:
    if root is None:
        raise SpecError(ctx.path, 1, 1, "<document>", "the file is empty (expected 'cluster:' and 'hosts:')")
    _mapping_node(ctx, root, "<document>", "a mapping with 'cluster' and 'hosts' at the top level")
    fields = _fields(ctx, root, "", _TOP_KEYS, required=("cluster", "hosts"))
    cluster = _cluster_name(ctx, fields["cluster"], "cluster")
    ssh = _get(ctx, fields, "ssh", "", _ssh, SshSpec())
    hosts = _hosts(ctx, fields["hosts"], "hosts", ssh.port, ssh.known_hosts_file)
    scheduler = fields.get("scheduler")
    return ClusterSpec(
        path=ctx.path,
        cluster=cluster,
        ssh=ssh,
        hosts=hosts,
        stack=_get(ctx, fields, "stack", "", _stack, {}),
        network=_get(ctx, fields, "network", "", _network, NetworkSpec()),
        set_hostname=_get(ctx, fields, "set_hostname", "", _boolean, False),
        scheduler=None if scheduler is None or _is_null(scheduler) else _scheduler(ctx, scheduler, "scheduler", hosts),
        stack_lines={name: line for name, line in ctx.lines.items() if name.startswith("stack.")},
    )
