"""Node health on the controller: reading every node (playbooks/health.yml) and judging what it read.

- ``read(root, limit, hosts, quick)`` runs playbooks/health.yml in check mode (one read-only module call per node,
  plugins/modules/hvd_health_read.py, as the login user) and collects each node's reading from the run's events.
- ``judge(node, reading, expected_gpus)`` applies the rules of plugins/module_utils/hvd_health.py (over what
  hvd_health_gpu.py and hvd_health_net.py parse) to one reading; every finding keeps that module's shape
  ``{item, severity, found, expected, fix, source}`` plus ``node``. ``notes`` names what could not be judged on the
  node and why (no NVIDIA device, no InfiniBand adapter, no NVSwitch, no dcgmi).
- ``assess``, ``render``, ``to_json``, ``exit_code``: the report, folded the way ``clush -b`` folds output.

What a node should have comes from the controller: its GPU count is the ``gpu.count`` the last converge recorded
(``expected_gpus``), else the count of NVIDIA GPUs on its PCI bus. hosts.yaml has no per-host GPU count.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_bandwidth, hvd_fabric, hvd_health, hvd_health_gpu

from . import nodestate
from .output import fold

HEALTH_TASK = nodestate.HEALTH_TASK  # health.yml's task
FAIL, WARN = hvd_health.FAIL, hvd_health.WARN
RECORDED = "the gpu.count the last converge recorded"
ON_PCI = "the NVIDIA GPUs on the PCI bus"


def read(root: Path, limit: str | None = None, hosts: Iterable[str] = (), quick: bool = False) -> nodestate.Reading:
    """Read every node (or ``limit``) in check mode; ``hosts``: the nodes expected to answer; ``quick``: without
    dcgmi diag."""
    return nodestate.read_with("health.yml", root, limit, hosts, {"hvd_health_quick": quick}, task=HEALTH_TASK,
                               key="reading")


def expected_gpus(record: Mapping[str, Any] | None) -> int | None:
    """The GPU count the node's record holds (``gpu.count``), None without a record or with none counted."""
    try:
        count = int((record or {}).get("gpu.count") or 0)
    except (TypeError, ValueError):
        return None
    return count if count > 0 else None


def pci_gpus(reading: Mapping[str, Any]) -> list[str]:
    """The addresses of the NVIDIA GPUs on the node's PCI bus."""
    return hvd_fabric.gpus(reading.get("pci") or [])


def nvswitches(reading: Mapping[str, Any]) -> list[str]:
    """The addresses of the node's NVSwitches (NVIDIA PCI bridges of class 0x068000)."""
    return hvd_fabric.nvswitches(reading.get("pci") or [])


def _gpu_want(reading: Mapping[str, Any], expected: int | None) -> tuple[int, str]:
    """How many GPUs the node should have, and where that number comes from."""
    return (expected, RECORDED) if expected else (len(pci_gpus(reading)), ON_PCI)


def _gpu_findings(reading: Mapping[str, Any], smi: dict[str, Any], want: int, source: str) -> list[dict[str, str]]:
    """nvidia-smi's answer, the count, ECC, retired pages, row remap, PCIe width, persistence, NVLink, Xid, dcgm."""
    findings: list[dict[str, str]] = []
    if not smi["gpus"] and (reading.get("nvidia_smi_q_error") or want):
        said = reading.get("nvidia_smi_q_error") or "nvidia-smi -q listed no GPU"
        findings.append(hvd_health.finding("gpu.nvidia_smi", FAIL, said, "nvidia-smi -q lists the GPUs",
                                           "load the NVIDIA driver (hvdcluster up repairs an install; a kernel upgraded without "
                                           "its modules needs them rebuilt); look for Xid 79 in the kernel log", "nvidia-smi(1)"))
    else:
        for finding in hvd_health.check_gpu_count(smi, want):
            findings.append({**finding, "expected": f"{finding['expected']} ({source})"})
        for rule in (hvd_health.check_ecc, hvd_health.check_retired_pages, hvd_health.check_row_remap,
                     hvd_health.check_pcie, hvd_health.check_persistence):
            findings += rule(smi)  # PCIe: width only; an idle GPU's gen means nothing (hvd_health.check_pcie)
    findings += hvd_health.check_nvlink(hvd_health_gpu.parse_nvlink_status(reading.get("nvlink") or ""))
    log = reading.get("kernel_log")
    if log is None:
        findings.append(hvd_health.finding(
            "kernel_log", WARN, str(reading.get("kernel_log_error") or "not read"),
            f"the kernel log readable by {reading.get('user') or 'the login user'} (Xid and SXid events)",
            "add the login user to the systemd-journal (or adm) group, or allow dmesg (sysctl kernel.dmesg_restrict=0)",
            hvd_health.SOURCES["xid_catalog"]))
    else:
        events = hvd_health_gpu.parse_kernel_log(log)
        findings += hvd_health.check_xid(events) + hvd_health.check_sxid(events)
    if reading.get("dcgm_diag"):
        findings += hvd_health.check_dcgm_diag(hvd_health_gpu.parse_dcgmi_diag(reading["dcgm_diag"]))
    return findings


def _fabricmanager_findings(reading: Mapping[str, Any], smi: dict[str, Any]) -> list[dict[str, str]]:
    """An NVSwitch node: Fabric Manager running, at the driver's version to the last digit."""
    findings: list[dict[str, str]] = []
    state = (reading.get("fabricmanager_active") or "").strip()
    if state != "active":
        said = state or str(reading.get("fabricmanager_active_error") or "unknown")
        findings.append(hvd_health.finding("fabricmanager.active", FAIL, f"nvidia-fabricmanager {said}", "active",
                                           "systemctl enable --now nvidia-fabricmanager; journalctl -u nvidia-fabricmanager "
                                           "says why it stopped (without it CUDA cannot initialize the GPUs of an NVSwitch node)",
                                           hvd_health.SOURCES["fabric_manager"]))
    fm = hvd_health_gpu.parse_fabricmanager_log(reading.get("fabricmanager_journal") or "")
    version = re.search(r"(\d+\.\d+(?:\.\d+)+)", reading.get("fabricmanager_version") or "")
    if version:
        fm["fm_version"] = version.group(1)
    return findings + hvd_health.check_fabricmanager(fm, smi.get("driver_version"))


def judge(node: str, reading: Mapping[str, Any], expected_gpus: int | None = None) -> list[dict[str, str]]:
    """Every finding on ``node``'s reading (plugins/modules/hvd_health_read.py's ``reading``), each with ``node``.

    ``expected_gpus``: the GPUs the node should have (expected_gpus(record)); None: the NVIDIA GPUs on its PCI bus.
    A node with no NVIDIA device and none expected has no GPU finding (``notes`` says so).
    """
    smi = hvd_health_gpu.parse_nvidia_smi_q(reading.get("nvidia_smi_q") or "")
    want, source = _gpu_want(reading, expected_gpus)
    gpu_node = bool(want or smi["gpus"])
    findings = _gpu_findings(reading, smi, want, source) if gpu_node else []
    ib = reading.get("ib")
    if ib is not None:
        findings += hvd_health.check_ib_ports(ib)
        if gpu_node and reading.get("modules") is not None:
            findings += hvd_health.check_peermem(ib, reading["modules"], len(smi["gpus"]) or want)
    if nvswitches(reading):
        findings += _fabricmanager_findings(reading, smi)
    if gpu_node:
        findings += _pcie_findings(reading)
    return [{**finding, "node": node} for finding in findings]


def _pcie_findings(reading: Mapping[str, Any]) -> list[dict[str, str]]:
    """The IOMMU translating the GPUs' and NICs' DMA, and ACS on the bridges above them (hvd_health_read's
    pcie_paths, acs, iommu_cmdline, iommu_groups; a reading without them, from an older module, judges nothing)."""
    paths = reading.get("pcie_paths") or {}
    findings = hvd_health.check_iommu(reading.get("iommu_cmdline"), reading.get("iommu_groups") or {})
    if reading.get("acs") is not None:
        findings += hvd_health.check_acs(reading["acs"], paths, peers=len(paths))
    return findings


def notes(reading: Mapping[str, Any], expected_gpus: int | None = None) -> list[str]:
    """One line per area not judged on the node, with why."""
    want, _ = _gpu_want(reading, expected_gpus)
    gpu_node = bool(want or hvd_health_gpu.parse_nvidia_smi_q(reading.get("nvidia_smi_q") or "")["gpus"])
    out = []
    if not gpu_node:
        out.append("no NVIDIA device: GPU checks skipped (count, ECC, row remap, PCIe, NVLink, Xid, persistence, "
                   "dcgmi diag)")
    if reading.get("ib") is None:
        out.append("no InfiniBand adapter (/sys/class/infiniband missing): port and nvidia-peermem checks skipped")
    if not nvswitches(reading):
        out.append("no NVSwitch: Fabric Manager checks skipped")
    if gpu_node and not reading.get("dcgm_diag"):
        out.append(f"dcgmi diag not run: {reading.get('dcgm_diag_error') or 'it printed nothing'}")
    if gpu_node and reading.get("pcie_paths") and reading.get("acs") is None:
        out.append(f"PCIe ACS not read: {reading.get('acs_error') or 'unknown'}")
    return out


# ------------------------------------------------------------------------------------------ the report


def assess(readings: Mapping[str, Mapping[str, Any]], records: Mapping[str, Mapping[str, Any] | None]
           ) -> dict[str, dict[str, Any]]:
    """node -> {healthy, findings, notes, expected_gpus}: healthy means no finding of severity fail."""
    report = {}
    for node, reading in readings.items():
        want = expected_gpus(records.get(node))
        found = sorted(judge(node, reading, want), key=lambda f: (f["severity"] != FAIL, f["item"]))
        report[node] = {"healthy": not any(f["severity"] == FAIL for f in found), "findings": found,
                        "notes": notes(reading, want), "expected_gpus": want or len(pci_gpus(reading))}
    return report


def exit_code(report: Mapping[str, Mapping[str, Any]], unreachable: Mapping[str, str]) -> int:
    """0: every node read and none has a failure (warnings allowed); 1: a failure or a node not read."""
    return 1 if unreachable or not all(node["healthy"] for node in report.values()) else 0


def _line(finding: Mapping[str, str]) -> str:
    return (f"  {finding['severity']:<4} {finding['item']}: {finding['found']} (expected {finding['expected']})"
            f" — {finding['fix']} [{finding['source']}]")


def _heading(node: Mapping[str, Any]) -> str:
    fails = sum(f["severity"] == FAIL for f in node["findings"])
    warns = len(node["findings"]) - fails
    counts = [f"{fails} failed" if fails else "", f"{warns} warning{'s' if warns != 1 else ''}" if warns else ""]
    return ("healthy" if node["healthy"] else "unhealthy") + "".join(f", {c}" for c in counts if c)


def render(report: Mapping[str, Mapping[str, Any]], unreachable: Mapping[str, str]) -> str:
    """The report as text: nodes with the same findings and notes folded on one heading line (``gpu[01-16]:
    healthy``), one line per finding and note under it, the unreachable nodes with why."""
    groups: dict[tuple, list[str]] = {}
    for node, health in report.items():
        key = (tuple(tuple(sorted((k, v) for k, v in f.items() if k != "node")) for f in health["findings"]),
               tuple(health["notes"]))
        groups.setdefault(key, []).append(node)
    lines: list[str] = []
    for nodes in sorted(groups.values(), key=lambda names: (not report[names[0]]["healthy"], names[0])):
        health = report[nodes[0]]
        lines.append(f"{fold(nodes)}: {_heading(health)}")
        lines += [_line(finding) for finding in health["findings"]]
        lines += [f"  note {note}" for note in health["notes"]]
    if unreachable:
        lines.append(f"unreachable: {fold(unreachable)}")
        lines += [f"  {node}: {why}" for node, why in unreachable.items()]
    return "\n".join(lines) + ("\n" if lines else "")


def summary(report: Mapping[str, Mapping[str, Any]], unreachable: Mapping[str, str], log: str, seconds: float) -> str:
    """The last line: how many nodes are healthy, have failures or warnings, were not read; the log."""
    healthy = [n for n, h in report.items() if h["healthy"]]
    warned = [n for n in healthy if report[n]["findings"]]
    parts = [f"{len(healthy)} healthy" + (f" ({len(warned)} with warnings)" if warned else ""),
             f"{len(report) - len(healthy)} with failures"]
    parts += [f"{len(unreachable)} unreachable"] if unreachable else []
    return f"health: {', '.join(parts)} (read {len(report)} nodes in {seconds:.1f} s; log: {log})"


def to_json(cluster: str, report: Mapping[str, Mapping[str, Any]], unreachable: Mapping[str, str], log: str,
            seconds: float) -> dict[str, Any]:
    """The report for ``--json``."""
    return {"cluster": cluster, "nodes": dict(report), "unreachable": dict(unreachable), "log": log,
            "seconds": round(seconds, 2), "exit": exit_code(report, unreachable)}


# ------------------------------------------------------------------------------------------ the last health, per node
#
# `health` and `up`'s health read record what they found, per node, on the controller beside the nodes' desired state:
# <inventory>/state/health/<node>.json, {"quick": {...}, "full": {...}}, each {healthy, failed: [{item, found}], when,
# by}. A quick read replaces "quick" only: a node named slow by `health --full` stays refused by `run` until a later
# `--full` (or `up --accept`) over it passes. The records are the controller's own (0600, in a 0700 folder); the
# texts in them came from the nodes and are printed only through output.printable.

RECORDS = "health"
QUICK, FULL = "quick", "full"


def records_dir(root: Path) -> Path:
    return nodestate.state_dir(root) / RECORDS


def _now() -> str:
    import datetime

    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def last(root: Path, nodes: Iterable[str]) -> dict[str, dict[str, Any]]:
    """node -> its last health record ({} where none, or unreadable)."""
    import json

    out = {}
    for node in nodes:
        try:
            found = json.loads((records_dir(root) / f"{node}.json").read_text())
        except (OSError, ValueError):
            found = {}
        out[node] = found if isinstance(found, dict) else {}
    return out


def record(root: Path, results: Mapping[str, Mapping[str, Any]], kind: str, by: str) -> None:
    """Write each node's ``kind`` (QUICK or FULL) result: ``results`` is node -> {healthy, findings} (assess's shape,
    or the full run's verdict per node); the other kind's last result is kept."""
    import json
    import os

    if not results:
        return
    folder = records_dir(root)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    current = last(root, results)
    for node, result in results.items():
        failed = [{"item": f["item"], "found": f["found"]} for f in result.get("findings") or []
                  if f.get("severity") == FAIL]
        entry = {**current[node], kind: {"healthy": bool(result.get("healthy")), "failed": failed, "when": _now(),
                                         "by": by}}
        part = folder / f".{node}.json.part-{os.getpid()}"
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(json.dumps(entry, indent=2, sort_keys=True) + "\n")
        os.replace(part, folder / f"{node}.json")


def refusals(root: Path, nodes: Iterable[str]) -> list[str]:
    """One line per node whose last health (quick or full) failed, naming each failed item: what `run` refuses."""
    lines = []
    for node, entry in last(root, nodes).items():
        for kind in (QUICK, FULL):
            result = entry.get(kind)
            if not isinstance(result, dict) or result.get("healthy", True):
                continue
            failed = [f for f in result.get("failed") or [] if isinstance(f, dict)]
            items = "; ".join(f"{f.get('item')}: {f.get('found')}" for f in failed) or "failed"
            lines.append(f"{node}: last health ({result.get('by')}, {result.get('when')}) failed: {items}")
    return lines


# ------------------------------------------------------------------------------------------ health in `up`'s loop


def in_the_loop(root: Path, found: Mapping[str, Mapping[str, Any]], nodes: Iterable[str], by: str,
                seconds: float = 0.0) -> dict[str, Any]:
    """`up`'s health read of ``nodes`` (``found``: node -> reading, nodestate.health_in), judged and recorded: {nodes:
    assess's report, not_ready: [lines], seconds}. A node with a failure is not ready (a warning keeps it ready); a
    node without a reading (the read skipped, the node unreachable) is left out: the converge itself names it."""
    scope = [n for n in nodes if n in found]
    report = assess({n: found[n] for n in scope}, nodestate.desired(root, scope))
    record(root, report, QUICK, by)
    not_ready = [f"{node}: not ready: {f['item']}: {f['found']} (expected {f['expected']}) — {f['fix']}"
                 for node in scope for f in report[node]["findings"] if f["severity"] == FAIL]
    return {"nodes": report, "not_ready": not_ready, "seconds": seconds}


def judge_postflight(throughput: Mapping[str, Mapping[str, Any]], readings: Mapping[str, Mapping[str, Any]]
                     ) -> dict[str, Any]:
    """The post-flight allreduces' bus bandwidth (hvd_verify's figures, per controller) against the floor derived from
    the links of the nodes read (the same floors as `health --full`). Judged on GPUs only (device cuda or gpu) and
    for a tensor of at least THRESHOLDS' busbw.large_bytes: in host memory the figure is recorded, not judged.
    {judged: {controller: {busbw_gbs, floor_gbs, ok}}, failed: [lines], notes: [lines]}."""
    from . import bandwidth

    out: dict[str, Any] = {"judged": {}, "failed": [], "notes": []}
    large = int(hvd_health.threshold("busbw.large_bytes")["value"])
    for controller, figures in sorted(throughput.items()):
        if figures.get("device") not in ("cuda", "gpu"):
            out["notes"].append(f"post-flight {controller}: in host memory: recorded, not judged")
            continue
        if int(figures.get("bytes") or 0) < large:
            out["notes"].append(f"post-flight {controller}: a tensor of {figures.get('bytes')} bytes is below the "
                                f"{large} the floors assume (hvd_verify_throughput_bytes): recorded, not judged")
            continue
        links = {node: bandwidth.links_of(reading) for node, reading in readings.items()}
        floor = hvd_bandwidth.run_floor(links)
        if floor["floor_gbs"] is None:
            out["notes"].append(f"post-flight {controller}: not judged: {floor['not_applicable']}")
            continue
        busbw = float(figures.get("busbw_gbs") or 0)
        ok = busbw >= floor["floor_gbs"]
        out["judged"][controller] = {"busbw_gbs": busbw, "floor_gbs": floor["floor_gbs"], "ok": ok,
                                     "bottleneck": floor["bottleneck"]}
        if not ok:
            term = hvd_bandwidth.bottleneck_term(floor)
            out["failed"].append(f"post-flight allreduce ({controller}): busbw {busbw:g} GB/s below the floor "
                                 f"{floor['floor_gbs']:g} GB/s ({term['node']}: {term['what']} x {term['efficiency']:g})"
                                 " — run `hvdcluster health --full` to name the slow node or link")
    return out
