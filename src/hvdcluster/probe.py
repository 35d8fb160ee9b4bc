"""A read-only look at the nodes for the resolver (``hvdcluster plan --probe``): OS, kernel, gcc, python,
GPU models and the loaded NVIDIA driver, over SSH with paramiko.

Host keys are pinned exactly as the playbook runs pin them: in ``<inventory>/ssh/known_hosts``, a key seen
for the first time is recorded, a changed key is refused. Nothing is written on the nodes.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .compat import NodeInfo
from .errors import HvdError
from .spec import ClusterSpec, HostSpec

# One shell line, each answer tagged; a missing tool leaves its tag empty.
COMMAND = "; ".join([
    ". /etc/os-release 2>/dev/null; echo \"os=$ID $VERSION_ID\"",
    "echo \"kernel=$(uname -r)\"",
    "echo \"gcc=$(gcc -dumpfullversion 2>/dev/null || gcc -dumpversion 2>/dev/null)\"",
    "echo \"python=$(python3 -c 'import platform; print(platform.python_version())' 2>/dev/null)\"",
    "nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sed 's/^/gpu=/'",
    "sed -n 's/.*Kernel Module[^0-9]*\\([0-9][0-9.]*\\).*/driver=\\1/p' /proc/driver/nvidia/version 2>/dev/null",
    "true",
])


@dataclass(frozen=True)
class NodeFacts:
    host: str
    os_id: str = ""
    os_version: str = ""
    kernel: str = ""
    gcc: str = ""
    python: str = ""
    gpus: tuple[str, ...] = ()
    driver_loaded: str = ""


MAX_OUTPUT = 1 << 20  # what is read of a node's answer: a few hundred bytes are expected
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def parse(host: str, text: str) -> NodeFacts:
    """The facts in a node's answer; control characters (a terminal escape, say) are dropped from each value."""
    values: dict[str, str] = {}
    gpus: list[str] = []
    for line in text.splitlines():
        key, _, value = line.partition("=")
        value = _CONTROL.sub("", value).strip()[:200]
        if key == "gpu" and value:
            gpus.append(value)
        elif key in ("os", "kernel", "gcc", "python", "driver") and value:
            values[key] = value
    os_id, _, os_version = values.get("os", "").partition(" ")
    return NodeFacts(host, os_id, os_version, values.get("kernel", ""), values.get("gcc", ""),
                     values.get("python", ""), tuple(gpus), values.get("driver", ""))


def merge(facts: list[NodeFacts]) -> NodeInfo:
    """One NodeInfo for the resolver; nodes that disagree on what a build depends on are refused."""
    if not facts:
        return NodeInfo()
    for field in ("os_id", "os_version", "gcc", "python"):
        seen = {getattr(f, field) for f in facts if getattr(f, field)}
        if len(seen) > 1:
            listing = ", ".join(f"{f.host}: {getattr(f, field) or '-'}" for f in facts)
            raise HvdError(f"nodes differ in {field.replace('_', ' ')} ({listing}): one build serves every node, "
                           "so converge them to one OS image first")
    first = facts[0]
    gpus = tuple(dict.fromkeys(g for f in facts for g in f.gpus))
    driver = next((f.driver_loaded for f in facts if f.driver_loaded), None)
    return NodeInfo(os_id=first.os_id or None, os_version=first.os_version or None, kernel=first.kernel or None,
                    gcc=first.gcc or None, python=first.python or None, gpus=gpus, driver_loaded=driver)


def _known_hosts_policy(path: Path) -> object:
    import paramiko

    class AcceptNew(paramiko.MissingHostKeyPolicy):
        """OpenSSH's StrictHostKeyChecking=accept-new: record an unknown key; a changed key never gets here
        (paramiko raises BadHostKeyException for it)."""

        def missing_host_key(self, client, hostname, key):  # noqa: ANN001
            client.get_host_keys().add(hostname, key.get_name(), key)
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with path.open("a") as handle:
                handle.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")

    return AcceptNew()


def probe_host(host: HostSpec, cluster: ClusterSpec, known_hosts: Path, timeout: float = 15) -> NodeFacts:
    import paramiko

    client = paramiko.SSHClient()
    if known_hosts.is_file():
        client.load_host_keys(str(known_hosts))
    client.set_missing_host_key_policy(_known_hosts_policy(known_hosts))
    try:
        client.connect(host.address, port=host.port, username=cluster.ssh.user, key_filename=cluster.ssh.identity,
                       timeout=timeout, banner_timeout=timeout, auth_timeout=timeout,
                       look_for_keys=cluster.ssh.identity is None, allow_agent=cluster.ssh.identity is None)
        _, stdout, _ = client.exec_command(f"sh -c {shlex.quote(COMMAND)}", timeout=timeout)
        text = stdout.read(MAX_OUTPUT).decode(errors="replace")
    except paramiko.BadHostKeyException as err:
        raise HvdError(f"{host.name} ({host.address}:{host.port}): host key changed since it was pinned in "
                       f"{known_hosts}; if the node was reinstalled, remove the old key "
                       f"(ssh-keygen -f {known_hosts} -R '[{host.address}]:{host.port}')") from err
    except (paramiko.SSHException, OSError) as err:
        raise HvdError(f"{host.name} ({host.address}:{host.port}): cannot probe over SSH: {err}") from err
    finally:
        client.close()
    return parse(host.name, text)


def probe(cluster: ClusterSpec, known_hosts: Path,
          probe_one: Callable[[HostSpec, ClusterSpec, Path], NodeFacts] = probe_host) -> tuple[NodeInfo, list[NodeFacts]]:
    facts = [probe_one(host, cluster, known_hosts) for host in cluster.hosts]
    return merge(facts), facts


def describe(facts: NodeFacts) -> str:
    gpus = ", ".join(f"{n}x {g}" for g, n in _count(facts.gpus)) or "no GPU"
    return (f"{facts.host}: {facts.os_id} {facts.os_version}, kernel {facts.kernel or '?'}, gcc {facts.gcc or '-'}, "
            f"python {facts.python or '-'}, {gpus}" + (f", driver {facts.driver_loaded}" if facts.driver_loaded else ""))


def _count(items: tuple[str, ...]) -> list[tuple[str, int]]:
    out: dict[str, int] = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return list(out.items())

