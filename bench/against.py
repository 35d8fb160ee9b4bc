"""What the benchmarks that read a change against its base share (imported, not run): a git revision's hvdcluster and
Ansible content in a temporary worktree, and the environment that runs them instead of the checkout's (the worktree
first on PYTHONPATH, so its ``hvdcluster`` package and its collection are the ones imported), on the same lab."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def contents(rev: str | None) -> Iterator[dict[str, Path | None]]:
    """{"checkout": None} and, with ``rev``, {rev: its worktree}; the worktree is removed afterwards."""
    if not rev:
        yield {"checkout": None}
        return
    with tempfile.TemporaryDirectory(prefix="hvd-bench-against-") as tmp:
        path = Path(tmp) / "against"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), rev], check=True,
                       capture_output=True)
        try:
            yield {"checkout": None, rev: path}
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)], capture_output=True)


def environment(content: Path | None) -> dict[str, str]:
    """The environment that runs ``content``'s hvdcluster (None: the checkout's)."""
    env = dict(os.environ)
    if content is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(content / "src"), str(content / "collections")])
    return env
