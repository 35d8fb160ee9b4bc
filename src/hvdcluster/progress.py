"""Per-host progress of a run, from ansible-runner events, and the summary at its end.

A :class:`Tracker` turns events into plain state (testable without a terminal); a :class:`Console`
draws it: one live line per node on a terminal, one line per change otherwise.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import asdict, dataclass, field
from collections.abc import Iterable
from typing import IO, Any

from .output import printable
from .runner import Event

WAITING = "waiting-for-ssh"


@dataclass
class Failure:
    host: str
    role: str
    task: str
    message: str
    unreachable: bool = False

    def line(self) -> str:
        where = f"{self.role}: {self.task}" if self.role else self.task
        kind = "unreachable" if self.unreachable else "failed"
        return f"{self.host}: {kind}: {where}: {self.message}"


@dataclass
class HostState:
    name: str
    role: str = ""
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    started: bool = False
    done: bool = False
    failure: Failure | None = None
    # Read back after the converge, it still differs from what it must be (the loop contract, cli.stages.close_loop).
    unrepaired: bool = False
    task: str = ""  # the task it runs now
    task_since: float = 0.0  # when that task started (time.monotonic())

    @property
    def ended_well(self) -> bool:
        """Neither failed, lost nor left differing after the converge (cli.stages.close_loop)."""
        return not (self.failed or self.unreachable or self.unrepaired)

    @property
    def status(self) -> str:
        if self.unreachable:
            return "unreachable"
        if self.failed:
            return "failed"
        if self.unrepaired:
            return "not-repaired"
        if not self.done:
            return f"converging {self.role}".strip() if self.started else WAITING
        return "changed" if self.changed else "up-to-date"

    def counts(self) -> str:
        return f"ok {self.ok}  changed {self.changed}  failed {self.failed}"


def _one_line(text: Any, limit: int = 300) -> str:
    text = " ".join(printable(text, newlines=False).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


_REMOVE_KEY = re.compile(r"ssh-keygen -f \S+ -R \S+")
# What OpenSSH's client itself prints around a command (a key it recorded, the multiplexed connection closing).
_SSH_CLIENT = re.compile(r"\s*(Warning: Permanently added .* to the list of known hosts\."
                         r"|Shared connection to \S+ closed\.)\s*$")


PIN_REFUSED = ("host key is not the one hosts.yaml pins (hosts[].host_key or ssh.known_hosts): refused, possible "
               "man-in-the-middle; if the node was really reinstalled, pin its new key there")


def _explain(message: str, pinned: bool = False) -> str:
    """Turn OpenSSH's multi-line banners into one telling line; ``pinned``: the node's key is pinned in hosts.yaml (so
    forgetting the old key would not help: the pin is written again before every run)."""
    if pinned and ("REMOTE HOST IDENTIFICATION HAS CHANGED" in message or "Host key verification failed" in message):
        return PIN_REFUSED
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in message:
        fix = _REMOVE_KEY.search(message)
        how = f"; if the node was reinstalled, forget the old key: {fix.group(0)}" if fix else ""
        return f"host key changed since it was pinned (refused: possible man-in-the-middle){how}"
    return message


def failure_message(res: dict[str, Any], pinned: bool = False) -> str:
    """The most telling message of a failed task result (loops report per item); ``pinned``: the host's keys are
    pinned in hosts.yaml."""
    if not isinstance(res, dict):
        return _one_line(res)
    for item in res.get("results") or []:
        if isinstance(item, dict) and item.get("failed"):
            return failure_message(item, pinned)
    if str(res.get("msg") or "").startswith("non-zero return code"):
        # A command failed (Ansible's command modules, or hvd_run's "non-zero return code (N)"): its own last words
        # say more than Ansible's summary. Not the SSH client's: a raw command
        # runs on a terminal, so what it printed is in stdout and stderr holds only the client's own lines.
        words = [[line for line in str(res.get(key) or "").splitlines() if line.strip() and not _SSH_CLIENT.match(line)]
                 for key in ("stderr", "stdout")]
        tail = (words[0] or words[1])[-3:]
        if tail:
            return _one_line(f"rc {res.get('rc')}: " + " | ".join(tail))
    for key in ("msg", "stderr", "reason", "module_stderr", "stdout"):
        if res.get(key):
            return _one_line(_explain(str(res[key]).removeprefix("Task failed: "), pinned))
    return "task failed"


# The steps that take minutes, by their task name in the roles, in words (formatted with Tracker.context): while one
# runs the console names it and its age; the summary lists what was built. Others show as "<role>: <task>".
LONG_STEPS = {
    "Build the wheel against the environment (a few minutes)": "building Horovod {horovod} for {framework}",
    "Compile (several minutes)": "building Open MPI {mpi}",
    "Resolve the packages (pip's report of what it would install)": "resolving the env's packages",
    "Install exactly the locked files (hashes required)": "building the env (pip install of the lock)",
    "Solve, lock and install the conda packages with rattler": "building the conda env",
    "Pack the environment": "packing the env",
    "Build the NVIDIA modules with DKMS for each installed kernel that has its headers and lacks them":
        "building the NVIDIA modules (DKMS)",
    "Build the NVIDIA modules for the kernel the node boots next": "building the NVIDIA modules (DKMS)",
    "Install base packages": "installing the base packages (apt)",
    "Install the distro's Open MPI, hold it and keep unattended-upgrades off it (apt only for what dpkg lacks)":
        "installing the distro's Open MPI (apt)",
    "Install the driver packages, pinned to the asked branch or version": "installing the NVIDIA driver {driver}",
    "Install the packages, pinned to the asked version and CUDA build": "installing CUDA packages",
    "Check its sha256, unpack it beside the prefix, mark it with the build key, then swap it in": "unpacking the env",
    "Allreduce over every slot of every node": "proving the cluster (allreduce)",
    "Compile enroot against glibc (a minute)": "building enroot",
    "Compile pyxis against the node's Slurm headers": "building pyxis",
}
# hvd_fanout's look in the controller cache (an entry found valid: nothing built), and its entries' folders in words.
CACHE_LOOK = "Verify the cached artifact (a corrupt or truncated one is removed and built again)"
CACHED = {"envs": "the env", "horovod": "the Horovod wheel", "openmpi": "Open MPI", "nccl-tests": "nccl-tests",
          "pyxis": "enroot and pyxis"}
HEARTBEAT = 30.0  # seconds a step runs before the console names it (and again every HEARTBEAT after)


def stack_context(stack: dict[str, Any]) -> dict[str, str]:
    """The versions a resolved stack names, as the words of a long step use them (Tracker.context)."""
    packages = (stack.get("python") or {}).get("packages") or []
    frameworks = [str(p) for p in packages if str(p).split("==")[0].split(">")[0].strip() in ("torch", "tensorflow")]
    return {"horovod": str((stack.get("horovod") or {}).get("version") or ""),
            "framework": ", ".join(f.replace("==", " ") for f in frameworks) or "its frameworks",
            "mpi": str((stack.get("mpi") or {}).get("version") or ""), "driver": str(stack.get("driver") or "")}


def _age(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


@dataclass
class Tracker:
    hosts: dict[str, HostState] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    # What roles asked the operator to know (set_stats `hvd_notices: {host: [text, ...]}`), e.g. a reboot.
    notices: dict[str, list[str]] = field(default_factory=dict)
    # hvd_preflight's findings (set_stats `hvd_preflight: {host: [{check, severity, found, expected, fix}]}`).
    preflight: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    # Every copy of an artifact (set_stats `hvd_transfers: [{artifact, file, from, to, bytes, ok, why}]`, hvd_fanout).
    transfers: list[dict[str, Any]] = field(default_factory=list)
    # Everything the roles handed over with set_stats (e.g. hvd_bundle's result for `hvdcluster bundle`).
    stats: dict[str, Any] = field(default_factory=dict)
    finished: bool = False
    # The hosts whose keys hosts.yaml pins (inventory.pinned_hosts): a refused key is reported as refused by the pin.
    pinned: frozenset[str] = frozenset()
    # The versions the run's stack names (horovod, torch, mpi, driver...), for the words of a long step.
    context: dict[str, str] = field(default_factory=dict)
    built: list[dict[str, Any]] = field(default_factory=list)  # long steps that ran: {host, what, seconds}
    from_cache: list[str] = field(default_factory=list)  # what was found in the controller cache

    @classmethod
    def for_hosts(cls, names: list[str], pinned: Iterable[str] = ()) -> Tracker:
        return cls(hosts={name: HostState(name) for name in names}, pinned=frozenset(pinned))

    def _host(self, name: str) -> HostState:
        if name not in self.hosts:
            self.hosts[name] = HostState(name)
        return self.hosts[name]

    def handle(self, event: Event) -> set[str]:
        """Apply one event; return the names of the hosts whose line changed."""
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if kind == "playbook_on_stats":
            return self._stats(data)
        host_name = data.get("host")
        if not host_name:
            return set()
        host = self._host(host_name)
        role = data.get("role") or host.role
        if kind == "runner_on_start":
            host.task, host.task_since = str(data.get("task") or ""), time.monotonic()
            if host.started and host.role == role:
                return set()
            host.started, host.role = True, role
            return {host_name}
        host.task = ""
        if kind == "runner_on_ok":
            host.ok += 1
            host.changed += bool((data.get("res") or {}).get("changed"))
            self._note_work(host_name, data)
        elif kind == "runner_on_skipped":
            host.skipped += 1
        elif kind == "runner_on_failed" and not data.get("ignore_errors"):
            host.failed += 1
            self._fail(host, data, unreachable=False)
        elif kind == "runner_on_unreachable":
            host.unreachable += 1
            self._fail(host, data, unreachable=True)
        else:
            return set()
        return {host_name}

    def _note_work(self, host: str, data: dict[str, Any]) -> None:
        """What a run built (a long step that ran, with its seconds) and took from the controller cache."""
        task, res = str(data.get("task") or ""), data.get("res") or {}
        if task in LONG_STEPS and res.get("changed"):
            self.built.append({"host": host, "what": self.label(task), "seconds": float(data.get("duration") or 0)})
        elif task == CACHE_LOOK and res.get("valid"):
            path = str(res.get("path") or "")
            what = next((label for folder, label in CACHED.items() if f"/{folder}/" in path), path.rsplit("/", 1)[-1])
            if what not in self.from_cache:
                self.from_cache.append(what)

    def label(self, task: str) -> str:
        """What a long step does, in words, with the versions the run's stack names (``context``)."""
        template = LONG_STEPS.get(task, "")
        try:
            return template.format(**self.context) if template else task
        except (KeyError, IndexError, ValueError):
            return template

    def long_steps(self, after: float, now: float | None = None) -> list[tuple[str, str, float]]:
        """(host, what it does, seconds) of every host whose task has run longer than ``after`` seconds."""
        now = time.monotonic() if now is None else now
        return [(h.name, self.label(h.task) if h.task in LONG_STEPS else f"{h.role or 'play'}: {h.task}",
                 now - h.task_since) for h in self.hosts.values()
                if h.task and not h.done and now - h.task_since > after]

    def _fail(self, host: HostState, data: dict[str, Any], *, unreachable: bool) -> None:
        failure = Failure(
            host=host.name,
            role=data.get("role") or "",
            task=data.get("task") or "",
            message=failure_message(data.get("res") or {}, host.name in self.pinned),
            unreachable=unreachable,
        )
        if host.failure is None:
            host.failure = failure
            self.failures.append(failure)

    def _stats(self, data: dict[str, Any]) -> set[str]:
        """Ansible's own recap is authoritative for the counts."""
        names = set()
        recap = set().union(*((data.get(key) or {}) for key in ("processed", "ok", "failures", "dark")))
        for key, attr in (("ok", "ok"), ("changed", "changed"), ("failures", "failed"),
                          ("dark", "unreachable"), ("skipped", "skipped")):
            counts = data.get(key) or {}
            for name in recap | set(counts):
                setattr(self._host(name), attr, counts.get(name, 0))
                names.add(name)
        # A task that consulted a peer which was down (ignore_unreachable: a delegated look at the nodes outside the
        # run) sends an unreachable event for the node that asked; the recap does not count it, and neither do we:
        # the node went on converging. The lost peer is named by its own line.
        for host in self.hosts.values():
            failure = host.failure
            if failure is not None and failure.unreachable and not host.unreachable and host.name in recap:
                host.failure = None
                self.failures.remove(failure)
                self.notices.setdefault(host.name, []).append(
                    f"a peer it consulted was unreachable ({failure.role}: {failure.task}); it went on without it")
        for name, texts in ((data.get("artifact_data") or {}).get("hvd_notices") or {}).items():
            self.notices[name] = sorted(set(texts if isinstance(texts, list) else [texts]))
        for name, findings in ((data.get("artifact_data") or {}).get("hvd_preflight") or {}).items():
            if isinstance(findings, list):
                self.preflight[name] = [f for f in findings if isinstance(f, dict)]
        self.stats = dict(data.get("artifact_data") or {})
        copies = self.stats.get("hvd_transfers") or []
        self.transfers = [c for c in copies if isinstance(c, dict)] if isinstance(copies, list) else []
        for host in self.hosts.values():
            host.done = True
        self.finished = True
        return set(self.hosts)

    @property
    def throughput(self) -> dict[str, dict[str, Any]]:
        """The post-flight allreduces' own throughput, per controller (hvd_verify's set_stats `hvd_throughput`)."""
        found = self.stats.get("hvd_throughput")
        return {k: v for k, v in found.items() if isinstance(v, dict) and v} if isinstance(found, dict) else {}

    @property
    def ok(self) -> bool:
        return self.finished and not any(h.failed or h.unreachable or h.unrepaired for h in self.hosts.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "hosts": {
                h.name: {"status": h.status, "ok": h.ok, "changed": h.changed, "failed": h.failed,
                         "unreachable": h.unreachable, "skipped": h.skipped}
                for h in self.hosts.values()
            },
            "failures": [asdict(f) for f in self.failures],
            "notices": self.notices,
            "preflight": self.preflight,
            "transfers": transfer_report(self.transfers),
            "built": self.built,
            "from_cache": self.from_cache,
            "throughput": self.throughput,
        }


class Console:
    """Draws steps, live host lines and the summary to a stream."""

    def __init__(self, stream: IO[str], *, live: bool | None = None) -> None:
        self.stream = stream
        self.live = stream.isatty() if live is None else live
        self._drawn = 0
        self._shown: dict[str, str] = {}
        self._beat: dict[str, float] = {}  # host -> the age of its step when last named
        self._lock = threading.RLock()  # the heartbeat writes from its own thread

    def write(self, text: str = "") -> None:
        with self._lock:
            self.stream.write(printable(text) + "\n")
            self.stream.flush()

    def heartbeat(self, tracker: Tracker, every: float = HEARTBEAT) -> None:
        """Name every step that has run longer than ``every`` seconds with its age, once per ``every`` seconds a host
        (live: the host lines are drawn again with it)."""
        with self._lock:
            due = [(host, what, age) for host, what, age in tracker.long_steps(every)
                   if age - self._beat.get(f"{host}\0{what}", 0.0) >= every]
            for host, what, age in due:
                self._beat[f"{host}\0{what}"] = age
            if not due:
                return
            if self.live:
                self.update(tracker, {host for host, _, _ in due})
                return
            for host, what, age in due:
                self.write(f"  {host}: {what}, {_age(age)}")

    def step(self, number: int, total: int, text: str) -> None:
        self.write(f"[{number}/{total}] {text}")

    def _line(self, host: HostState, width: int, tracker: Tracker | None = None) -> str:
        status = host.status
        if tracker is not None and host.task in LONG_STEPS and not host.done:
            status = f"{tracker.label(host.task)}, {_age(time.monotonic() - host.task_since)}"
        return printable(f"  {host.name:<{width}}  {status:<28}  {host.counts()}", newlines=False)

    def update(self, tracker: Tracker, changed: set[str]) -> None:
        if not changed:
            return
        width = max(len(n) for n in tracker.hosts)
        if not self.live:
            for name in sorted(changed):
                status = tracker.hosts[name].status
                if not tracker.hosts[name].done and self._shown.get(name) != status:
                    self._shown[name] = status
                    self.write(f"  {name}: {status}")
            return
        with self._lock:
            raw = getattr(self.stream, "raw", self.stream)  # our own cursor movements pass; the lines are printable
            if self._drawn:
                raw.write(f"\x1b[{self._drawn}F")
            for host in tracker.hosts.values():
                raw.write("\x1b[2K" + self._line(host, width, tracker) + "\n")
            self._drawn = len(tracker.hosts)
            self.stream.flush()

    def summary(self, tracker: Tracker, log: str) -> None:
        self._drawn = 0
        width = max([len("HOST")] + [len(n) for n in tracker.hosts])
        self.write()
        self.write(f"  {'HOST':<{width}}  {'STATUS':<12}  {'OK':>4}  {'CHANGED':>7}  {'FAILED':>6}  "
                   f"{'UNREACHABLE':>11}  {'SKIPPED':>7}")
        for h in tracker.hosts.values():
            self.write(f"  {h.name:<{width}}  {h.status:<12}  {h.ok:>4}  {h.changed:>7}  {h.failed:>6}  "
                       f"{h.unreachable:>11}  {h.skipped:>7}")
        if tracker.failures:
            self.write()
            self.write("Failures:")
            for failure in tracker.failures:
                self.write(f"  {failure.line()}")
        findings = [f for name in sorted(tracker.preflight) for f in tracker.preflight[name]]
        if findings:
            self.write()
            self.write("Pre-flight findings:")
            for f in findings:
                self.write(f"  {f.get('severity', '').upper():4}  {f.get('host')}  {f.get('check')}: found {f.get('found')}; "
                           f"expected {f.get('expected')}; fix: {f.get('fix')}")
        if tracker.built or tracker.from_cache:
            self.write()
            for item in tracker.built:
                self.write(f"  built: {item['what']} on {item['host']} ({_age(item['seconds'])})")
            if tracker.from_cache:
                self.write(f"  taken from the controller cache: {', '.join(tracker.from_cache)}")
        if tracker.transfers:
            self.write()
            self.write(transfer_line(transfer_report(tracker.transfers)))
        if tracker.throughput:
            self.write()
            self.write("Post-flight allreduce throughput (bus bandwidth as nccl-tests defines it):")
            for controller, figures in sorted(tracker.throughput.items()):
                self.write(f"  {throughput_line(controller, figures)}")
        if tracker.notices:
            self.write()
            self.write("Notices:")
            for name, texts in sorted(tracker.notices.items()):
                for text in texts:
                    self.write(f"  {name}: {text}")
        self.write()
        self.write(f"Full log: {log}")


CONTROLLER = "controller"


def throughput_line(controller: str, figures: dict[str, Any]) -> str:
    """One controller's post-flight figures: `gloo: 4 ranks, 16 MiB in host memory, busbw 0.61 GB/s (algbw 0.41)`."""
    where = "in GPU memory" if figures.get("device") in ("cuda", "gpu") else "in host memory"
    return (f"{controller}: {figures.get('ranks')} ranks, {_size(int(figures.get('bytes') or 0))} {where}, "
            f"busbw {float(figures.get('busbw_gbs') or 0):.2f} GB/s (algbw {float(figures.get('algbw_gbs') or 0):.2f})")


def transfer_report(copies: list[dict[str, Any]]) -> dict[str, Any]:
    """What a run carried: bytes the controller sent to nodes, bytes moved node to node, and every copy."""
    def total(peer: bool) -> int:
        return sum(int(c.get("bytes") or 0) for c in copies if (c.get("from") != CONTROLLER) == peer)

    return {"controller_bytes": total(False), "peer_bytes": total(True),
            "bad_copies": sum(1 for c in copies if not c.get("ok")), "copies": copies}


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    value, unit = float(count), "B"
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024:
            break
    return f"{value:.1f} {unit}"


def transfer_line(report: dict[str, Any]) -> str:
    copies = report["copies"]
    line = (f"Artifacts: the controller sent {_size(report['controller_bytes'])}, nodes passed on "
            f"{_size(report['peer_bytes'])} ({len(copies)} cop{'y' if len(copies) == 1 else 'ies'}")
    if report["bad_copies"]:
        line += f", {report['bad_copies']} failed their sha256 or pull and were fetched again"
    return line + ")"
