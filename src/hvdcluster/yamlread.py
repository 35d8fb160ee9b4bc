"""YAML that hvdcluster reads on every run (the collection's own task files, defaults and playbooks, the version
matrix), parsed by libyaml where PyYAML was built with it: its C parser takes a tenth of the pure-Python one's time
(0.6 s of CPU a run went to reading the roles' task files: bench/README). The constructors are PyYAML's safe ones
either way, so the data is the same; files whose errors must name a line (hosts.yaml, the inventory) keep their own
loaders."""

from __future__ import annotations

from typing import Any

import yaml

Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(text: str) -> Any:
    """``yaml.safe_load(text)``, with libyaml's parser where there is one."""
    return yaml.load(text, Loader=Loader)  # noqa: S506 - a safe loader (CSafeLoader or SafeLoader)
