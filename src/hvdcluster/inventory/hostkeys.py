"""Node host keys in the inventory's ssh/known_hosts: the pins from hosts.yaml written before any contact, and
which nodes a run trusted on first use."""

from __future__ import annotations

from pathlib import Path

from ..errors import HvdError
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


def _keys(path: Path, name: str) -> list[str]:
    """The keys (``<type> <base64>``) the known_hosts file ``path`` holds for ``name`` (ssh would not trust a new one
    on first use where there is one)."""
    found = []
    for line in _known_lines(path):
        fields = line.split()
        if len(fields) >= 3 and not fields[0].startswith(("#", "@")) and host_matches(fields[0], name):
            found.append(f"{fields[1]} {fields[2]}")
    return found


def _nodes(root: Path) -> dict[str, tuple[str, bool]]:
    """The rendered inventory's nodes: name -> (their known_hosts name, whether their keys are pinned)."""
    from .files import read  # noqa: PLC0415 - files imports this module

    try:
        hosts = read(root).hosts
    except HvdError:
        return {}
    return {name: (known_hosts_name(str(v.get("ansible_host") or name), int(v.get("ansible_port") or 22)),
                   bool(v.get("hvd_host_keys"))) for name, v in hosts.items()}


def first_use_hosts(root: Path) -> list[str]:
    """The nodes of the inventory at ``root`` whose next contact trusts whatever key they show: no pin in hosts.yaml
    (hvd_host_keys), and no key recorded in its ssh/known_hosts yet. Asked before a run (see
    :func:`trusted_on_first_use`)."""
    path = root / "ssh" / KNOWN_HOSTS
    return [name for name, (known, pinned) in _nodes(root).items() if not pinned and not _keys(path, known)]


def trusted_on_first_use(root: Path, unknown_before: list[str] | tuple[str, ...]) -> list[str]:
    """What to print after a run (any command that reached nodes, behind a bastion or not) that recorded the key of a
    node of ``unknown_before`` (:func:`first_use_hosts`, asked before it): a line naming them, then for each the
    ``host_key:`` line to write under that host in hosts.yaml; [] when there are none."""
    path = root / "ssh" / KNOWN_HOSTS
    nodes = _nodes(root)
    learned = {name: keys for name in unknown_before if name in nodes and not nodes[name][1]
               and (keys := _keys(path, nodes[name][0]))}
    if not learned:
        return []
    lines = [f"trusted on first use (no pinned host key): {', '.join(learned)}: their keys are recorded in {path}; "
             "to check them from the start, pin each in hosts.yaml (hosts[].host_key, or ssh.known_hosts):"]
    lines += [f"  {name}: host_key: {key}" for name, keys in learned.items() for key in keys[:1]]
    return lines
