"""A drift report as text and as JSON: in-sync nodes folded on one line, one block per distinct set of differences, the
lines a converge left wrong, the notices, and ``check``'s exit code. :mod:`hvdcluster.drift` decides what differs;
this module only says it."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import ABSENT

from .drift import NOTICE_ITEMS, UNREPAIRABLE, Difference, Report, canon, in_order
from .output import VALUE_WIDTH, fold, show

def render_notices(notes: Mapping[str, Mapping[str, Any]], order: Sequence[str] | None = None) -> str:
    """The notices as text: nodes with the same one folded on one line, its value's lines under it."""
    groups: dict[tuple[str, str], tuple[list[str], Any]] = {}
    for node in in_order(order, notes):
        for item, value in sorted((notes.get(node) or {}).items()):
            groups.setdefault((item, canon(value)), ([], value))[0].append(node)
    lines = []
    for (item, _), (nodes, value) in groups.items():
        lines.append(f"{fold(nodes)}: notice: {item}: {NOTICE_ITEMS.get(item, item)} (not a drift):")
        lines.extend(f"    {show(line, LINE_WIDTH)}" for line in str(value).split("\n"))
    return "\n".join(lines) + ("\n" if lines else "")



def unrepaired_lines(report: Report) -> list[str]:
    """One line per node and item that still differs: what was expected and found, and which role failed to repair
    it (or that no role repairs it)."""
    lines = []
    for node in report.nodes:
        for d in sorted(report.drifted.get(node, []), key=lambda d: d.item):
            why = f"{d.role} did not repair it" if d.role else UNREPAIRABLE
            lines.append(f"{node}: {d.item}: {what_differs(d)} ({why})")
    return lines


# Managed blocks the state module reads as text (plugins/module_utils/hvd_state_mesh.block_text): a difference names the lines.
BLOCK_ITEMS = ("base.hosts", "mesh.ssh_config")
# Items read as lines of text, "<file>: <line>" or ssh's "<option> <value>", where "absent" is no line at all
# (plugins/module_utils/hvd_state_mesh.launch_state): a difference names the file and the line, shown this wide.
LINE_PREFIXES = ("launch.",)
LINE_WIDTH = 100


def what_differs(d: Difference) -> str:
    """"expected X, found Y"; for a managed block or launch item read as text, only the lines that differ."""
    texts = isinstance(d.expected, str) and isinstance(d.found, str)
    lines = texts and d.item.startswith(LINE_PREFIXES)
    if lines or (texts and d.item in BLOCK_ITEMS and ABSENT not in (d.expected, d.found)):
        want, have = ([] if lines and text == ABSENT else text.split("\n") for text in (d.expected, d.found))
        width = LINE_WIDTH if lines else VALUE_WIDTH
        parts = ([f"line expected {show(line, width)}" for line in want if line not in have]
                 + [f"line found {show(line, width)}" for line in have if line not in want])
        if parts:
            return ", ".join(parts)
    return f"expected {show(d.expected)}, found {show(d.found)}"


def _line(d: Difference) -> str:
    repair = f"repair: {d.role}" if d.role else "repair: by hand"
    if d.note:
        repair = f"{d.note}; {repair}"
    return f"  {d.item}: {what_differs(d)} ({repair})"


def _blocks(report: Report) -> list[tuple[list[str], list[Difference]]]:
    """Drifted nodes grouped by identical difference sets, in order of their first node."""
    groups: dict[tuple, tuple[list[str], list[Difference]]] = {}
    for node in report.nodes:
        diffs = report.drifted.get(node)
        if not diffs:
            continue
        diffs = sorted(diffs, key=lambda d: (d.item, d.note))
        key = tuple(d.key() for d in diffs)
        groups.setdefault(key, ([], diffs))[0].append(node)
    return list(groups.values())


def render(report: Report) -> str:
    """The drift report as text: in-sync nodes folded on one line, one block per distinct difference set."""
    lines: list[str] = []
    if report.in_sync:
        lines.append(f"{fold(report.in_sync)}: in sync")
    for nodes, diffs in _blocks(report):
        first = report.first_role(nodes[0])
        how = f"repair from {first}" if first else "repair by hand"
        lines.append(f"{fold(nodes)}: drifted ({how})")
        lines.extend(_line(d) for d in diffs)
    if report.unreachable:
        lines.append(f"unreachable: {fold(report.unreachable)}")
    return "\n".join(lines) + ("\n" if lines else "")


def exit_code(report: Report) -> int:
    """0: every node in sync; 1: a node drifted or could not be read."""
    return 1 if report.drifted or report.unreachable else 0


def to_json(report: Report) -> dict[str, Any]:
    """The report for ``--json``."""
    return {
        "in_sync": list(report.in_sync),
        "drifted": {
            node: [
                {"item": d.item, "expected": d.expected, "found": d.found, "role": d.role, "note": d.note}
                for d in sorted(report.drifted[node], key=lambda d: (d.item, d.note))
            ]
            for node in report.nodes
            if node in report.drifted
        },
        "unreachable": list(report.unreachable),
        "exit": exit_code(report),
    }
