"""Node host keys in the inventory's ssh/known_hosts: the pins from hosts.yaml written before any contact, and
which nodes a run trusted on first use."""

from __future__ import annotations

from pathlib import Path

from ..spec import ClusterSpec, host_matches, known_hosts_name
from .yamlio import _write

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
