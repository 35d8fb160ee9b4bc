"""The stack every CPU lab converges (the tests' and the benches' one home for it): the PyTorch CPU build this
machine's wheelhouse carries, with Horovod for it, and what an env needs besides when an index serves it."""

from __future__ import annotations

# The stack every CPU lab converges: the PyTorch CPU build this machine's wheelhouse carries (PIP_FIND_LINKS), with
# Horovod for it. One home for the tests and the benches (cpu_stack() gives a copy to extend).
TORCH = "torch==2.13.0"
# What the env needs besides the stack's packages, as an index serves them (the default path without a wheelhouse).
BASE_PACKAGES = [TORCH, "wheel", "setuptools", "cffi", "cloudpickle", "psutil", "pyyaml", "packaging"]


def cpu_stack(**more: dict) -> dict:
    """hosts.yaml's `stack` of a CPU lab: the CPU build of PyTorch and Horovod for it, with ``more`` keys added."""
    return {"python": {"packages": [TORCH]}, "horovod": {"frameworks": ["pytorch"]}, **more}
