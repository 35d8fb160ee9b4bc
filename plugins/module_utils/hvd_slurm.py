"""Slurm as hvdcluster reads it: a node's record (``scontrol -o show node``), who took it out of service and why, and
which of those hvdcluster may put back. Shared by the state reader (slurm_state below, what `check`
names), hvd_slurm's resume step (plugins/filter/hvd_slurm.py) and the CLI (src/hvdcluster). Standard library only.

Slurm keeps one reason per node with the user who set it: ``Reason=<text> [<user>@<time>]``. Reasons slurmctld sets
itself (a node not responding, one that registered with less memory than slurm.conf says) carry the SlurmUser;
hvdcluster's own begin with ``hvdcluster `` (a roll: ``hvdcluster roll <id>``, a failed health check:
``hvdcluster health: <item>``); anything else is an operator's, and hvdcluster never touches it.
"""

from __future__ import annotations

import glob
import os
import re

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import ABSENT, LINE_KEPT, file_d16, read_text, under

SLURM_USER = "slurm"  # the SlurmUser hvd_slurm writes into slurm.conf (Debian's packages make this account)
OURS = "hvdcluster "  # the start of every reason hvdcluster drains a node with
HEALTH_REASON = "hvdcluster health: "  # `hvdcluster health --drain`: a node whose health failed, with the first item
MAX_REASON = 120  # characters of a reason kept (node-supplied text, bounded)

_REASON = re.compile(r"^(?P<text>.*?)\s*\[(?P<user>[^\]@\s]+)@(?P<time>[^\]]*)\]\s*$")
# States that keep a node from running jobs, as scontrol prints them (joined with '+': IDLE+DRAIN, DOWN*).
DOWN_WORDS = ("DOWN", "FAIL", "NOT_RESPONDING", "INVALID", "UNKNOWN")


def fields(line: str) -> dict[str, str]:
    """``scontrol -o show node``'s one line as its fields. Reason, the last field, keeps its spaces; its text and the
    user who set it are ``Reason`` and ``ReasonUser`` (the time is left out: it changes nothing about the node)."""
    head, found, reason = line.partition(" Reason=")
    if not found and line.startswith("Reason="):
        head, reason = "", line[len("Reason="):]
    out = dict(word.split("=", 1) for word in head.split() if "=" in word)
    if reason:
        match = _REASON.match(reason.strip())
        out["Reason"] = (match.group("text") if match else reason).strip()[:MAX_REASON]
        if match:
            out["ReasonUser"] = match.group("user")[:40]
    return out


def states(record: dict[str, str]) -> list[str]:
    """The node's state words (``IDLE+DRAIN`` -> [IDLE, DRAIN]; a trailing ``*``, not responding, is a word too)."""
    state = record.get("State", "")
    words = [w for w in re.split(r"[+]", state.rstrip("*~#!%$@^-")) if w]
    return words + (["NOT_RESPONDING"] if state.endswith("*") else [])


def by_whom(record: dict[str, str], slurm_user: str = SLURM_USER) -> str:
    """Who set the node's reason: "hvdcluster", "slurm" (slurmctld itself) or "operator"; "" without a reason."""
    reason, user = record.get("Reason", ""), record.get("ReasonUser", "")
    if not reason:
        return ""
    if reason.startswith(OURS):
        return "hvdcluster"
    return "slurm" if user == slurm_user else "operator"


def judge(record: dict[str, str], slurm_user: str = SLURM_USER) -> tuple[str, str]:
    """(``slurm.node``, ``slurm.drain``) for a node's record.

    ``slurm.node`` is "ok" while the node can run jobs or is only drained by someone (hvdcluster, an operator), else
    what keeps it out and who said so: "down: <reason> (set by slurm)", "drained by Slurm itself: <reason>".
    ``slurm.drain`` is "absent" unless a person or hvdcluster drained the node: "<reason> (set by <user>)", a notice
    (an operator's drain is theirs to lift; hvdcluster lifts its own)."""
    words = states(record)
    reason = record.get("Reason", "") or "no reason given"
    who = by_whom(record, slurm_user)
    user = record.get("ReasonUser", "") or "?"
    down = [w for w in words if w in DOWN_WORDS]
    if down:
        return f"{'+'.join(down).lower()}: {reason} (set by {user})", "absent"
    if "DRAIN" in words or "DRAINING" in words or "DRAINED" in words:
        if who == "slurm":
            return f"drained by Slurm itself: {reason}", "absent"
        return "ok", f"{reason} (set by {user})"
    return "ok", "absent"


def resumable(lines: list[str], names: list[str], slurm_user: str = SLURM_USER) -> list[str]:
    """Of the nodes ``names``, those Slurm itself took out of service (down or drained with a reason its SlurmUser set,
    or without a reason): what a converge that just (re)configured or started them puts back. A node drained or taken
    down by an operator, or by hvdcluster (a roll, a failed health check), is never among them."""
    out = []
    for line in lines:
        record = fields(line.strip())
        name = record.get("NodeName", "")
        if name not in names or name in out:
            continue
        words = states(record)
        out_of_service = any(w in ("DOWN", "FAIL") or w.startswith("DRAIN") for w in words)
        if out_of_service and by_whom(record, slurm_user) in ("slurm", ""):
            out.append(name)
    return out


def unregistered(lines: list[str], names: list[str]) -> list[str]:
    """Of the nodes ``names``, those slurmctld has not heard from: missing from ``scontrol -o show node``'s
    ``lines``, unknown (never registered) or not responding."""
    seen = {}
    for line in lines:
        record = fields(line.strip())
        if record.get("NodeName"):
            seen[record["NodeName"]] = states(record)
    return [name for name in names if name not in seen
            or any(w in ("UNKNOWN", "NOT_RESPONDING") for w in seen[name])]


# ------------------------------------------------------------------------------------------ Slurm

SLURM_FILES = ("slurm.conf", "cgroup.conf", "gres.conf")  # hvd_slurm's, in /etc/slurm
SLURM_TIMEOUT = 10
# What scontrol says when slurmctld could not verify this node's munge credential, or this node slurmctld's: their
# munge keys differ (or their clocks, by more than munge's TTL).
MUNGE_REFUSED = ("Zero Bytes were transmitted or received", "authentication error", "Protocol authentication error",
                 "Invalid credential")


def _run(argv: list[str], stdin: bytes | None = None) -> tuple[int | None, str]:
    """(exit status, output with errors) of ``argv``; status None when it could not run or took too long."""
    import subprocess

    try:
        proc = subprocess.run(argv, input=stdin if stdin is not None else b"", stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=SLURM_TIMEOUT, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"{argv[0]}: {exc}"
    return proc.returncode, proc.stdout.decode("utf-8", "replace")


def _said(text: str) -> str:
    """A program's words, as an item holds them: the first non-empty line, printable, bounded."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "") or "no output"
    return "".join(c if c.isprintable() else "?" for c in line)[:LINE_KEPT]


def processes(root: str, names: tuple[str, ...]) -> dict[str, list[str]]:
    """The processes named one of ``names`` on the node: name -> their /proc/<pid> folders (/proc/<pid>/comm, readable
    by every user)."""
    found: dict[str, list[str]] = {}
    for comm in glob.glob(os.path.join(glob.escape(under(root, "/proc")), "[0-9]*", "comm")):
        name = (read_text(comm) or "").strip()
        if name in names:
            found.setdefault(name, []).append(os.path.dirname(comm))
    return found


# Slurm's mpi/pmix plugin loads PMIx by the path it was built with, unversioned (<dir>/lib/libpmix.so, a string in the
# plugin): Debian ships that link in libpmix-dev, not in the runtime libpmix2. Without it slurmd cannot make its PMIx
# context and every `srun --mpi=pmix` step times out launching on the node.
PMIX_PLUGINS = ("/usr/lib/*/slurm-wlm/mpi_pmix*.so", "/usr/lib*/slurm/mpi_pmix*.so")
_PMIX_LIBDIR = re.compile(rb"(/[\w./+-]*pmix[\w./+-]*/lib)\x00")


def _started(root: str, folders: list[str]) -> float | None:
    """When the earliest of the processes in ``folders`` (their /proc/<pid>) started, in seconds since the epoch
    (/proc/<pid>/stat and /proc/stat's btime); None where /proc says nothing."""
    btime = re.search(r"^btime (\d+)$", read_text(under(root, "/proc/stat")) or "", re.M)
    ticks = []
    for folder in folders:
        stat = (read_text(os.path.join(folder, "stat")) or "").rpartition(")")[2].split()
        if len(stat) > 19 and stat[19].isdigit():
            ticks.append(int(stat[19]))  # field 22, starttime: clock ticks after boot
    if not btime or not ticks:
        return None
    return int(btime.group(1)) + min(ticks) / os.sysconf("SC_CLK_TCK")


def pmix_state(root: str, slurmd: list[str] | None = None) -> str:
    """``slurm.pmix``: "ok" where every PMIx library Slurm's mpi/pmix plugins load is there and slurmd (``slurmd``:
    its /proc/<pid> folders, default: read here) started after it was installed; else what is wrong; "absent"
    without the plugin."""
    plugins = sorted({path for pattern in PMIX_PLUGINS for path in glob.glob(under(root, pattern))})
    if not plugins:
        return ABSENT
    started = _started(root, processes(root, ("slurmd",)).get("slurmd", []) if slurmd is None else slurmd)
    for lib in sorted({m.group(1).decode() + "/libpmix.so" for plugin in plugins
                       for m in _PMIX_LIBDIR.finditer(_read_bytes(plugin))}):
        try:
            installed = os.lstat(under(root, lib)).st_ctime  # the link itself: when its package put it there
        except OSError:
            return f"{lib} missing: Slurm's mpi/pmix cannot load PMIx, srun --mpi=pmix fails here (Debian: libpmix-dev)"
        if started is not None and started < installed - 1:
            return f"slurmd started before {lib} was installed: it has no PMIx until it is started again"
    return "ok"


def _read_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def slurm_state(root: str, role: str, run=_run, hostname: str = "") -> dict:
    """Where the cluster runs under Slurm (``role``: "controller" on the node that runs slurmctld, else "node"):

    - ``slurm.config.<file>``: d16 of hvd_slurm's /etc/slurm/slurm.conf, cgroup.conf and gres.conf.
    - ``slurm.slurmd`` and, on the controller, ``slurm.slurmctld``: "running" or "not running".
    - ``slurm.pmix``: whether `srun --mpi=pmix` can start ranks here (:func:`pmix_state`).
    - ``slurm.munge``: "ok" when the node's munged encodes and decodes a credential and slurmctld accepts this node's
      (the node asks it for its own record, below), else what fails. The key itself is munge's alone (0400): it is
      judged by what it does, never read.
    - ``slurm.node`` and ``slurm.drain``: the node as slurmctld has it (plugins/module_utils/hvd_slurm.py's judge):
      "ok", or down or drained by Slurm itself, and why; "absent", or an operator's or hvdcluster's drain, its reason
      and who set it (a notice).
    """
    from ansible_collections.hvd.cluster.plugins.module_utils import hvd_slurm  # noqa: PLC0415 - only under Slurm

    out = {f"slurm.config.{name}": file_d16(under(root, f"/etc/slurm/{name}")) for name in SLURM_FILES}
    daemons = ("slurmd", "slurmctld") if role == "controller" else ("slurmd",)
    up = processes(root, daemons)  # one walk of /proc for both
    out.update({f"slurm.{name}": "running" if name in up else "not running" for name in daemons})
    out["slurm.pmix"] = pmix_state(root, up.get("slurmd", []))
    out["slurm.drain"] = ABSENT
    rc, cred = run(["munge", "-n"])
    if rc == 0:
        rc, said = run(["unmunge"], stdin=cred.encode())
    else:
        said = cred
    if rc != 0:
        out["slurm.munge"] = f"munged does not answer: {_said(said)}"
        out["slurm.node"] = "not read: munged does not answer"
        return out
    import socket  # noqa: PLC0415 - only under Slurm

    name = hostname or socket.gethostname().split(".", 1)[0]
    rc, said = run(["scontrol", "-o", "show", "node", name])
    if rc == 0:
        out["slurm.munge"] = "ok"
        out["slurm.node"], out["slurm.drain"] = hvd_slurm.judge(hvd_slurm.fields(said.strip().splitlines()[0]))
    elif any(words in said for words in MUNGE_REFUSED):
        out["slurm.munge"] = ("the Slurm controller refuses this node's munge credentials: its munge key is not the "
                              f"controller's ({_said(said)})")
        out["slurm.node"] = "not read: munge refused"
    elif "not found" in said:
        out["slurm.munge"] = "ok"
        out["slurm.node"] = f"not in the controller's slurm.conf as {name}: {_said(said)}"
    else:
        out["slurm.munge"] = "not judged: the Slurm controller did not answer"
        out["slurm.node"] = f"cannot reach the Slurm controller: {_said(said)}"
    return out
