"""A local container cluster for the demo and the tests (``Lab``): bare Debian 12 nodes with sshd.

Each node is a container on a user-defined Docker network, reachable from the others by its container name (its
fabric address) and from this machine over SSH on 127.0.0.1:<published port> (its management address), exactly as a
real cluster has a management and a fabric network. ``remove_lab`` and ``wait_for_sshd`` serve the air-gapped site
(gapped.py) too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.lab.images import IMAGE, LABEL, docker, host_ca_bundle
from tests.lab.stacks import TORCH


@dataclass
class Lab:
    name: str
    nodes: int
    workdir: Path
    slots: int | None = None  # hvd_slots of every node
    # hosts.yaml `stack`; by default the PyTorch CPU build this machine's wheelhouse carries
    stack: dict = field(default_factory=lambda: {"python": {"packages": [TORCH]}})
    network: dict = field(default_factory=dict)  # hosts.yaml `network` (ca_bundle, wheelhouse added when found)
    # Per node (1-based): extra `docker run` arguments, another hostname, another fabric_port in hosts.yaml.
    docker_args: dict[int, list[str]] = field(default_factory=dict)
    hostnames: dict[int, str] = field(default_factory=dict)
    fabric_ports: dict[int, int] = field(default_factory=dict)
    shm_size: str = "512m"  # NCCL/Gloo need more than Docker's 64 MiB (hvd_preflight checks it)
    shm_sizes: dict[int, str] = field(default_factory=dict)
    # The account hosts.yaml logs in as. Not root: a user with passwordless sudo is made on every node first
    # (as a cloud image has one), and root's login key is moved to it.
    user: str = "root"
    wheelhouse: bool = True  # offer this machine's wheelhouse (PIP_FIND_LINKS) to the nodes
    image: str = IMAGE  # the nodes' image: the bare node, or PACKAGED_IMAGE
    ports: dict[int, int] = field(default_factory=dict)  # per node: its published SSH port (default: Docker's pick)
    subnet: str = ""
    ips: dict[int, str] = field(default_factory=dict)
    images: dict[int, str] = field(default_factory=dict)  # per node, in place of ``image``
    scheduler: dict = field(default_factory=dict)  # hosts.yaml `scheduler` ({kind: slurm, ...}); {}: none

    @property
    def docker_network(self) -> str:
        return f"hvdc-{self.name}"

    def container(self, index: int) -> str:
        return f"hvdc-{self.name}-node{index}"

    @property
    def node_names(self) -> list[str]:
        return [f"node{i}" for i in range(1, self.nodes + 1)]

    @property
    def key(self) -> Path:
        return self.workdir / "controller_key"

    @property
    def hosts_yaml(self) -> Path:
        return self.workdir / "hosts.yaml"

    def down(self) -> None:
        """Remove this lab's containers and network, whatever state they are in."""
        remove_lab(self.name, [self.docker_network])

    def up(self) -> Path:
        """Fresh nodes and a matching hosts.yaml; returns the hosts.yaml path."""
        self.down()
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not self.key.exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"hvdc-lab-{self.name}",
                            "-f", str(self.key)], check=True)
        self._start(self.key.with_suffix(".pub").read_text().strip())
        if self.user != "root":
            for i in range(1, self.nodes + 1):
                self.add_sudo_user(i)
        self.write_hosts_yaml()
        return self.hosts_yaml

    def _start(self, authorized_key: str) -> None:
        """This lab's network and nodes, as its fields say; waits for every sshd."""
        subnet = ["--subnet", self.subnet] if self.subnet else []
        docker("network", "create", "--label", f"{LABEL}={self.name}", *subnet, self.docker_network)
        for i, node in enumerate(self.node_names, 1):
            address = ["--ip", self.ips[i]] if i in self.ips else []
            docker("run", "-d", "--name", self.container(i), "--hostname", self.hostnames.get(i, node),
                   "--label", f"{LABEL}={self.name}", "--network", self.docker_network, *address,
                   "--shm-size", self.shm_sizes.get(i, self.shm_size), "-p", f"127.0.0.1:{self.ports.get(i, '')}:22",
                   "-e", f"SSH_AUTHORIZED_KEY={authorized_key}", *self.docker_args.get(i, []),
                   self.images.get(i, self.image))
        self.wait_for_ssh()

    def add_sudo_user(self, index: int) -> None:
        """A login user with passwordless sudo, holding the controller's key (root's is removed)."""
        user = self.user
        script = (
            "set -e; export DEBIAN_FRONTEND=noninteractive; "
            "apt-get update -qq && apt-get install -y -qq --no-install-recommends sudo >/dev/null; "
            f"id {user} >/dev/null 2>&1 || useradd -m -s /bin/bash {user}; "
            f"echo '{user} ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/90-{user}; chmod 0440 /etc/sudoers.d/90-{user}; "
            f"install -d -m 0700 -o {user} -g {user} /home/{user}/.ssh; "
            f"install -m 0600 -o {user} -g {user} /root/.ssh/authorized_keys /home/{user}/.ssh/authorized_keys; "
            ": > /root/.ssh/authorized_keys"
        )
        proc = self.exec(index, "sh", "-c", script)
        if proc.returncode != 0:
            raise RuntimeError(f"{self.container(index)}: making user {user} failed: {proc.stderr[-2000:]}")

    def port(self, index: int) -> int:
        return int(docker("port", self.container(index), "22/tcp").splitlines()[0].rsplit(":", 1)[1])

    def write_hosts_yaml(self) -> None:
        lines = [
            f"# Local container cluster {self.name!r} (tests/lab): controller -> 127.0.0.1:<port>,",
            "# node -> node by container name on a private Docker network.",
            f"cluster: {self.name}",
            f"ssh: {{user: {self.user}, identity: {self.key.name}}}",
            "hosts:",
        ]
        slots = f", slots: {self.slots}" if self.slots else ""
        for i, node in enumerate(self.node_names, 1):
            lines.append(f"  - {{name: {node}, address: 127.0.0.1, port: {self.port(i)}, "
                         f"fabric_address: {self.container(i)}, fabric_port: {self.fabric_ports.get(i, 22)}{slots}}}")
        network = dict(self.network)
        ca = host_ca_bundle()
        if ca:
            network.setdefault("ca_bundle", ca)
        wheels = os.environ.get("PIP_FIND_LINKS", "")
        if self.wheelhouse and wheels and Path(wheels).is_dir():  # a local wheelhouse (here: the CPU build of PyTorch)
            network.setdefault("wheelhouse", wheels)
        if self.stack:
            lines.append(f"stack: {json.dumps(self.stack)}")
        if network:
            lines.append(f"network: {json.dumps(network)}")
        if self.scheduler:
            lines.append(f"scheduler: {json.dumps(self.scheduler)}")
        self.hosts_yaml.write_text("\n".join(lines) + "\n")

    def wait_for_ssh(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        for i in range(1, self.nodes + 1):
            wait_for_sshd(self.container(i), deadline - time.monotonic())

    def stop(self, index: int) -> None:
        docker("stop", "-t", "1", self.container(index))

    def start(self, index: int) -> None:
        """Start a stopped node again; its published port may change, so hosts.yaml is rewritten."""
        docker("start", self.container(index))
        self.write_hosts_yaml()
        self.wait_for_ssh()

    def timed_up(self, cache: Path, *args: str) -> tuple[float, dict]:
        """`hvdcluster up hosts.yaml --json ARGS` with the controller cache ``cache``: its wall seconds and summary
        (the benchmarks' figure); a failed run exits naming the lab."""
        env = {**os.environ, "HVDCLUSTER_CACHE": str(cache)}
        start = time.monotonic()
        proc = subprocess.run([str(Path(sys.executable).parent / "hvdcluster"), "up", "hosts.yaml", "--json", *args],
                              cwd=self.workdir, env=env, capture_output=True, text=True)
        seconds = time.monotonic() - start
        if proc.returncode != 0:
            sys.exit(f"up failed on {self.name} (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
        return seconds, json.loads(proc.stdout)

    def kernels(self, index: int) -> list[str]:
        """The kernel images a node holds (from /boot's vmlinuz-* names: what its boot loader could start)."""
        return self.exec(index, "sh", "-c", "ls /boot | sed -n 's/^vmlinuz-//p'").stdout.split()

    def exec(self, index: int, *command: str, user: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run a command in a node's container (as root, or as ``user``)."""
        who = ["-u", user] if user else []
        return subprocess.run(["docker", "exec", *who, self.container(index), *command], capture_output=True, text=True)



def remove_lab(name: str, networks: list[str]) -> None:
    """Remove the containers labelled with this lab's name and its networks, whatever state they are in."""
    ids = docker("ps", "-aq", "--filter", f"label={LABEL}={name}").split()
    if ids:
        docker("rm", "-f", *ids)
    for network in networks:  # by id: a name that two concurrent creations both took is ambiguous to `rm NAME`
        for ident in docker("network", "ls", "-q", "--filter", f"name=^{network}$").split():
            docker("network", "rm", ident, check=False)


def wait_for_sshd(container: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while subprocess.run(["docker", "exec", container, "sh", "-c",
                          "test -s /etc/ssh/ssh_host_ed25519_key.pub && pgrep -x sshd"], capture_output=True).returncode:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{container}: sshd did not start")
        time.sleep(0.3)
