"""The NVIDIA driver's versions as a node shows them: the one reading of the installed user space (the NVML library's
file name) and of the loaded kernel module (/proc/driver/nvidia/version) that `check` (hvd_state), the pre-flight's
look (hvd_host) and hvd_nvidia_driver (through the hvd_driver_* filters) share. Standard library only."""

from __future__ import annotations

import glob
import os
import re

# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  ..." or "... Kernel Module for aarch64  550.54.15 ..."
_LOADED = re.compile(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)")
_NVML = re.compile(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)*)")
# where distributions put NVML: /usr/lib/x86_64-linux-gnu (Debian, Ubuntu), /usr/lib64 (RHEL), /usr/lib
NVML_GLOBS = ("lib*/libnvidia-ml.so.*", "lib*/*/libnvidia-ml.so.*")


def loaded_version(proc_text: str) -> str:
    """The loaded kernel module's version from /proc/driver/nvidia/version's text; "" when none is loaded."""
    found = _LOADED.search(proc_text or "")
    return found.group(1) if found else ""


def installed_version(path: str) -> str:
    """The driver version a versioned NVML library file carries in its name (``libnvidia-ml.so.535.104.05``); ""
    for any other file (the unversioned ``.so`` and ``.so.1`` links)."""
    found = _NVML.fullmatch(os.path.basename(path))
    return found.group(1) if found else ""


def installed_versions(paths: list[str]) -> list[str]:
    """The versions of the NVML library files among ``paths``, sorted, each once."""
    return sorted({version for version in map(installed_version, paths) if version})


def find_nvml(usr: str) -> list[str]:
    """The NVML library files below ``usr`` (a node's /usr, under a root)."""
    base = glob.escape(usr)
    return [path for pattern in NVML_GLOBS for path in glob.glob(os.path.join(base, pattern))]
