"""The validated ``hosts.yaml``: frozen dataclasses, every default already applied."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class JumpSpec:
    """A bastion the controller reaches every node through (``ssh.proxy_jump``)."""

    host: str  # how the controller reaches the bastion (IP or DNS name)
    port: int
    user: str
    identity: str | None  # the bastion's login key; None: ssh's defaults (agent, ~/.ssh)
    host_key: str  # "<type> <base64>": the bastion's own pinned host key


@dataclass(frozen=True)
class KnownHost:
    """One line of an OpenSSH known_hosts file."""

    marker: str  # "", "@revoked" or "@cert-authority"
    patterns: str  # host patterns as written ("a,[b]:2222,!c", "10.0.0.*") or one hashed name ("|1|salt|hash")
    key: str  # "<type> <base64>"
    line: int


@dataclass(frozen=True)
class KnownHostsFile:
    """``ssh.known_hosts``, read: where it is, its lines, and where hosts.yaml names it (for errors)."""

    path: str
    entries: tuple[KnownHost, ...]
    line: int
    column: int


@dataclass(frozen=True)
class SshSpec:
    """How the controller logs in to every node."""

    user: str = "root"
    port: int = 22  # default port for hosts that give none
    identity: str | None = None  # absolute path of an existing private key file
    become: bool | None = None  # None: derived, ``user != "root"`` (always a bool after construction)
    proxy_jump: JumpSpec | None = None  # reach the nodes only through this bastion
    known_hosts: str | None = None  # a known_hosts file pinning node host keys (absolute path; see HostSpec.host_keys)
    known_hosts_file: KnownHostsFile | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.become is None:
            object.__setattr__(self, "become", self.user != "root")


@dataclass(frozen=True)
class HostSpec:
    """One node. Every default is already applied."""

    name: str  # inventory name: a lower-case RFC 1123 hostname
    address: str  # how the controller reaches it (IP or DNS name)
    port: int  # controller's SSH port to it
    fabric_address: str  # how nodes reach each other
    fabric_port: int  # SSH port nodes use to reach it
    slots: int | None  # processes on this node; None: detected later
    line: int  # 1-based line in hosts.yaml where this host entry starts
    # The node's pinned host keys ("<type> <base64>"): its host_key, else the keys ssh.known_hosts holds for its
    # address and port. The controller then accepts no other key, from the first contact on; (): trusted on first use.
    host_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class NetworkSpec:
    """Corporate-network settings; every path is absolute and exists."""

    ca_bundle: str | None = None
    apt_proxy: str | None = None
    pip_index: str | None = None
    wheelhouse: str | None = None
    conda_channel: str | None = None  # a conda mirror (URL) or a local indexed channel folder: the only channel
    bundle: str | None = None  # an offline bundle folder (hvdcluster bundle): nodes install from it only
    bundle_sha256: str | None = None  # the sha256 of the bundle's manifest.yaml (its pin; or bundle_signers)
    bundle_signers: str | None = None  # an OpenSSH allowed-signers file: who may sign a bundle's manifest.yaml


@dataclass(frozen=True)
class SchedulerSpec:
    """The workload manager the cluster runs under (``scheduler:``): hvd_slurm installs and keeps it."""

    kind: str  # "slurm"
    controller: str  # the host (its name in hosts.yaml) that runs slurmctld
    partition: str  # the partition every node is in, and jobs go to
    # Container jobs (``containers: pyxis``): enroot and pyxis built by hvd_pyxis from these release tarballs
    # ({url, sha256?}: a mirror URL or a controller path; sha256 defaults to the pinned `git archive` one).
    containers: str = ""
    enroot: dict[str, str] | None = None
    pyxis: dict[str, str] | None = None


@dataclass(frozen=True)
class ClusterSpec:
    """A validated ``hosts.yaml``."""

    path: str  # the hosts.yaml path as given
    cluster: str
    ssh: SshSpec
    hosts: tuple[HostSpec, ...]
    stack: dict[str, Any]  # only the keys the user wrote; versions as strings
    network: NetworkSpec
    set_hostname: bool = False
    scheduler: SchedulerSpec | None = None  # None: no scheduler; `run` launches with horovodrun over SSH
    # hosts.yaml line of each value written under ``stack`` ("stack.cuda", "stack.python.packages[0]"), so the
    # resolver can point at the line of a conflicting choice. Not part of the spec's value (compare=False).
    stack_lines: dict[str, int] = field(default_factory=dict, compare=False, repr=False)
