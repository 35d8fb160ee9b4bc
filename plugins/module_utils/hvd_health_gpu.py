"""Parsers of a GPU node's own tools: ``nvidia-smi -q`` (text or ``-x`` XML), ``nvidia-smi nvlink -s``, the kernel
log (Xid, SXid), ``dcgmi diag`` (table or JSON) and the Fabric Manager journal, each into plain dicts and lists that
hvd_health's rules judge; and the small readers of their values (a PCI address, a count, a yes/no).

Stdlib only and Python 3.9+, without Ansible: it runs on nodes and the CLI imports it.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from typing import Any, Iterable, Optional


def leading_int(value: Any) -> Optional[int]:
    """The leading integer of a reading ("16x" -> 16, "4" -> 4); None for N/A and the like."""
    match = re.match(r"\s*(\d+)", str(value)) if value is not None else None
    return int(match.group(1)) if match else None


def flag(value: Any) -> Optional[bool]:
    """Yes/Enabled -> True, No/Disabled -> False, N/A (or missing) -> None."""
    text = str(value or "").strip().lower()
    if text in ("yes", "enabled", "true", "1"):
        return True
    if text in ("no", "disabled", "false", "0"):
        return False
    return None


def bus_id(text: str) -> str:
    """A PCI address in one spelling, lower case: ``0000:07:00.0`` from ``00000000:07:00.0``, ``PCI:0000:0f:00``."""
    match = re.search(r"([0-9a-fA-F]+):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.([0-7]))?", text)
    if not match:
        return text.strip().lower()
    domain, bus, device, function = match.groups()
    return f"{int(domain, 16):04x}:{bus.lower()}:{device.lower()}.{function or '0'}"


# ------------------------------------------------------------------------------------------ nvidia-smi -q


def _indent_tree(lines: Iterable[str]) -> dict[str, Any]:
    """``Key : value`` lines nested by indentation into dicts (a section is a key without a value; first one wins)."""
    root: dict[str, Any] = {}
    stack: list[tuple[int, dict[str, Any]]] = [(-1, root)]
    for raw in lines:
        body = raw.strip()
        if not body:
            continue
        indent = len(raw) - len(raw.lstrip())
        while stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        key, sep, value = body.partition(" : ") if " : " in body else body.partition(":")
        if sep:
            parent.setdefault(key.strip(), value.strip())
            continue
        child: dict[str, Any] = {}
        if body not in parent:
            parent[body] = child
        stack.append((indent, child))
    return root


def _get(tree: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(tree, dict):
            return None
        tree = tree.get(key)
    return tree


def _uncorrectable(section: Any) -> Optional[int]:
    """The sum of a volatile/aggregate ECC section's uncorrectable counters (None when all are N/A)."""
    if not isinstance(section, dict):
        return None
    if "Double Bit" in section:  # drivers before the SRAM/DRAM split
        return leading_int(_get(section, "Double Bit", "Total"))
    counts = [leading_int(value) for key, value in section.items() if "Uncorrectable" in key and not isinstance(value, dict)]
    counts = [count for count in counts if count is not None]
    return sum(counts) if counts else None


def _gpu_from_text(header: str, tree: dict[str, Any]) -> dict[str, Any]:
    link = _get(tree, "PCI", "GPU Link Info") or {}
    retired = tree.get("Retired Pages") or {}
    remap = tree.get("Remapped Rows")
    return {
        "bus_id": bus_id(_get(tree, "PCI", "Bus Id") or header),
        "name": tree.get("Product Name"),
        "persistence_mode": flag(tree.get("Persistence Mode")),
        "ecc_mode": _get(tree, "ECC Mode", "Current"),
        "ecc_uncorrectable": {"volatile": _uncorrectable(_get(tree, "ECC Errors", "Volatile")),
                              "aggregate": _uncorrectable(_get(tree, "ECC Errors", "Aggregate"))},
        "retired_pages": {"single_bit": leading_int(retired.get("Single Bit ECC")),
                          "double_bit": leading_int(retired.get("Double Bit ECC")),
                          "pending": flag(retired.get("Pending Page Blacklist") or retired.get("Pending"))},
        "remapped_rows": {"correctable": leading_int(_get(remap, "Correctable Error")),
                          "uncorrectable": leading_int(_get(remap, "Uncorrectable Error")),
                          "pending": flag(_get(remap, "Pending")),
                          "failure": flag(_get(remap, "Remapping Failure Occurred"))},
        "pcie": {"gen_current": leading_int(_get(link, "PCIe Generation", "Current")),
                 "gen_max": leading_int(_get(link, "PCIe Generation", "Max")),
                 "width_current": leading_int(_get(link, "Link Width", "Current")),
                 "width_max": leading_int(_get(link, "Link Width", "Max"))},
    }


def parse_nvidia_smi_q(text: str) -> dict[str, Any]:
    """``nvidia-smi -q`` (or ``-a``, or ``-q -d SECTION``): driver and CUDA versions and one dict per GPU.

    A GPU: bus_id, name, persistence_mode (bool), ecc_mode, ecc_uncorrectable {volatile, aggregate},
    retired_pages {single_bit, double_bit, pending}, remapped_rows {correctable, uncorrectable, pending, failure},
    pcie {gen_current, gen_max, width_current, width_max}; None where the output says N/A or lacks the section.
    """
    head: list[str] = []
    blocks: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("="):
            continue
        if line.startswith("GPU "):
            blocks.append((line[4:].strip(), []))
        elif blocks:
            blocks[-1][1].append(line)
        else:
            head.append(line)
    top = _indent_tree(head)
    return {"driver_version": top.get("Driver Version"), "cuda_version": top.get("CUDA Version"),
            "attached_gpus": leading_int(top.get("Attached GPUs")),
            "gpus": [_gpu_from_text(header, _indent_tree(lines)) for header, lines in blocks]}


def _xml_text(node: Optional[ET.Element], path: str) -> Optional[str]:
    found = node.find(path) if node is not None else None
    return found.text.strip() if found is not None and found.text else None


def _xml_uncorrectable(section: Optional[ET.Element]) -> Optional[int]:
    if section is None:
        return None
    if section.find("double_bit") is not None:
        return leading_int(_xml_text(section, "double_bit/total"))
    counts = [leading_int(child.text) for child in section if "uncorrectable" in child.tag]
    counts = [count for count in counts if count is not None]
    return sum(counts) if counts else None


def _gpu_from_xml(gpu: ET.Element) -> dict[str, Any]:
    link = gpu.find("pci/pci_gpu_link_info")
    retired = gpu.find("retired_pages")
    remap = gpu.find("remapped_rows")
    return {
        "bus_id": bus_id(_xml_text(gpu, "pci/pci_bus_id") or gpu.get("id", "")),
        "name": _xml_text(gpu, "product_name"),
        "persistence_mode": flag(_xml_text(gpu, "persistence_mode")),
        "ecc_mode": _xml_text(gpu, "ecc_mode/current_ecc"),
        "ecc_uncorrectable": {"volatile": _xml_uncorrectable(gpu.find("ecc_errors/volatile")),
                              "aggregate": _xml_uncorrectable(gpu.find("ecc_errors/aggregate"))},
        "retired_pages": {"single_bit": leading_int(_xml_text(retired, "multiple_single_bit_retirement/retired_count")),
                          "double_bit": leading_int(_xml_text(retired, "double_bit_retirement/retired_count")),
                          "pending": flag(_xml_text(retired, "pending_retirement")
                                          or _xml_text(retired, "pending_blacklist"))},
        "remapped_rows": {"correctable": leading_int(_xml_text(remap, "remapped_row_corr")),
                          "uncorrectable": leading_int(_xml_text(remap, "remapped_row_unc")),
                          "pending": flag(_xml_text(remap, "remapped_row_pending")),
                          "failure": flag(_xml_text(remap, "remapped_row_failure"))},
        "pcie": {"gen_current": leading_int(_xml_text(link, "pcie_gen/current_link_gen")),
                 "gen_max": leading_int(_xml_text(link, "pcie_gen/max_link_gen")),
                 "width_current": leading_int(_xml_text(link, "link_widths/current_link_width")),
                 "width_max": leading_int(_xml_text(link, "link_widths/max_link_width"))},
    }


def parse_nvidia_smi_q_xml(text: str) -> dict[str, Any]:
    """``nvidia-smi -q -x``: the same shape as parse_nvidia_smi_q."""
    root = ET.fromstring(re.sub(r"<!DOCTYPE[^>]*>", "", text, count=1))
    return {"driver_version": _xml_text(root, "driver_version"), "cuda_version": _xml_text(root, "cuda_version"),
            "attached_gpus": leading_int(_xml_text(root, "attached_gpus")),
            "gpus": [_gpu_from_xml(gpu) for gpu in root.findall("gpu")]}


# ------------------------------------------------------------------------------------------ nvidia-smi nvlink -s

_NVLINK_GPU = re.compile(r"^GPU (\d+): (.*?)\s*\(UUID: ([^)]*)\)")
_NVLINK_LINK = re.compile(r"^\s+Link (\d+): (?:([\d.]+) GB/s|<inactive>)")


def parse_nvlink_status(text: str) -> list[dict[str, Any]]:
    """``nvidia-smi nvlink -s``: per GPU {index, name, uuid, links: [{link, speed_gbs, active}], all_inactive}.

    ``all_inactive`` is set when NVML says it cannot read NVLink because every link is inactive.
    """
    gpus: list[dict[str, Any]] = []
    for line in text.splitlines():
        head = _NVLINK_GPU.match(line)
        link = _NVLINK_LINK.match(line)
        if head:
            gpus.append({"index": int(head.group(1)), "name": head.group(2), "uuid": head.group(3), "links": [],
                         "all_inactive": False})
        elif link and gpus:
            speed = float(link.group(2)) if link.group(2) else None
            gpus[-1]["links"].append({"link": int(link.group(1)), "speed_gbs": speed, "active": speed is not None})
        elif "all links are inactive" in line and gpus:
            gpus[-1]["all_inactive"] = True
    return gpus


# ------------------------------------------------------------------------------------------ kernel log

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+), (.*)$")
_SXID = re.compile(r"(nvidia-nvswitch\d*): SXid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+), (.*)$")
_PID = re.compile(r"pid=([^,]*), name=([^,]*), (.*)$")


def parse_kernel_log(text: str) -> dict[str, list[dict[str, Any]]]:
    """Xid and SXid events in dmesg or journal lines.

    ``xid``: [{bus_id, code, pid, process, message}]; ``sxid``: [{switch, bus_id, code, severity, message}] where
    severity is ``Fatal``/``Non-fatal`` when the line says so (NVSwitch detail lines say neither: None).
    """
    xids: list[dict[str, Any]] = []
    sxids: list[dict[str, Any]] = []
    for line in text.splitlines():
        sxid = _SXID.search(line)
        xid = _XID.search(line)
        if sxid:
            message = sxid.group(4)
            severity = next((word for word in ("Non-fatal", "Fatal") if message.startswith(word + ",")), None)
            sxids.append({"switch": sxid.group(1), "bus_id": bus_id(sxid.group(2)), "code": int(sxid.group(3)),
                          "severity": severity, "message": message})
        elif xid:
            pid = _PID.match(xid.group(3))
            xids.append({"bus_id": bus_id(xid.group(1)), "code": int(xid.group(2)),
                         "pid": pid.group(1).strip("'") if pid else None, "process": pid.group(2) if pid else None,
                         "message": pid.group(3) if pid else xid.group(3)})
    return {"xid": xids, "sxid": sxids}


# ------------------------------------------------------------------------------------------ DCGM diagnostics

_DETAIL_ROWS = ("Error", "Warning", "Info")


def _dcgm_cell(cell: str) -> str:
    """A result cell's text without its padding (one space before, two after: dcgmi wraps at a fixed width)."""
    return cell[1:-2] if len(cell) > 3 else cell.strip()


def _dcgm_rows(text: str) -> list[tuple[str, str, str]]:
    """(category, name, value) per table row, wrapped values joined back."""
    rows: list[list[str]] = []
    category = ""
    for line in text.splitlines():
        header = re.match(r"^[|+]-+\s+(\w[\w ]*?)\s+-+\+", line)
        if header:
            category = header.group(1)
            continue
        cells = line.split("|")
        if len(cells) != 4 or line.startswith("+"):
            continue
        name, value = cells[1].strip(), _dcgm_cell(cells[2])
        if name:
            rows.append([category, name, value])
        elif rows:
            rows[-1][2] += value
    return [(category, name, " ".join(value.split())) for category, name, value in rows]


def _diag_result(tests: list[dict[str, Any]], metadata: dict[str, str]) -> dict[str, Any]:
    failed = [test for test in tests if test["result"].lower().startswith("fail")]
    return {"passed": bool(tests) and not failed, "metadata": metadata, "tests": tests,
            "failed": [test["name"] for test in failed]}


def parse_dcgmi_diag(text: str) -> dict[str, Any]:
    """``dcgmi diag -r N`` (the table): {passed, metadata, tests: [{category, name, result, details}], failed}.

    ``details`` are the Error/Warning/Info rows printed under a test. A table printed twice counts once.
    """
    metadata: dict[str, str] = {}
    tests: dict[tuple[str, str], dict[str, Any]] = {}
    last: Optional[dict[str, Any]] = None
    for category, name, value in _dcgm_rows(text):
        if category == "Metadata":
            metadata[name] = value
        elif name in _DETAIL_ROWS and last is not None:
            last["details"].append(f"{name}: {value}")
        elif name != "Diagnostic":
            last = {"category": category, "name": name, "result": value, "details": []}
            tests[(category, name)] = last
    return _diag_result(list(tests.values()), metadata)


def _json_details(result: dict[str, Any]) -> list[str]:
    details = []
    for key in ("warnings", "info"):
        for entry in result.get(key) or []:
            text = entry.get("warning") or entry.get("info") if isinstance(entry, dict) else entry
            details.append(f"{key}: {text}")
    return details


def parse_dcgmi_diag_json(text: str) -> dict[str, Any]:
    """``dcgmi diag -r N -j`` (DCGM 3.x shape, anything before the first ``{`` skipped): parse_dcgmi_diag's shape.

    A test's result is its worst status over its per-GPU results (FAIL > WARN > PASS > SKIP).
    """
    document = json.loads(text[text.index("{"):])
    body = document.get("DCGM GPU Diagnostic", document)
    order = ["SKIP", "PASS", "WARN", "FAIL"]
    tests = []
    for category in body.get("test_categories") or []:
        for test in category.get("tests") or []:
            if not test:
                continue
            results = [result for result in test.get("results") or [] if result]
            statuses = [str(result.get("status", "")).upper() for result in results]
            worst = max(statuses, key=lambda status: order.index(status) if status in order else 0, default="")
            tests.append({"category": category.get("category", ""), "name": test.get("name", ""),
                          "result": worst.capitalize(),
                          "details": [detail for result in results for detail in _json_details(result)]})
    return _diag_result(tests, {"DCGM Version": body.get("version", "")})


# ------------------------------------------------------------------------------------------ Fabric Manager

_FM_MISMATCH = re.compile(r"driver interface version (\S+) don't match with driver version ([^\s.]+(?:\.\d+)*)")


def parse_fabricmanager_log(text: str) -> dict[str, Any]:
    """Fabric Manager journal or log lines: {fm_version, driver_version, mismatch, failed, errors: [lines]}.

    ``driver_version`` is only known from a mismatch line; ``failed``: the unit exited with a failure.
    """
    info: dict[str, Any] = {"fm_version": None, "driver_version": None, "mismatch": False, "failed": False,
                            "errors": []}
    for line in text.splitlines():
        mismatch = _FM_MISMATCH.search(line)
        running = re.search(r"Fabric Manager version (\S+) is running", line)
        if mismatch:
            info.update(fm_version=mismatch.group(1), driver_version=mismatch.group(2), mismatch=True)
        elif running:
            info["fm_version"] = running.group(1)
        if "status=1/FAILURE" in line or "Failed to start" in line:
            info["failed"] = True
        if mismatch or "[ERROR]" in line or "failed with error" in line:
            info["errors"].append(line.strip())
    return info
