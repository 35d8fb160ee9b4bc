"""The air-gapped site of the bundle tests (``Gapped``): nodes with no route out, reached through a bastion."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.lab.cluster import remove_lab, wait_for_sshd
from tests.lab.images import IMAGE, LABEL, docker


@dataclass
class Gapped:
    """Bare nodes on a Docker network created `--internal` (no route out), reached only through a bastion that sits
    on that network and on an ordinary one (its SSH published on 127.0.0.1): the air-gapped site of the bundle
    tests. `hosts_yaml` writes a hosts.yaml that reaches the nodes through the bastion (ssh.proxy_jump)."""

    name: str
    nodes: int
    workdir: Path

    @property
    def internal(self) -> str:
        return f"hvdc-{self.name}-internal"

    @property
    def bastion(self) -> str:
        return f"hvdc-{self.name}-bastion"

    def container(self, index: int) -> str:
        return f"hvdc-{self.name}-node{index}"

    @property
    def containers(self) -> list[str]:
        return [self.container(i) for i in range(1, self.nodes + 1)]

    @property
    def key(self) -> Path:
        return self.workdir / "controller_key"

    def down(self) -> None:
        remove_lab(self.name, [self.internal, f"hvdc-{self.name}"])

    def up(self) -> None:
        self.down()
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not self.key.exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key)], check=True)
        pub = self.key.with_suffix(".pub").read_text().strip()
        label = f"{LABEL}={self.name}"
        docker("network", "create", "--label", label, "--internal", self.internal)
        docker("network", "create", "--label", label, f"hvdc-{self.name}")
        for node in self.containers:
            docker("run", "-d", "--name", node, "--hostname", node.rsplit("-", 1)[1], "--label", label,
                   "--network", self.internal, "--shm-size", "512m", "-e", f"SSH_AUTHORIZED_KEY={pub}", IMAGE)
        docker("run", "-d", "--name", self.bastion, "--hostname", "bastion", "--label", label,
               "--network", f"hvdc-{self.name}", "-p", "127.0.0.1::22", "-e", f"SSH_AUTHORIZED_KEY={pub}", IMAGE)
        docker("network", "connect", self.internal, self.bastion)
        for container in [self.bastion, *self.containers]:
            wait_for_sshd(container)

    def hosts_yaml(self, filename: str, stack: dict, network: dict, slots: int = 1) -> Path:
        """A hosts.yaml in the work folder naming every node (by its container name) behind the bastion."""
        port = int(docker("port", self.bastion, "22/tcp").splitlines()[0].rsplit(":", 1)[1])
        host_key = " ".join(docker("exec", self.bastion, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").split()[:2])
        hosts = [f"  - {{name: node{i}, address: {node}, slots: {slots}}}" for i, node in enumerate(self.containers, 1)]
        path = self.workdir / filename
        path.write_text("\n".join([
            f"cluster: {self.name}",
            "ssh:",
            f"  identity: {self.key.name}",
            f"  proxy_jump: {{host: 127.0.0.1, port: {port}, host_key: '{host_key}'}}",
            "hosts:", *hosts,
            f"stack: {json.dumps(stack)}",
            f"network: {json.dumps(network)}", ""]))
        return path

    def sh(self, index: int, script: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["docker", "exec", self.container(index), "sh", "-c", script], capture_output=True,
                              text=True)
