"""Readers of a node's software stack for hvd_node_state: the OS and the packages hvdcluster holds (``os.*``,
``packages.*``), the NVIDIA driver and the GPU components (``driver.*``, ``components.*``, ``nccl_tests.*``,
``pyxis.*``) and
MPI (``mpi.*``: the mpirun a non-interactive SSH command finds).

``root`` and the item shapes are hvd_state.py's.
"""

from __future__ import annotations

import os
import re

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_apt_conf import uu_blacklist, uu_blacklisted
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_dpkg import dpkg_status
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_driver import (
    find_nvml,
    given_versions,
    installed_versions,
    loaded_version,
)
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_fabric import PIECES, loaded_modules
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_fabric import state as fabric_state
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import (
    ABSENT,
    MANIFEST,
    d16,
    describe_problems,
    file_d16,
    manifest_entry_differs,
    read_fact,
    read_manifest,
    read_text,
    resolve,
    under,
)
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_kernel import guard_item, module_guard, nouveau_item

DEBIAN_SSH_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games"  # what sshd gives a command on Debian


# ------------------------------------------------------------------------------------------ OS and packages


def os_state(root: str) -> dict:
    """``os.release`` ("debian 12": ID and VERSION_ID of os-release), ``os.kernel`` (the running kernel) and
    ``os.machine-id`` (d16 of /etc/machine-id: changes when the node is reinstalled)."""
    text = read_text(under(root, "/etc/os-release")) or read_text(under(root, "/usr/lib/os-release"))
    fields = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip().strip("\"'")
    release = " ".join(v for v in (fields.get("ID", "").lower(), fields.get("VERSION_ID", "")) if v)
    machine = (read_text(under(root, "/etc/machine-id")) or "").strip()
    return {"os.release": release or ABSENT, "os.kernel": os.uname().release,
            # A reinstalled node gets a new one: d16 only (the id itself is meant to stay on the machine).
            "os.machine-id": d16(machine.encode()) if machine else ABSENT}


def packages_state(root: str, names: list[str]) -> dict:
    """``pkg.<name>`` (installed version, versions comma-joined when several architectures differ, or "absent"),
    ``pkg.<name>.hold`` and ``pkg.<name>.guard`` (unattended-upgrades' Package-Blacklist names it: the roles write
    one entry per package they hold) for every package in ``names`` and every package held; ``name:arch`` picks one
    architecture."""
    patterns = uu_blacklist(root)
    versions: dict[str, set] = {}
    holds: dict[str, bool] = {}
    for package, arch, version, installed, held in dpkg_status(root):
        for key in (package, f"{package}:{arch}"):
            versions.setdefault(key, set())
            if installed:
                versions[key].add(version)
            holds[key] = holds.get(key, False) or held
    wanted = set(names) | {name for name, held in holds.items() if held and ":" not in name}
    out = {}
    for name in wanted:
        out[f"pkg.{name}"] = ",".join(sorted(versions.get(name, ()))) or ABSENT
        out[f"pkg.{name}.hold"] = holds.get(name, False)
        out[f"pkg.{name}.guard"] = uu_blacklisted(name.split(":", 1)[0], patterns)
    return out


# ------------------------------------------------------------------------------------------ GPU stack and MPI


def driver_state(root: str) -> dict:
    """``driver.installed`` (NVML's versioned library file), ``driver.loaded`` (/proc) and ``gpu.count`` (fact);
    ``driver.given`` where that library is handed in from outside (a container given the host's driver).

    Where the driver has kernel modules (hvd_nvidia_driver's fact says ``mode: kernel``, or ``image`` for an image
    being built) also ``driver.next_boot``:
    "ok" when the kernel the boot loader starts next has the nvidia, nvidia-modeset and nvidia-uvm modules (whatever
    kernel that is, so healthy peers read alike), else "<kernel> has no NVIDIA module (<missing>): <cause>"
    (plugins/module_utils/hvd_kernel.py). CPU nodes and containers have no such item. Where the role also blacklists
    nouveau (the fact's ``blacklist_nouveau``), ``driver.nouveau``: "ok" when a modprobe.d file blacklists it and the
    initramfs of that kernel was built after it, else what is wrong."""
    nvml = find_nvml(root)
    found = installed_versions(nvml)
    loaded = loaded_version(read_text(under(root, "/proc/driver/nvidia/version")) or "")
    fact = read_fact(root, "hvd_nvidia_driver") or {}
    try:
        count = int(fact.get("gpu_count", 0))
    except (TypeError, ValueError):
        count = 0
    out = {"driver.installed": ",".join(found) or ABSENT, "driver.loaded": loaded or ABSENT, "gpu.count": count}
    given = given_versions(root, nvml)
    if given:  # a container given the host's driver: hvd_nvidia_driver installs none there (mode host)
        out["driver.given"] = ",".join(given)
    if fact.get("mode") in ("kernel", "image"):
        guard = module_guard(root)
        out["driver.next_boot"] = guard_item(guard)
        if str(fact.get("blacklist_nouveau")).lower() == "true":
            out["driver.nouveau"] = nouveau_item(root, guard["kernel"])
        fabric = fact.get("fabric") if isinstance(fact.get("fabric"), dict) else {}
        out.update(fabric_items(root, {piece: bool((fabric.get(piece) or {}).get("wanted")) for piece in PIECES},
                                fact.get("mode"), found))
    return out


def fabric_items(root: str, wanted: dict, mode: str, installed: list[str]) -> dict:
    """``driver.persistence``, ``driver.peermem``, ``driver.fabricmanager`` of the pieces ``wanted``
    (plugins/module_utils/hvd_fabric.py), held against the one installed driver (``installed``: NVML's versions), dpkg's
    packages and the loaded modules (none in an image: nothing is loaded there)."""
    modules = None if mode == "image" else (loaded_modules(root) or [])
    return fabric_state(root, wanted, installed[0] if len(installed) == 1 else "", dpkg_status(root), modules)


def nccl_header_version(path: str) -> str:
    text = read_text(path)
    if text is None:
        return ABSENT
    parts = [re.search(rf"^\s*#define\s+NCCL_{part}\s+(\d+)", text, re.M) for part in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts) if all(parts) else ABSENT


def components_state(root: str, deep: bool = False) -> dict:
    """``<c>.version`` and ``<c>.home`` of cuda, cudnn, nccl (their facts), ``nccl.header`` (nccl.h's own) and the
    ``nccl_tests.*`` and ``pyxis.*`` items where those are installed (:func:`nccl_tests_state`, :func:`pyxis_state`)."""
    out = {}
    for name in ("cuda", "cudnn", "nccl"):
        fact = read_fact(root, f"hvd_{name}")
        for key in ("version", "home"):
            value = fact.get(key) if fact else None
            out[f"{name}.{key}"] = str(value) if value is not None else ABSENT
    home = out["nccl.home"]
    out["nccl.header"] = (nccl_header_version(under(root, os.path.join(home, "include", "nccl.h")))
                          if home not in (ABSENT, "") else ABSENT)
    out.update(nccl_tests_state(root, deep))
    out.update(pyxis_state(root, deep))
    return out


# The build keys hvd_nccl_tests and hvd_pyxis write last into their prefixes (hvd_tree's marker); each prefix comes from
# the role's fact.
NCCL_TESTS_MARKER = ".hvd-nccl-tests-key"
PYXIS_MARKER = ".hvd-pyxis-key"


def tree_prefix(fact: dict) -> str | None:
    """The absolute prefix a built tree's fact names; None without one (the role is not asked for on the node)."""
    where = fact.get("prefix")
    return where if isinstance(where, str) and where.startswith("/") else None


def built_tree_state(root: str, fact: dict, marker: str, item: str, deep: bool = False) -> dict:
    """Where a role recorded a tree it built once and unpacked at a prefix (``fact``, its local fact, names the
    prefix): ``<item>.version`` (the fact's), ``<item>.key`` (the build key in the prefix) and ``<item>.files``: "ok",
    or each file of the prefix's manifest that is missing or changed, judged as hvd_tree judges it (size and
    modification time; ``deep``: sha256). Nothing where the fact names no prefix (the role is not asked for there)."""
    where = tree_prefix(fact)
    if where is None:
        return {}
    prefix = under(root, where)
    key = read_text(os.path.join(prefix, marker))
    manifest = read_manifest(prefix)
    problems = [("missing", MANIFEST)] if manifest is None else []
    for rel, want in (manifest or {}).items():
        kind = manifest_entry_differs(os.path.normpath(os.path.join(prefix, rel)), want, deep)
        if kind:
            problems.append((kind, rel))
    return {f"{item}.version": str(fact.get("version") or ABSENT),
            f"{item}.key": key.strip() if key is not None else ABSENT,
            f"{item}.files": describe_problems(problems)}


def nccl_tests_state(root: str, deep: bool = False) -> dict:
    """nccl-tests where hvd_nccl_tests installed it (``nccl_tests.*``: :func:`built_tree_state`); nothing on a node
    without its fact (a CPU stack, a stack that asks for no nccl-tests)."""
    return built_tree_state(root, read_fact(root, "hvd_nccl_tests") or {}, NCCL_TESTS_MARKER, "nccl_tests", deep)


# What hvd_pyxis writes besides its tree: Slurm's plugstack (the drop-in folder included, pyxis named in it) and the
# links that put enroot and its helpers (every program of <prefix>/bin) on the PATH pyxis and enroot search.
PYXIS_FILES = ("/etc/slurm/plugstack.conf", "/etc/slurm/plugstack.conf.d/pyxis.conf")
PYXIS_LINKS = "/usr/local/bin"


def pyxis_state(root: str, deep: bool = False) -> dict:
    """enroot and pyxis where hvd_pyxis installed them: the tree (``pyxis.version``, ``pyxis.key``, ``pyxis.files``:
    :func:`built_tree_state`), ``pyxis.config.<file>`` (d16 of Slurm's plugstack files) and ``pyxis.links``: "ok",
    or each program of <prefix>/bin whose /usr/local/bin link is missing or leads elsewhere. Nothing on a node
    without its fact (no container jobs asked for)."""
    fact = read_fact(root, "hvd_pyxis") or {}
    prefix = tree_prefix(fact)
    if prefix is None:
        return {}
    out = built_tree_state(root, fact, PYXIS_MARKER, "pyxis", deep)
    for path in PYXIS_FILES:
        out[f"pyxis.config.{os.path.basename(path)}"] = file_d16(under(root, path))
    try:
        tools = sorted(os.listdir(under(root, os.path.join(prefix, "bin"))))
    except OSError:
        tools = []
    problems = []
    for tool in tools:
        link = under(root, os.path.join(PYXIS_LINKS, tool))
        want = os.path.join(prefix, "bin", tool)
        if not os.path.islink(link):
            problems.append(("not a link" if os.path.lexists(link) else "missing", tool))
        elif os.readlink(link) != want:
            problems.append(("leads elsewhere", f"{tool} -> {os.readlink(link)}"))
    out["pyxis.links"] = describe_problems(problems)
    return out


def noninteractive_path(root: str) -> str:
    """The PATH sshd gives a command: /etc/environment's PATH where it sets one (pam_env reads it for SSH
    sessions), else Debian's sshd default."""
    for line in (read_text(under(root, "/etc/environment")) or "").splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key.strip() in ("PATH", "export PATH"):
            return value.strip().strip("\"'")
    return DEBIAN_SSH_PATH


def mpi_state(root: str, ssh_path: str = "") -> dict:
    """``mpi.path``: the first executable ``mpirun`` on ``ssh_path`` (by default the PATH sshd gives a command),
    resolved; ``mpi.version``: hvd_openmpi's fact."""
    path = ABSENT
    for folder in (ssh_path or noninteractive_path(root)).split(":"):
        if not folder.startswith("/"):
            continue  # an empty or relative entry means the login folder: not where mpirun is installed
        real = resolve(root, os.path.join(folder, "mpirun"))
        full = under(root, real)
        if os.path.isfile(full) and os.access(full, os.X_OK):
            path = real
            break
    fact = read_fact(root, "hvd_openmpi")
    version = fact.get("version") if fact else None
    return {"mpi.path": path, "mpi.version": str(version) if version else ABSENT}
