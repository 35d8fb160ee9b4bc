"""Host names: the one RFC 1123 rule that hosts.yaml's loader (hvdcluster.spec) and the pre-flight (a node's own
hostname, plugins/filter/hvd_preflight.py) both apply. Standard library only."""

from __future__ import annotations


def hostname_problem(name: str) -> str | None:
    """Why ``name`` (already lower-cased) is not an RFC 1123 hostname, or None when it is one."""
    if len(name) > 253:
        return f"it is {len(name)} characters long (at most 253)"
    labels = name.split(".")
    for label in labels:
        if not label:
            return "it has an empty label (a leading, trailing or doubled '.')"
        if len(label) > 63:
            return f"label '{label[:16]}...' is {len(label)} characters long (at most 63)"
        bad = next((char for char in label if not (char.isascii() and (char.isalnum() or char == "-"))), None)
        if bad is not None:
            return f"bad character {bad!r} in label '{label}' (allowed: a-z, 0-9 and '-')"
        if label.startswith("-"):
            return f"label '{label}' starts with a hyphen"
        if label.endswith("-"):
            return f"label '{label}' ends with a hyphen"
    if all(label.isdigit() for label in labels):
        return "it looks like an IPv4 address but is not a valid one"
    if labels[-1].isdigit():
        return f"its last label '{labels[-1]}' is all digits"
    return None
