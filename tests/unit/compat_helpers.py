"""What the resolver's tests share (test_compat.py, test_compat_matrix.py, test_compat_rules.py,
test_compat_gpu_repo.py): a Debian 12 node with GPUs, and a stack's refusal with the one conflict of a rule."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hvdcluster.compat import Conflict, NodeInfo, ResolveError, resolve

ROOT = Path(__file__).resolve().parents[2]
DEBIAN12 = NodeInfo(os_id="debian", os_version="12", gcc="12.2.0", python="3.11.2")
A100 = "NVIDIA A100-SXM4-80GB"


def _gpu_node(*gpus: str, **changes: str) -> NodeInfo:
    return dataclasses.replace(DEBIAN12, gpus=gpus, **changes)


def _refusal(stack: dict, node: NodeInfo | None = DEBIAN12, **kwargs: bool) -> list[Conflict]:
    with pytest.raises(ResolveError) as caught:
        resolve(stack, node, **kwargs)
    return caught.value.conflicts


def _only(conflicts: list[Conflict], rule: str) -> Conflict:
    hits = [c for c in conflicts if c.rule == rule]
    assert len(hits) == 1, f"expected one {rule!r} conflict in {[c.rule for c in conflicts]}"
    return hits[0]


def _assert_names_both(conflict: Conflict, first: str, second: str) -> None:
    assert conflict.choices == (first, second)
    assert conflict.source.startswith(("https://", "http://"))
    assert "\n" not in conflict.message
