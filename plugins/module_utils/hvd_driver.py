"""The NVIDIA driver's versions as a node shows them: the one reading of the installed user space (the NVML library's
file name) and of the loaded kernel module (/proc/driver/nvidia/version) that `check` (hvd_state), the pre-flight's
look (hvd_host) and hvd_nvidia_driver (through hvd_node_state, check's module) share. Standard library and hvd_files
only."""

from __future__ import annotations

import glob
import os
import re

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import on_node, read_text, resolve, under

# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  ..." or "... Kernel Module for aarch64  550.54.15 ..."
_LOADED = re.compile(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)")
_NVML = re.compile(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)*)")
# where distributions put NVML: /usr/lib/x86_64-linux-gnu (Debian, Ubuntu), /usr/lib64 (RHEL), /usr/lib
NVML_GLOBS = ("lib*/libnvidia-ml.so.*", "lib*/*/libnvidia-ml.so.*")
LOADER_CONF = "/etc/ld.so.conf"
MOUNTINFO = "/proc/self/mountinfo"
# Mount points a machine's own system lies on: a library below one of them is the node's own, not one handed in.
SYSTEM_MOUNTS = frozenset({"/", "/usr", "/usr/local", "/opt", "/var"})


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


def loader_dirs(root: str = "/") -> list[str]:
    """The library folders the dynamic loader's configuration names (/etc/ld.so.conf and the files its ``include``
    lines name), as the node sees them, in order, each once."""
    dirs: list[str] = []
    todo, seen = [LOADER_CONF], set()
    while todo:
        conf = todo.pop(0)
        if conf in seen:
            continue
        seen.add(conf)
        try:
            with open(under(root, conf), encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError:
            continue
        for line in text.splitlines():
            words = line.split("#", 1)[0].replace(":", " ").replace(",", " ").split()
            if words[:1] == ["include"]:
                for pattern in words[1:]:
                    pattern = os.path.join(os.path.dirname(conf), pattern)  # relative: beside the including file
                    found = sorted(glob.glob(under(root, pattern)))
                    todo += [on_node(root, path) for path in found]
            elif words and words[0] != "hwcap":
                dirs += [word for word in words if word.startswith("/") and word not in dirs]
    return dirs


def find_nvml(root: str = "/") -> list[str]:
    """The NVML library files of a node (under ``root``): in /usr's library folders, where distributions put them,
    and in the folders the dynamic loader is configured with, where a driver mounted into a container or VM from
    outside lies (``/usr/local/nvidia/lib64``), and the files their unversioned links lead to (Debian's
    ``nvidia/current/``). Paths as found under ``root``, each once."""
    usr = glob.escape(under(root, "/usr"))
    found = [path for pattern in NVML_GLOBS for path in glob.glob(os.path.join(usr, pattern))]
    for folder in loader_dirs(root):
        found += glob.glob(os.path.join(glob.escape(under(root, folder)), "libnvidia-ml.so.*"))
    # Debian's packages keep the versioned file in nvidia/current/, behind alternatives links named like the loader's
    # (libnvidia-ml.so.1): follow the links the loader follows
    for path in list(found):
        if not installed_version(path):
            target = under(root, resolve(root, on_node(root, path)))
            if installed_version(target) and os.path.isfile(target):
                found.append(target)
    return list(dict.fromkeys(found))


def mount_points(root: str = "/") -> list[str]:
    """The mount points the node's /proc/self/mountinfo lists (its fifth field, octal escapes undone), in order."""
    text = read_text(under(root, MOUNTINFO)) or ""
    points = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) > 4:
            points.append(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
    return points


def holding_mount(node_path: str, points: list[str]) -> str:
    """The mount point among ``points`` (mount_points) that holds ``node_path``: the longest that is the path itself
    or a folder above it; "/" when none is."""
    return max((p for p in points if node_path == p or node_path.startswith(p.rstrip("/") + "/")), key=len,
               default="/")


def given_versions(root: str, paths: list[str]) -> list[str]:
    """The driver versions whose NVML library (among ``paths``, found under ``root``) is handed in from outside: it
    lies on a mount of its own (the file itself, as the NVIDIA Container Toolkit mounts each library, or a folder
    such as /usr/local/nvidia), not on the node's own system. A container's driver is then the host's: its kernel
    module is the host's, and a user space installed beside it would not match it."""
    points = mount_points(root)
    given = []
    for path in paths:
        version = installed_version(path)
        if not version:
            continue
        if holding_mount(on_node(root, path), points) not in SYSTEM_MOUNTS:
            given.append(version)
    return sorted(set(given))
