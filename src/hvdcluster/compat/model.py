"""What the resolver takes and gives: what a probe found on the nodes, a conflict, the refusal that lists them
all, the resolved plan."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import HvdError


@dataclass(frozen=True)
class NodeInfo:
    """What a read-only probe of the nodes found; every field is optional."""

    os_id: str | None = None  # "debian"
    os_version: str | None = None  # "12"
    kernel: str | None = None
    gcc: str | None = None  # "12.2.0"
    python: str | None = None  # "3.11.2"
    gpus: tuple[str, ...] = ()  # model names as nvidia-smi prints them
    driver_loaded: str | None = None  # "550.54.15"


@dataclass(frozen=True)
class Conflict:
    """Two choices that cannot go together, with the matrix row that says so."""

    rule: str  # short rule id, e.g. "cuda-needs-driver"
    message: str  # one line naming both choices
    choices: tuple[str, str]  # e.g. ("stack.cuda=12.4 (line 4)", "stack.driver=535 (default)")
    source: str  # URL of the matrix row
    where: str = ""  # "hosts.yaml:4": the line of the first value the user wrote, when the lines are known


class ResolveError(HvdError):
    """The stack cannot be made consistent; ``conflicts`` lists every reason, ``str()`` one line each."""

    def __init__(self, conflicts: Iterable[Conflict]) -> None:
        self.conflicts = list(conflicts)
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(
            f"{c.where + ': ' if c.where else ''}{c.rule}: {c.message} [{' vs '.join(c.choices)}] (see {c.source})"
            for c in self.conflicts
        )


@dataclass(frozen=True)
class Plan:
    """A fully resolved stack, why each defaulted value was chosen, and the Horovod patches to apply."""

    stack: dict
    notes: tuple[str, ...]
    patches: tuple[str, ...]
