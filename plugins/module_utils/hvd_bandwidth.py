"""A run of nccl-tests judged: its output (``all_reduce_perf`` and kin, an ``NCCL_DEBUG=INFO`` log) parsed, the
bus-bandwidth floor derived from the links the nodes have (NVLink, PCIe, InfiniBand: line rate x an efficiency row of
hvd_health's THRESHOLDS), and the run's findings (below the floor, ranks missing, the transport NCCL fell back to).

Stdlib only and Python 3.9+, without Ansible: the CLI's ``health --full`` (src/hvdcluster/bandwidth.py) imports it.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Optional

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_health import FAIL, SOURCES, WARN, finding, threshold
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_health_gpu import leading_int


# ------------------------------------------------------------------------------------------ nccl-tests

_MPI_TAG = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:")
_RANK = re.compile(r"^#\s+Rank\s+(\d+)\s.*?Pid\s+\d+ on\s+(\S+) device\s+(\d+) \[([^\]]*)\] (.*)$")
_AVG = re.compile(r"^# Avg bus bandwidth\s*:\s*([\d.]+)")
_OOB = re.compile(r"^# Out of bounds values\s*:\s*(\d+)\s+(\w+)")


def _strip_tag(line: str) -> str:
    """A line without mpirun's ``[1,0]<stdout>:`` prefix."""
    return _MPI_TAG.sub("", line)


def _perf_row(tokens: list[str]) -> Optional[dict[str, Any]]:
    """One size row: 13 columns with ``root`` (nccl-tests 2.10+), 12 without."""
    if len(tokens) not in (12, 13) or not (tokens[0].isdigit() and tokens[1].isdigit()):
        return None
    rest = tokens[5:] if len(tokens) == 13 else tokens[4:]
    try:
        out_busbw, in_busbw = float(rest[2]), float(rest[6])
    except ValueError:
        return None
    return {"size": int(tokens[0]), "count": int(tokens[1]), "type": tokens[2], "redop": tokens[3],
            "busbw_out": out_busbw, "busbw_in": in_busbw, "algbw_out": float(rest[1]), "algbw_in": float(rest[5]),
            "wrong": sum(leading_int(value) or 0 for value in (rest[3], rest[7]))}


def parse_nccl_perf(text: str) -> dict[str, Any]:
    """The output of an nccl-tests perf binary (``all_reduce_perf`` and the rest print one table, src/common.cu), any
    rank count, mpirun-tagged or not.

    {rows: [{size, count, type, redop, algbw_out, busbw_out, algbw_in, busbw_in, wrong}], avg_busbw,
    ranks: [{rank, host, device, bus_id, name}], out_of_bounds_ok, errors: [lines]}. ``errors``: the test's
    failure lines (``Test CUDA failure ...``, ``NCCL WARN``, a FAILED bounds check); a run with none and no
    ``Avg bus bandwidth`` line did not finish.
    """
    result: dict[str, Any] = {"rows": [], "avg_busbw": None, "ranks": [], "out_of_bounds_ok": None, "errors": []}
    for raw in text.splitlines():
        line = _strip_tag(raw).rstrip()
        rank, avg, oob = _RANK.match(line), _AVG.match(line), _OOB.match(line)
        row = None if line.startswith("#") else _perf_row(line.split())
        if rank:
            result["ranks"].append({"rank": int(rank.group(1)), "host": rank.group(2), "device": int(rank.group(3)),
                                    "bus_id": rank.group(4), "name": rank.group(5).strip()})
        elif avg:
            result["avg_busbw"] = float(avg.group(1))
        elif oob:
            result["out_of_bounds_ok"] = oob.group(2) == "OK"
            if oob.group(2) != "OK":
                result["errors"].append(line)
        elif row:
            result["rows"].append(row)
        elif not line.startswith("#") and re.search(r"failure|FAILED|NCCL WARN|\berror\b", line):
            result["errors"].append(line.strip())
    return result


def measured_bus_bandwidth(result: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The bus bandwidth a run reached at large sizes: {busbw, size}, or None without rows.

    "Avg bus bandwidth" averages every size, small ones too, so it understates a link; this takes the best busbw
    of the rows at least ``busbw.large_bytes`` big, or of the largest size when the run stopped below it.
    """
    rows = result.get("rows") or []
    if not rows:
        return None
    large = [row for row in rows if row["size"] >= threshold("busbw.large_bytes")["value"]]
    if not large:
        biggest = max(row["size"] for row in rows)
        large = [row for row in rows if row["size"] == biggest]
    best = max(large, key=lambda row: max(row["busbw_out"], row["busbw_in"]))
    return {"busbw": max(best["busbw_out"], best["busbw_in"]), "size": best["size"]}


# ------------------------------------------------------------------------------------------ NCCL_DEBUG=INFO

_VIA = re.compile(r"\bvia (\S+)")


def _transport(via: str) -> str:
    """``NET/IB/1/GDRDMA`` -> ``NET/IB``; ``P2P/IPC/read`` -> ``P2P/IPC``; ``SHM/direct/direct`` -> ``SHM``."""
    parts = via.split("/")
    if parts[0] == "NET" and len(parts) > 1:
        return "NET/" + parts[1]
    if parts[0] == "P2P" and len(parts) > 1:
        return "P2P/" + parts[1]
    return parts[0]


def parse_nccl_debug(text: str) -> dict[str, Any]:
    """An ``NCCL_DEBUG=INFO`` log: which network and transports NCCL chose, and whether it found IB.

    {version, network ("IB", "Socket", a plugin's name; None when not logged), ib_detected, ib_devices,
    ib_no_device, transports (sorted: NET/IB, NET/Socket, P2P/IPC, SHM, NVLS ...), gdrdma, nvls_available,
    warnings: [NCCL WARN lines]}.
    """
    info: dict[str, Any] = {"version": None, "network": None, "ib_detected": False, "ib_devices": [],
                            "ib_no_device": False, "transports": [], "gdrdma": False, "nvls_available": False,
                            "warnings": []}
    transports: set[str] = set()
    for raw in text.splitlines():
        line = _strip_tag(raw)
        version = re.search(r"NCCL version (\S+)", line)
        network = re.search(r"NCCL INFO Using network (.+?)\s*$", line)
        ib_using = re.search(r"NET/IB ?: Using (.*?)(?: \[RO\])?;", line)
        if version:
            info["version"] = version.group(1)
        if network:
            info["network"] = network.group(1)
        if ib_using:
            info["ib_detected"] = True
            info["ib_devices"] = re.findall(r"\[\d+\](\S+)", ib_using.group(1))
        if "NET/IB : No device found" in line:
            info["ib_no_device"] = True
        if "NVLS multicast support is available" in line:
            info["nvls_available"] = True
        if "Connected NVLS" in line:
            transports.add("NVLS")
        for via in _VIA.findall(line):
            transports.add(_transport(via))
            info["gdrdma"] = info["gdrdma"] or "/GDRDMA" in via
        if "NCCL WARN" in line:
            info["warnings"].append(line.strip())
    if info["network"]:
        transports.add("NET/" + info["network"])
    info["transports"] = sorted(transports)
    return info


# ------------------------------------------------------------------------------------------ bandwidth floor


def _link_line_rate(link: dict[str, Any]) -> float:
    """GB/s one way over one link entry: {kind: nvlink, generation | gbs_per_link, count}; {kind: pcie,
    generation, width}; {kind: net, rate_gbps, count} (rate as ibstat prints it)."""
    kind = link["kind"]
    if kind == "nvlink":
        per_link = link["gbs_per_link"] if "gbs_per_link" in link else threshold(
            f"nvlink.{link['generation']}.link_gbs")["value"]
        return per_link * link.get("count", 1)
    if kind == "pcie":
        return threshold(f"pcie.{link['generation']}.lane_gbs")["value"] * link["width"]
    if kind == "net":
        return link["rate_gbps"] * threshold("net.gbit_to_gbyte")["value"] * link.get("count", 1)
    raise ValueError(f"unknown link kind {kind!r} (nvlink, pcie or net)")


def bus_bandwidth_floor(links: list[dict[str, Any]]) -> dict[str, Any]:
    """The all_reduce busbw a healthy run should reach over ``links``: {floor_gbs, bottleneck, terms}.

    Pass the links the run crosses: inside a node a GPU's NVLink (or, without NVLink, its PCIe link); between nodes
    the network ports a node's ranks use (several entries of one kind add up). nccl-tests' busbw measures the
    slowest of these (SOURCES["busbw"]), so each kind gives line rate x its efficiency row, and the floor is the
    lowest. Each term names its rate and efficiency rows' sources.

    An entry may name its ``node`` (entries add up per kind and node: run_floor's terms), what it is (``what``) and
    the source of its rate (``source``, put before the efficiency row's).
    """
    terms: dict[tuple[str, Any], dict[str, Any]] = {}
    for link in links:
        term = terms.setdefault((link["kind"], link.get("node")), {"kind": link["kind"], "line_gbs": 0.0})
        term["line_gbs"] += _link_line_rate(link)
        for key in ("node", "what", "source"):
            if key in link and key not in term:
                term[key] = link[key]
    if not terms:
        raise ValueError("no links: pass the NVLink, PCIe or network links the all_reduce crosses")
    for term in terms.values():
        row = threshold("efficiency." + term["kind"])
        term.update(line_gbs=round(term["line_gbs"], 3), efficiency=row["value"],
                    floor_gbs=round(term["line_gbs"] * row["value"], 2),
                    source=f"{term['source']}; {row['source']}" if term.get("source") else row["source"])
    slowest = min(terms.values(), key=lambda term: term["floor_gbs"])
    return {"floor_gbs": slowest["floor_gbs"], "bottleneck": slowest["kind"], "terms": list(terms.values())}


def nvlink_links(gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """parse_nvlink_status -> the NVLink entry of the GPU with the least active bandwidth (it bounds the ring).

    None when that GPU has no active link: its traffic goes over PCIe, so pass its PCIe link instead.
    """
    if not gpus:
        return []
    slowest = min(gpus, key=lambda gpu: sum(link["speed_gbs"] or 0.0 for link in gpu["links"]))
    active = [link["speed_gbs"] for link in slowest["links"] if link["active"]]
    return [{"kind": "nvlink", "gbs_per_link": min(active), "count": len(active)}] if active else []


def net_links(ib: dict[str, list], link_layers: Iterable[str] = ("InfiniBand",)) -> list[dict[str, Any]]:
    """parse_ibstat/parse_ib_sysfs -> one network entry per Active port of ``link_layers``."""
    layers = set(link_layers)
    return [{"kind": "net", "rate_gbps": port["rate_gbps"], "count": 1} for port in ib.get("ports") or []
            if port["link_layer"] in layers and port["state"] == "Active" and port["rate_gbps"]]


def check_bus_bandwidth(result: dict[str, Any], floor: dict[str, Any]) -> list[dict[str, str]]:
    """An all_reduce_perf run that failed, saw wrong values, or stayed below ``floor`` (bus_bandwidth_floor)."""
    if result.get("errors") or not result.get("rows"):
        first = (result.get("errors") or ["no result rows"])[0]
        return [finding("nccl.all_reduce", FAIL, f"the run failed: {first}", "a complete run",
                        "fix the error named (a CUDA failure: driver, Fabric Manager, GPU state), then run it again",
                        SOURCES["busbw"])]
    wrong = sum(row["wrong"] for row in result["rows"])
    if wrong:
        return [finding("nccl.all_reduce", FAIL, f"{wrong} wrong values", "0 wrong values",
                        "run dcgmi diag -r 3 on every node; look for Xid events", SOURCES["busbw"])]
    measured = measured_bus_bandwidth(result)
    if measured["busbw"] >= floor["floor_gbs"]:
        return []
    term = next(term for term in floor["terms"] if term["kind"] == floor["bottleneck"])
    return [finding("nccl.busbw", FAIL, f"{measured['busbw']:g} GB/s busbw at {measured['size']} bytes",
                    f">= {floor['floor_gbs']:g} GB/s ({term['line_gbs']:g} GB/s {term['kind']} line rate"
                    f" x {term['efficiency']:g})",
                    "find the slow link: NCCL_DEBUG=INFO for the transport, nvidia-smi -q for PCIe, nvlink -s, ibstat",
                    term["source"])]


# ------------------------------------------------------------------------------------------ floors from the links found
#
# What `hvdcluster health --full` judges a run's bus bandwidth by: the links found on its nodes (node_links), turned into
# one term per link kind and node (run_floor, through bus_bandwidth_floor), each its line rate (THRESHOLDS' rate rows, or the speed the tool
# printed) times its efficiency row. nccl-tests' busbw is a per-rank figure that measures the slowest link a ring
# crosses (SOURCES["busbw"]): inside a node a GPU's NVLink (through NVSwitch, or between two GPUs), else its PCIe link;
# between nodes the RDMA ports a node's ranks use, together (every ring crosses a node's boundary through one of
# them). The floor is the lowest term, named with its node.


def node_links(smi: dict[str, Any], nvlink: list[dict[str, Any]], ib: Optional[dict[str, list]], nvswitch: bool,
               modules: Optional[Iterable[str]], gpus: int) -> dict[str, Any]:
    """The links one node's ranks use, from its readings: parse_nvidia_smi_q (``smi``), parse_nvlink_status
    (``nvlink``), parse_ib_sysfs (``ib``, None without /sys/class/infiniband), NVSwitches on its bus, its loaded modules
    and ``gpus`` (the ranks it runs).

    {gpus, nvlink: {per_link_gbs, count} of the GPU with the least active NVLink (None: no active link), nvswitch,
    pcie: {generation, width} of the GPU with the slowest PCIe link as GPU and slot support it (Max: an idle link
    trains down, check_pcie), net: [Active RDMA ports, fastest first], peermem}.
    """
    links = nvlink_links(nvlink)
    pcie = None
    rated = [gpu["pcie"] for gpu in smi.get("gpus") or [] if gpu["pcie"]["gen_max"] and gpu["pcie"]["width_max"]]
    if rated:
        slowest = min(rated, key=lambda link: threshold_or(f"pcie.{link['gen_max']}.lane_gbs") * link["width_max"])
        pcie = {"generation": slowest["gen_max"], "width": slowest["width_max"]}
    ports = [port for port in (ib or {}).get("ports") or []
             if port["state"] == "Active" and port.get("physical_state", "LinkUp") == "LinkUp" and port["rate_gbps"]]
    return {"gpus": int(gpus), "nvswitch": bool(nvswitch), "pcie": pcie,
            "nvlink": {"per_link_gbs": links[0]["gbs_per_link"], "count": links[0]["count"]} if links else None,
            "net": sorted(({"ca": port["ca"], "port": port["port"], "rate_gbps": port["rate_gbps"],
                            "link_layer": port["link_layer"]} for port in ports), key=lambda port: -port["rate_gbps"]),
            "peermem": "nvidia_peermem" in set(modules or ())}


def threshold_or(row_id: str, default: float = 0.0) -> float:
    """THRESHOLDS' value of ``row_id``, ``default`` where there is no such row (a PCIe generation not in the table)."""
    try:
        return float(threshold(row_id)["value"])
    except KeyError:
        return default


def _intra_links(node: str, links: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """A node's GPU-to-GPU link entry (it runs two ranks or more), or ([], why none can be derived)."""
    nvlink, pcie = links["nvlink"], links["pcie"]
    if nvlink and (links["nvswitch"] or links["gpus"] == 2):
        how = "through NVSwitch" if links["nvswitch"] else "between its 2 GPUs"
        source = SOURCES["nvswitch"] if links["nvswitch"] else SOURCES["nvlink_speeds"]
        return [{"kind": "nvlink", "gbs_per_link": nvlink["per_link_gbs"], "count": nvlink["count"], "node": node,
                 "what": f"{nvlink['count']} NVLink links x {nvlink['per_link_gbs']:g} GB/s {how}",
                 "source": source}], ""
    if pcie and threshold_or(f"pcie.{pcie['generation']}.lane_gbs"):
        what = f"PCIe Gen{pcie['generation']} x{pcie['width']}"
        source = threshold(f"pcie.{pcie['generation']}.lane_gbs")["source"]
        if nvlink:  # a ring among more than two GPUs without NVSwitch may cross PCIe: judged by the slower path
            what += f" (NVLink without NVSwitch among {links['gpus']} GPUs: rings may cross PCIe)"
            source += f"; {SOURCES['nvlink_mesh']}"
        return [{"kind": "pcie", "generation": pcie["generation"], "width": pcie["width"], "node": node,
                 "what": what, "source": source}], ""
    return [], f"{node}: neither NVLink nor a PCIe link rate was read for its GPUs"


def _net_links(node: str, links: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """A node's network entries: its fastest Active RDMA ports, one a rank at most (NCCL gives each GPU its nearest
    NIC: counting more ports than ranks would set the floor above what the run can use)."""
    used = links["net"][:max(links["gpus"], 1)]
    if not used:
        return [], (f"{node}: no Active InfiniBand or RoCE port (/sys/class/infiniband): the network floor cannot "
                    "be derived (an Ethernet NIC's speed is not read)")
    rates = sorted({port["rate_gbps"] for port in used}, reverse=True)
    what = " + ".join(f"{sum(1 for port in used if port['rate_gbps'] == rate)} x {rate:g} Gb/s" for rate in rates)
    first = {"node": node, "what": f"{what} RDMA port{'s' if len(used) > 1 else ''}", "source": SOURCES["ib_sysfs"]}
    return [{"kind": "net", "rate_gbps": port["rate_gbps"], "count": 1, **(first if i == 0 else {"node": node})}
            for i, port in enumerate(used)], ""


def run_floor(nodes: dict[str, dict[str, Any]], given: Optional[float] = None) -> dict[str, Any]:
    """The busbw floor of a run over ``nodes`` (node -> node_links): {floor_gbs, bottleneck, terms, given,
    not_applicable}, from bus_bandwidth_floor over every node's link entries.

    ``floor_gbs`` is the lowest term's (``bottleneck``: that term's kind and node); None with ``not_applicable`` saying
    why: fewer than two ranks (an all_reduce over one rank moves nothing: busbw = algbw x 2(n-1)/n = 0), or a link no
    term can be derived for. ``given``: an operator's floor in GB/s (``--floor``), used instead of the derived one
    (the terms are still listed).
    """
    ranks = sum(links["gpus"] for links in nodes.values())
    out: dict[str, Any] = {"floor_gbs": None, "bottleneck": None, "terms": [], "given": given, "not_applicable": None}
    if ranks < 2:
        out["not_applicable"] = (f"{ranks} rank{'s' if ranks != 1 else ''}: an all_reduce over one GPU moves no data "
                                 "(busbw = algbw x 2(n-1)/n = 0), so nothing can be judged; the quick read judges "
                                 "that GPU")
        return out
    entries, missing = [], []
    for node, links in nodes.items():
        for wanted, derive in ((links["gpus"] >= 2, _intra_links), (len(nodes) > 1, _net_links)):
            if wanted:
                found, why = derive(node, links)
                entries += found
                missing += [why] if why else []
    out["terms"] = bus_bandwidth_floor(entries)["terms"] if entries else []
    if given is not None:
        out.update(floor_gbs=round(float(given), 2), bottleneck={"kind": "given", "node": None})
        return out
    if missing:
        out["not_applicable"] = "; ".join(missing) + " (give --floor to judge the run against a floor of your own)"
        return out
    slowest = min(out["terms"], key=lambda term: term["floor_gbs"])
    out.update(floor_gbs=slowest["floor_gbs"], bottleneck={"kind": slowest["kind"], "node": slowest["node"]})
    return out


def bottleneck_term(floor: dict[str, Any]) -> Optional[dict[str, Any]]:
    """run_floor's term that sets the floor (None for a given floor or none)."""
    want = floor.get("bottleneck") or {}
    return next((t for t in floor.get("terms") or [] if (t["kind"], t["node"]) == (want.get("kind"), want.get("node"))),
                None)


def largest_size_busbw(result: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The bus bandwidth of a perf run's largest size (out-of-place or in-place, the better): {busbw, size}."""
    rows = result.get("rows") or []
    if not rows:
        return None
    biggest = max(rows, key=lambda row: row["size"])
    return {"busbw": max(biggest["busbw_out"], biggest["busbw_in"]), "size": biggest["size"]}


def check_run(result: dict[str, Any], floor: dict[str, Any], collective: str = "all_reduce") -> list[dict[str, str]]:
    """A perf run (parse_nccl_perf) that failed, saw wrong values, or whose largest size stayed below ``floor``
    (run_floor; not judged where the floor is not applicable)."""
    item = f"nccl.{collective}"
    if result.get("errors") or not result.get("rows"):
        first = (result.get("errors") or ["no result rows"])[0]
        return [finding(item, FAIL, f"the run failed: {first}", "a complete run",
                        "fix the error named (a CUDA failure: driver, Fabric Manager, GPU state), then run it again",
                        SOURCES["busbw"])]
    wrong = sum(row["wrong"] for row in result["rows"])
    if wrong:
        return [finding(item, FAIL, f"{wrong} wrong values", "0 wrong values",
                        "run dcgmi diag -r 3 on every node; look for Xid events", SOURCES["busbw"])]
    measured = largest_size_busbw(result)
    if floor.get("floor_gbs") is None or measured["busbw"] >= floor["floor_gbs"]:
        return []
    if floor["bottleneck"]["kind"] == "given":
        expected, source = f">= {floor['floor_gbs']:g} GB/s (--floor)", "the operator's --floor"
    else:
        term = bottleneck_term(floor)
        expected = (f">= {floor['floor_gbs']:g} GB/s ({term['node']}: {term['what']}, {term['line_gbs']:g} GB/s line "
                    f"rate x {term['efficiency']:g})")
        source = term["source"]
    return [finding(f"nccl.busbw.{collective}", FAIL, f"{measured['busbw']:g} GB/s busbw at {measured['size']} bytes",
                    expected, "find the slow node or link (health --full names it): NCCL_DEBUG=INFO for the "
                    "transport, nvidia-smi -q for PCIe, nvidia-smi nvlink -s, ibstat", source)]


def check_ranks(result: dict[str, Any], expected: int) -> list[dict[str, str]]:
    """A run whose ``# Rank`` lines name another number of ranks than one per GPU of its nodes."""
    ranks = len(result.get("ranks") or [])
    if not result.get("rows") or not ranks or ranks == expected:
        return []
    return [finding("nccl.ranks", FAIL, f"{ranks} ranks reported", f"{expected} ranks (one per GPU)",
                    "check every node's GPUs are visible (nvidia-smi, CUDA_VISIBLE_DEVICES)", SOURCES["busbw"])]


def check_nccl_transport(nccl: dict[str, Any], ib: dict[str, list]) -> list[dict[str, str]]:
    """NCCL fell back to TCP sockets although an InfiniBand port is Active (check_run_transport's rule, judged against
    one node's ports)."""
    active = [port for port in ib.get("ports") or []
              if port["link_layer"] == "InfiniBand" and port["state"] == "Active"]
    if not active:
        return []
    names = ", ".join(f"{port['ca']}/{port['port']}" for port in active)
    return [f for f in check_run_transport(nccl, "IB", False, expected_text=f"NET/IB over the Active ports ({names})")
            if f["item"] == "nccl.transport"]


def check_run_transport(nccl: dict[str, Any], expected: Optional[str], gdr: bool, nvlink: bool = False,
                        expected_text: Optional[str] = None) -> list[dict[str, str]]:
    """What NCCL used (parse_nccl_debug) against what the nodes offer.

    ``expected``: the network every node of a multi-node run offers ("IB" where each has an Active InfiniBand or RoCE
    port, or what the operator gave with --transport; None: not judged). Another network is a failure that names both.
    ``gdr``: GPUs and nvidia_peermem on every node, so GPUDirect RDMA is there to use: IB without it is a warning (NCCL
    skips it where GPU and NIC are far apart). ``nvlink``: one node's GPUs share NVLink, so NCCL should go GPU to GPU
    (P2P); only host memory (SHM) is a warning (ACS or a container without the GPUs' peer access).
    """
    findings: list[dict[str, str]] = []
    if not nccl.get("version") and not nccl.get("transports"):
        if expected or nvlink:
            findings.append(finding("nccl.debug", WARN, "no NCCL INFO line in the run's output",
                                    "NCCL_DEBUG=INFO lines naming the network and transports",
                                    "check NCCL_DEBUG is not overridden in /etc/nccl.conf or ~/.nccl.conf",
                                    SOURCES["nccl_net"]))
        return findings
    used = nccl.get("network") or next((t[4:] for t in nccl.get("transports") or [] if t.startswith("NET/")), None)
    if expected and used and used != expected:
        said = f"NCCL used NET/{used}" + (" (NET/IB : No device found)" if nccl.get("ib_no_device") else "")
        wanted = expected_text or f"NET/{expected}, which every node offers"
        findings.append(finding("nccl.transport", FAIL, said, wanted,
                                "make /dev/infiniband and libibverbs visible to the job (containers: --device "
                                "/dev/infiniband); unset NCCL_IB_DISABLE; check NCCL_IB_HCA names the Active ports",
                                SOURCES["nccl_net"]))
    elif expected == "IB" and used == "IB" and gdr and not nccl.get("gdrdma"):
        findings.append(finding("nccl.gdrdma", WARN, "NCCL used NET/IB without GPUDirect RDMA",
                                "via NET/IB/<n>/GDRDMA (nvidia_peermem is loaded on every node)",
                                "check nvidia-smi topo -m (GPU and NIC under one PCIe switch), NCCL_NET_GDR_LEVEL, and "
                                "ACS on the bridges between them", SOURCES["nccl_gdr"]))
    transports = set(nccl.get("transports") or [])
    if nvlink and "SHM" in transports and not any(t.startswith("P2P") or t == "NVLS" for t in transports):
        findings.append(finding("nccl.p2p", WARN, "NCCL moved GPU-to-GPU data through host memory (SHM)",
                                "P2P over NVLink", "check ACS (health's pcie.acs items), NCCL_P2P_DISABLE, and that "
                                "a container sees every GPU", SOURCES["acs"]))
    return findings
