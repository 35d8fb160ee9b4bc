"""`hvdcluster health --full` and `up --accept`: nccl-tests over the cluster's own mpirun, judged against floors derived
from the links found on the nodes, and the culprit of a failing run found by pairs, then halves.

- ``settings_from(args)``: ``--size``, ``--collectives`` and the overrides checked before any node is contacted (a bad
  one is one line, exit 2).
- ``links_of(reading)``: one node's links from its health reading (plugins/modules/hvd_health_read.py), for
  plugins/module_utils/hvd_bandwidth.py's ``run_floor`` (every floor row there has its source).
- ``command(...)``: the shell the first node of a run executes over SSH (launch.ssh_argv, pinned host keys): the
  roles' /etc/profile.d/hvd-*.sh, then ``mpirun`` (the one hvd_openmpi put on a non-interactive SSH command's PATH)
  with one rank per GPU (``-H node:gpus``, ``-g 1``), ``NCCL_DEBUG=INFO`` (subsystems INIT and NET: the network and
  every channel's transport), sizes from 8 bytes doubling up to ``--size`` (``-b 8 -e SIZE -f 2``).
- ``Meter``: runs and judges one run (its findings: the largest size's busbw against the run's own floor, the
  transport NCCL used, a failed run, wrong values); runs of disjoint node sets go at once (a round).
- ``culprit.find_culprit(nodes, judge_round)``: pure; the bisection (src/hvdcluster/culprit.py).
- ``assess(...)``: the whole of `--full`: every collective over every node with a GPU, the culprit when one fails, a
  verdict per node (what health records for `run`'s gate), and every measurement for ``--json``.

nccl-tests is installed by hvd_nccl_tests at ``hvd_nccl_tests_prefix`` (default /opt/hvd/nccl-tests): bin/<name>_perf.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_bandwidth, hvd_fabric, hvd_health, hvd_health_gpu
from ansible_collections.hvd.cluster.plugins.module_utils import hvd_members as member_rules

from .culprit import find_culprit
from .errors import HvdError
from .output import fold

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
DEFAULT_COLLECTIVES = "all_reduce"
DEFAULT_SIZE = "1G"
MIN_SIZE, MAX_SIZE = 8, 64 << 30
NCCL_TESTS_PREFIX = "/opt/hvd/nccl-tests"  # hvd_nccl_tests_prefix when the inventory sets none
RUN_SECONDS = 900  # one mpirun at most (the node's timeout(1)); the controller waits a minute more
NCCL_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}
OUTPUT_KEPT = 20000  # characters of a run's output kept for --json (its end: the table and the errors)
_SIZE = re.compile(r"^(\d+)([KMG]?)$", re.I)
_TRANSPORT = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")


# --------------------------------------------------------------------------------------------- the arguments


@dataclass(frozen=True)
class Settings:
    """What a --full run measures and how it is judged."""

    size: int = 1 << 30
    collectives: tuple[str, ...] = ("all_reduce",)
    gpus_per_node: int | None = None  # ranks per node where the read cannot count the GPUs (--gpus-per-node)
    floor: float | None = None  # the operator's floor in GB/s instead of the derived one (--floor)
    transport: str | None = None  # the network NCCL must use between nodes (--transport), else derived


def parse_size(text: str) -> int:
    """``--size``: bytes as nccl-tests' -e takes them (a whole number, K, M or G: powers of 1024), 8 to 64G."""
    found = _SIZE.match(str(text).strip())
    size = int(found.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[found.group(2).upper()] if found else 0
    if not MIN_SIZE <= size <= MAX_SIZE:
        raise HvdError(f"--size: {text!r}: give the largest message as nccl-tests' -e takes it: a whole number of "
                       "bytes or K, M, G (1G, 512M), from 8 to 64G")
    return size


def parse_collectives(text: str) -> tuple[str, ...]:
    """``--collectives a,b``: names of nccl-tests' collectives (all_reduce, all_gather, reduce_scatter)."""
    names = [word.strip().removesuffix("_perf") for word in str(text).split(",")]
    bad = [name for name in names if name not in COLLECTIVES]
    if bad or not names:
        raise HvdError(f"--collectives: {text!r}: give one or more of {', '.join(COLLECTIVES)}, comma-separated")
    return tuple(dict.fromkeys(names))


def settings_from(args: Any) -> Settings:
    """The --full settings from ``args`` (health's or up's), each checked: exit 2 on the first bad one."""
    gpus, floor, transport = args.gpus_per_node, args.floor, args.transport
    if gpus is not None and not 1 <= gpus <= 64:
        raise HvdError(f"--gpus-per-node: {gpus}: give the ranks a node runs, 1 to 64")
    if floor is not None and not (0 < floor < 100000):
        raise HvdError(f"--floor: {floor:g}: give the bus bandwidth a healthy run reaches, in GB/s (more than 0)")
    if transport is not None and not _TRANSPORT.match(transport):
        raise HvdError(f"--transport: {transport!r}: give a network as NCCL names it (IB, Socket, or a plugin's name)")
    return Settings(parse_size(args.size or DEFAULT_SIZE), parse_collectives(args.collectives or DEFAULT_COLLECTIVES),
                    gpus, floor, transport)


def unused_options(args: Any) -> list[str]:
    """The --full options given without --full (or, for up, without --accept): each defaults to None in the parser."""
    names = ("size", "collectives", "gpus_per_node", "floor", "transport")
    return [f"--{name.replace('_', '-')}" for name in names if getattr(args, name, None) is not None]


def size_text(size: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


# --------------------------------------------------------------------------------------------- the nodes' links


def gpus_of(reading: Mapping[str, Any]) -> int:
    """The GPUs nvidia-smi -q lists on the node (0: none, or nvidia-smi did not answer)."""
    return len(hvd_health_gpu.parse_nvidia_smi_q(reading.get("nvidia_smi_q") or "")["gpus"])


def links_of(reading: Mapping[str, Any], gpus: int | None = None) -> dict[str, Any]:
    """One node's links (hvd_bandwidth.node_links) from its health reading; ``gpus``: its ranks (default: its GPUs)."""
    smi = hvd_health_gpu.parse_nvidia_smi_q(reading.get("nvidia_smi_q") or "")
    return hvd_bandwidth.node_links(smi, hvd_health_gpu.parse_nvlink_status(reading.get("nvlink") or ""), reading.get("ib"),
                                    bool(hvd_fabric.nvswitches(reading.get("pci") or [])), reading.get("modules"),
                                    len(smi["gpus"]) if gpus is None else gpus)


# --------------------------------------------------------------------------------------------- one run


def command(hosts: Mapping[str, int], collective: str, size: int, prefix: str = NCCL_TESTS_PREFIX) -> str:
    """The shell the first node runs: ``hosts`` is node -> ranks (in -H order; rank 0 on the first)."""
    np = sum(hosts.values())
    argv = ["timeout", str(RUN_SECONDS), "mpirun", "-np", str(np), "-H", member_rules.host_list(hosts)]
    for name in NCCL_ENV:
        argv += ["-x", name]
    perf = [f"{prefix.rstrip('/')}/bin/{collective}_perf", "-b", "8", "-e", str(size), "-f", "2", "-g", "1"]
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in NCCL_ENV.items())
    # The roles' CUDA and NCCL settings for login shells; Open MPI refuses root unless told (hvd_verify does the same);
    # LD_LIBRARY_PATH goes to every rank only where those settings gave one.
    return ('for f in /etc/profile.d/hvd-*.sh; do if [ -r "$f" ]; then . "$f"; fi; done; '
            f"export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 {env}; "
            f"exec {shlex.join(argv)} ${{LD_LIBRARY_PATH:+-x LD_LIBRARY_PATH}} {shlex.join(perf)}")


@dataclass
class Run:
    """One nccl-tests run over ``nodes`` and how it was judged."""

    number: int
    nodes: tuple[str, ...]
    collective: str
    command: str
    seconds: float = 0.0
    rc: int | None = None
    output: str = ""
    result: dict[str, Any] = field(default_factory=dict)
    nccl: dict[str, Any] = field(default_factory=dict)
    floor: dict[str, Any] = field(default_factory=dict)
    findings: list[dict[str, str]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not any(f["severity"] == hvd_health.FAIL for f in self.findings)

    @property
    def busbw(self) -> dict[str, Any] | None:
        return hvd_bandwidth.largest_size_busbw(self.result)

    def as_dict(self) -> dict[str, Any]:
        best = self.busbw
        return {"run": self.number, "nodes": list(self.nodes), "collective": self.collective,
                "command": self.command, "seconds": round(self.seconds, 3), "rc": self.rc,
                "busbw_gbs": best["busbw"] if best else None, "size": best["size"] if best else None,
                "sizes": [{"size": r["size"], "busbw_gbs": max(r["busbw_out"], r["busbw_in"]),
                           "algbw_gbs": max(r["algbw_out"], r["algbw_in"])} for r in self.result.get("rows") or []],
                "ranks": len(self.result.get("ranks") or []), "network": self.nccl.get("network"),
                "transports": self.nccl.get("transports") or [], "gdrdma": bool(self.nccl.get("gdrdma")),
                "floor_gbs": self.floor.get("floor_gbs"), "floor_not_applicable": self.floor.get("not_applicable"),
                "passed": self.passed, "findings": self.findings, "output_tail": self.output[-OUTPUT_KEPT:]}


def remote(inv: Any, first: str, shell: str) -> tuple[int | None, str, float]:
    """``shell`` run by ``first``'s login shell over SSH (launch.ssh_argv): (rc, stdout and stderr, seconds)."""
    from . import launch

    start = time.monotonic()
    try:
        proc = subprocess.run([*launch.ssh_argv(inv, first), shell], capture_output=True, text=True,
                              errors="replace", timeout=RUN_SECONDS + 60, stdin=subprocess.DEVNULL)
        return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return None, out + f"\nno answer in {RUN_SECONDS + 60} s", time.monotonic() - start
    except OSError as exc:
        return None, str(exc), time.monotonic() - start


class Meter:
    """Runs and judges nccl-tests over node sets of one cluster: ``links`` is node -> node_links (its ranks in
    ``gpus``), ``execute(first, shell) -> (rc, output, seconds)`` runs on a node (remote over SSH; tests pass their
    own). Every run is kept in ``runs``, numbered."""

    def __init__(self, links: Mapping[str, dict[str, Any]], settings: Settings,
                 execute: Callable[[str, str], tuple[int | None, str, float]], prefix: str = NCCL_TESTS_PREFIX,
                 order: Iterable[str] = ()) -> None:
        self.links, self.settings, self.execute, self.prefix = dict(links), settings, execute, prefix
        self.order = list(order) or list(links)
        self.runs: list[Run] = []
        self.rounds = 0

    def floor(self, nodes: Iterable[str]) -> dict[str, Any]:
        return hvd_bandwidth.run_floor({n: self.links[n] for n in nodes}, self.settings.floor)

    def expected_network(self, nodes: tuple[str, ...]) -> str | None:
        """What NCCL must use between ``nodes``: --transport, else IB where every one has an Active RDMA port."""
        if len(nodes) < 2:
            return None
        if self.settings.transport:
            return self.settings.transport
        return "IB" if all(self.links[n]["net"] for n in nodes) else None

    def judge(self, run: Run) -> None:
        nodes = run.nodes
        run.result = hvd_bandwidth.parse_nccl_perf(run.output)
        if run.rc not in (0, None) and not run.result["errors"] and not run.result["rows"]:
            last = [line.strip() for line in run.output.splitlines() if line.strip()][-1:] or ["no output"]
            run.result["errors"].append(f"exit {run.rc}: {last[0][:300]}")
        elif run.rc is None and not run.result["rows"]:
            run.result["errors"].append(run.output.strip().splitlines()[-1][:300] if run.output.strip() else "no run")
        run.nccl = hvd_bandwidth.parse_nccl_debug(run.output)
        run.floor = self.floor(nodes)
        findings = hvd_bandwidth.check_run(run.result, run.floor, run.collective)
        findings += hvd_bandwidth.check_ranks(run.result, sum(self.links[n]["gpus"] for n in nodes))
        gdr = len(nodes) > 1 and all(self.links[n]["peermem"] and self.links[n]["net"] for n in nodes)
        nvlink = len(nodes) == 1 and bool(self.links[nodes[0]]["nvlink"])
        findings += hvd_bandwidth.check_run_transport(run.nccl, self.expected_network(nodes), gdr, nvlink)
        run.findings = findings

    def one(self, nodes: tuple[str, ...], collective: str, number: int) -> Run:
        nodes = tuple(n for n in self.order if n in nodes)  # hosts.yaml's order: rank 0 on the first
        shell = command({n: self.links[n]["gpus"] for n in nodes}, collective, self.settings.size, self.prefix)
        run = Run(number, nodes, collective, shell)
        run.rc, run.output, run.seconds = self.execute(nodes[0], shell)
        self.judge(run)
        return run

    def round(self, groups: list[tuple[str, ...]], collective: str) -> list[Run]:
        """Runs over disjoint node sets at once; each judged against its own floor."""
        numbers = range(len(self.runs) + 1, len(self.runs) + len(groups) + 1)
        with ThreadPoolExecutor(max_workers=min(16, len(groups) or 1)) as pool:
            done = list(pool.map(lambda pair: self.one(pair[0], collective, pair[1]), zip(groups, numbers)))
        self.runs += done
        self.rounds += 1
        return done


# --------------------------------------------------------------------------------------------- the whole of --full


def assess(readings: Mapping[str, Mapping[str, Any]], nodes: list[str], settings: Settings,
           execute: Callable[[str, str], tuple[int | None, str, float]], prefix: str = NCCL_TESTS_PREFIX
           ) -> dict[str, Any]:
    """Every collective over every node of ``nodes`` with a GPU, judged; the culprit where one fails.

    {applicable, reason, size, collectives, nodes: {node: {gpus, links}}, skipped: {node: why}, floor, runs: [...],
    culprit: {kind, nodes, why, runs, rounds} | None, passed, seconds, verdicts: {node: {healthy, findings}}}.
    """
    start = time.monotonic()
    gpus = {n: settings.gpus_per_node or gpus_of(readings[n]) for n in nodes}
    chosen = [n for n in nodes if gpus[n] > 0]
    skipped = {n: ("no GPU (nvidia-smi -q lists none): nccl-tests needs one; --gpus-per-node N runs N ranks a node "
                   "where the read cannot see the GPUs") for n in nodes if not gpus[n]}
    links = {n: links_of(readings[n], gpus[n]) for n in chosen}
    out: dict[str, Any] = {"applicable": False, "reason": "", "size": settings.size,
                           "collectives": list(settings.collectives), "gpus_per_node_given": settings.gpus_per_node,
                           "floor_given": settings.floor, "transport_given": settings.transport,
                           "nodes": {n: {"gpus": gpus[n], "links": links[n]} for n in chosen}, "skipped": skipped,
                           "floor": None, "runs": [], "culprit": None, "passed": True, "seconds": 0.0, "verdicts": {}}
    if not chosen:
        out["reason"] = "no node with a GPU among the nodes read"
        return out
    meter = Meter(links, settings, execute, prefix, order=nodes)
    out["floor"] = meter.floor(chosen)
    if sum(gpus[n] for n in chosen) < 2:
        out["reason"] = out["floor"]["not_applicable"]
        return out
    out["applicable"] = True
    failing = None
    for collective in settings.collectives:
        run, = meter.round([tuple(chosen)], collective)
        failing = failing or (None if run.passed else run)
    if failing is not None:
        culprit = find_culprit(chosen, lambda groups: [r.passed for r in meter.round(groups, failing.collective)])
        culprit["collective"] = failing.collective
        culprit["runs_needed"] = len(culprit["runs"]) + 1  # the whole run that failed, then the bisection's
        out["culprit"] = culprit
    out["runs"] = [run.as_dict() for run in meter.runs]
    out["passed"] = failing is None
    out["verdicts"] = verdicts(chosen, meter.runs, out["culprit"], failing)
    out["seconds"] = round(time.monotonic() - start, 2)
    return out


def verdicts(nodes: list[str], runs: list[Run], culprit: dict[str, Any] | None, failing: Run | None
             ) -> dict[str, dict[str, Any]]:
    """Each node's --full result for the records (health.record): healthy, or the finding that names it."""
    if failing is None or culprit is None:
        return {n: {"healthy": True, "findings": []} for n in nodes}
    named = set(culprit["nodes"])
    first = next((f for f in failing.findings if f["severity"] == hvd_health.FAIL), None)
    what = {"node": "a slow node", "link": "one end of a slow link", "pair": "one of two nodes that fail together",
            "group": "in a group that fails only together", "fabric": "every pair fails"}[culprit["kind"]]
    found = f"{what} ({culprit['why']})" + (f": {first['item']}: {first['found']}" if first else "")
    finding = {"item": "nccl.culprit", "severity": hvd_health.FAIL, "found": found,
               "expected": first["expected"] if first else "a passing run",
               "fix": first["fix"] if first else "read the run's output (--json)",
               "source": first["source"] if first else hvd_health.SOURCES["busbw"]}
    return {n: {"healthy": n not in named, "findings": [{**finding, "node": n}] if n in named else []} for n in nodes}


# --------------------------------------------------------------------------------------------- the report


def _run_line(run: Mapping[str, Any], width: int) -> str:
    busbw = f"{run['busbw_gbs']:.2f} GB/s at {size_text(run['size'])}" if run["busbw_gbs"] is not None else "no result"
    net = run["network"] or "/".join(t for t in run["transports"] if not t.startswith("NET/")) or "-"
    floor = f"floor {run['floor_gbs']:g}" if run["floor_gbs"] is not None else "no floor"
    verdict = "pass" if run["passed"] else "FAIL"
    return (f"  run {run['run']:<2} {fold(run['nodes']):<{width}}  {run['collective']:<14} {busbw:<24} "
            f"{net:<8} {floor:<12} {verdict}  ({run['seconds']:.1f} s)")


def render(full: Mapping[str, Any]) -> str:
    """The --full section of health's report (after the quick read's)."""
    lines = []
    span = f"{size_text(8)} to {size_text(full['size'])}"
    if not full["applicable"]:
        lines.append(f"bandwidth (nccl-tests): not applicable: {full['reason']}")
    else:
        ranks = ", ".join(f"{fold([n for n in full['nodes'] if full['nodes'][n]['gpus'] == g])} x {g} GPU"
                          f"{'s' if g > 1 else ''}" for g in sorted({v['gpus'] for v in full['nodes'].values()}))
        floor = full["floor"]
        if floor["floor_gbs"] is None:
            said = f"no floor: {floor['not_applicable']}"
        elif floor["bottleneck"]["kind"] == "given":
            said = f"floor {floor['floor_gbs']:g} GB/s (--floor)"
        else:
            term = hvd_bandwidth.bottleneck_term(floor)
            said = (f"floor {floor['floor_gbs']:g} GB/s: {term['node']}: {term['what']}, {term['line_gbs']:g} GB/s x "
                    f"{term['efficiency']:g}")
        lines.append(f"bandwidth (nccl-tests {', '.join(full['collectives'])}, {span}, {ranks}; {said}):")
        width = max(len(fold(run["nodes"])) for run in full["runs"])
        for run in full["runs"]:
            lines.append(_run_line(run, width))
            for finding in run["findings"]:
                lines.append(f"    {finding['severity']:<4} {finding['item']}: {finding['found']} (expected "
                             f"{finding['expected']})")
        culprit = full["culprit"]
        if culprit:
            lines.append(f"culprit: {fold(culprit['nodes'])} ({culprit['kind']}): {culprit['why']} — found in "
                         f"{culprit['runs_needed']} runs ({culprit['rounds']} rounds after the first)")
    for node, why in full["skipped"].items():
        lines.append(f"  note {node}: {why}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------- running work is sacred


class leased:
    """A job lease (jobs.py, as `hvdcluster run` takes one) on every node measured, for as long as the runs go:
    `up --rolling` waits for it and `run` sees the node busy. ``problems``: the nodes that cannot be measured now (a
    live job, a roll, GPU compute processes, a Slurm job, or not readable): a run beside running work would disturb it
    and measure it, so nothing is run."""

    def __init__(self, inv: Any, nodes: list[str]) -> None:
        from . import jobs

        self.inv, self.nodes = inv, list(nodes)
        self.record = jobs.mine(jobs.JOB, jobs.new_id(), hosts=self.nodes, command=["hvdcluster", "health", "--full"])
        self.name = jobs.file_name(self.record)
        self.problems: list[str] = []

    def __enter__(self) -> list[str]:
        from . import jobs

        looks = jobs.look(self.inv, self.nodes, put=self.record)
        self.problems = [f"{h}: {look.error}" for h, look in looks.items() if look.error]
        self.problems += [f"{h}: {why}" for h, look in looks.items() if not look.error
                          for why in jobs.busy(look, ours=self.name)]
        return self.problems

    def __exit__(self, *exc: object) -> None:
        from . import jobs

        jobs.look(self.inv, self.nodes, drop=[self.name])
