"""Readers of a node's state for hvd_node_state: one look at a node, by plain file reads (no subprocess but one
``ssh -G`` per peer, a local process: :func:`ssh_resolved`; and under Slurm a munge round trip and one question to
slurmctld: :func:`slurm_state`).

Every reader takes ``root``, the prefix the node's files are read under ("/" on a node; a fake root in tests) and
returns items of one flat dict: key -> str, int or bool, "absent" for what is not there. Paths in values are the
node's paths (``root`` left out). Digests are the first 16 hex digits of a sha256 ("d16" below).
"""

from __future__ import annotations

import base64
import csv
import glob
import hashlib
import json
import os
import re
import stat

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_defaults import RUN_DIR
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import (
    MANIFEST, add_stamped, manifest_entry_differs, on_node, read_manifest, read_text, resolve, sha256_of, under,
    walk_tree)
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_driver import (
    find_nvml, given_versions, installed_versions, loaded_version)
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_fabric import PIECES, loaded_modules
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_fabric import state as fabric_state
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_kernel import guard_item, module_guard, uu_blacklist, uu_blacklisted

ABSENT = "absent"
DEBIAN_SSH_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games"  # what sshd gives a command on Debian
KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"  # hvd_ssh_mesh_known_hosts' default
CA_GLOB = "/usr/local/share/ca-certificates/hvdcluster*.crt"  # hvd_base installs hvdcluster-ca.crt
MOST_PROBLEMS = 10
# Files hvdcluster itself writes into the env beside what its manifest and Horovod's RECORD list: its markers and
# the post-flight's script (hvd_verify_dir's default). Nothing else may be added there.
ENV_MARKERS = (".hvdcluster", ".hvd-env-key", MANIFEST, ".hvd-horovod-key", ".hvd-horovod-checked",
               "libexec/hvdcluster/allreduce.py")
# Distributions installed into the env after its manifest was written (their RECORD lists their files).
ENV_LATER = ("horovod",)

_RUNS = re.compile(r"[-_.]+")


# ------------------------------------------------------------------------------------------ paths and files


def d16(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def file_d16(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            return d16(handle.read())
    except OSError:
        return ABSENT


def read_fact(root: str, name: str) -> dict | None:
    """``/etc/ansible/facts.d/<name>.fact`` (JSON, as our roles write them); None when missing or unreadable."""
    text = read_text(under(root, f"/etc/ansible/facts.d/{name}.fact"))
    if text is None:
        return None
    try:
        fact = json.loads(text)
    except ValueError:
        return None
    return fact if isinstance(fact, dict) else None


def canonical(name: str) -> str:
    """A distribution name as packaging's ``canonicalize_name`` writes it."""
    return _RUNS.sub("-", name).lower()


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


def dpkg_status(root: str) -> list[tuple[str, str, str, bool, bool]]:
    """Every entry of dpkg's status file as (package, architecture, version, installed, held)."""
    entries = []
    text = read_text(under(root, "/var/lib/dpkg/status")) or ""
    for stanza in text.split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t", ""):
                continue
            key, dummy, value = line.partition(":")
            if key in ("Package", "Status", "Version", "Architecture"):
                fields[key] = value.strip()
        if "Package" not in fields:
            continue
        status = fields.get("Status", "").split()
        installed = len(status) == 3 and status[2] == "installed"
        held = bool(status) and status[0] == "hold"
        entries.append((fields["Package"], fields.get("Architecture", ""), fields.get("Version", ""), installed, held))
    return entries


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
    (plugins/module_utils/hvd_kernel.py). CPU nodes and containers have no such item."""
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
        out["driver.next_boot"] = guard_item(module_guard(root))
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
    ``nccl_tests.*`` items where nccl-tests is installed (:func:`nccl_tests_state`)."""
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
    return out


# hvd_nccl_tests' build key, written last into its prefix (hvd_tree's marker); the prefix comes from its fact.
NCCL_TESTS_MARKER = ".hvd-nccl-tests-key"


def nccl_tests_state(root: str, deep: bool = False) -> dict:
    """Where hvd_nccl_tests recorded nccl-tests (its fact names the prefix): ``nccl_tests.version`` (the fact's),
    ``nccl_tests.key`` (the build key in the prefix) and ``nccl_tests.files``: "ok", or each file of the prefix's
    manifest that is missing or changed, judged as hvd_tree judges it (size and modification time; ``deep``: sha256).
    Nothing on a node without the fact (a CPU stack, a stack that asks for no nccl-tests)."""
    fact = read_fact(root, "hvd_nccl_tests") or {}
    where = fact.get("prefix")
    if not isinstance(where, str) or not where.startswith("/"):
        return {}
    prefix = under(root, where)
    key = read_text(os.path.join(prefix, NCCL_TESTS_MARKER))
    manifest = read_manifest(prefix)
    problems = [("missing", MANIFEST)] if manifest is None else []
    for rel, want in (manifest or {}).items():
        kind = manifest_entry_differs(os.path.normpath(os.path.join(prefix, rel)), want, deep)
        if kind:
            problems.append((kind, rel))
    return {"nccl_tests.version": str(fact.get("version") or ABSENT),
            "nccl_tests.key": key.strip() if key is not None else ABSENT,
            "nccl_tests.files": _describe(problems)}


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


# ------------------------------------------------------------------------------------------ the Python env


def _metadata(info: str) -> tuple[str, str]:
    """Name and Version from a dist-info's METADATA headers (the folder's name when it has none)."""
    name = version = ""
    try:
        with open(os.path.join(info, "METADATA"), encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if not line.strip():
                    break  # the headers end at the first empty line; the long description follows
                key, dummy, value = line.partition(":")
                if key == "Name" and not name:
                    name = value.strip()
                elif key == "Version" and not version:
                    version = value.strip()
                if name and version:
                    break
    except OSError:
        pass
    if not name or not version:
        stem = os.path.basename(info)[: -len(".dist-info")]
        fallback_name, dummy, fallback_version = stem.partition("-")
        name, version = name or fallback_name, version or fallback_version or "unknown"
    return name, version


def distributions(prefix: str) -> list[tuple[str, str, str, str]]:
    """Every distribution installed in the env at ``prefix`` (a real path) as (canonical name, version,
    site-packages folder, dist-info folder), sorted."""
    found = []
    pattern = os.path.join(glob.escape(prefix), "lib", "python*", "site-packages", "*.dist-info")
    for info in sorted(glob.glob(pattern)):
        name, version = _metadata(info)
        found.append((canonical(name), version, os.path.dirname(info), info))
    return found


def records(prefix: str, name: str) -> list[str]:
    """Every RECORD of the distribution ``name`` (compared as packaging normalises it) in the env at ``prefix``."""
    want = canonical(name)
    return sorted(os.path.join(info, "RECORD") for found, dummy_version, dummy_site, info in distributions(prefix)
                  if found == want and os.path.isfile(os.path.join(info, "RECORD")))


def record_sha256(paths: list[str]) -> str:
    """sha256 of each RECORD's modification time (ns, then a space) and content: any pip install rewrites it, the
    same wheel again too; "none" without one (or when one cannot be read)."""
    digest = hashlib.sha256()
    try:
        for path in paths:
            with open(path, "rb") as handle:
                digest.update(b"%d " % os.fstat(handle.fileno()).st_mtime_ns + handle.read())
    except OSError:
        return "none"
    return digest.hexdigest() if paths else "none"


def fingerprint(prefix: str, name: str, files: list[str] | None = None) -> dict[str, str]:
    """hvd_dist_record's answer: ``record`` (the first RECORD's path), ``sha256`` (record_sha256) and, with
    ``files``, ``files_sha256``: those files, then the RECORDs, each as path, modification time and content
    ("no <name>" in place of a RECORD when the distribution is not installed)."""
    paths = records(prefix, name)
    out = {"record": paths[0] if paths else "", "sha256": record_sha256(paths)}
    if files:
        digest = hashlib.sha256()
        for path in [*files, *paths]:
            add_stamped(digest, path)
        if not paths:
            digest.update(b"no " + name.encode())
        out["files_sha256"] = digest.hexdigest()
    return out


def _python_version(prefix: str) -> str:
    text = read_text(os.path.join(prefix, "pyvenv.cfg"))
    if text is not None:
        fields = {}
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                fields[key.strip()] = value.strip()
        value = fields.get("version") or fields.get("version_info")
        if value:
            return ".".join(value.split(".")[:3])
    for meta in sorted(glob.glob(os.path.join(glob.escape(prefix), "conda-meta", "python-3*.json"))):
        match = re.match(r"python-(\d+\.\d+(?:\.\d+)?)-", os.path.basename(meta))
        if match:
            return match.group(1)
    libs = sorted(glob.glob(os.path.join(glob.escape(prefix), "lib", "python3.*")))
    return os.path.basename(libs[-1])[len("python"):] if libs else "unknown"


def _record_files(site: str, info: str) -> dict[str, tuple[str, int | None]]:
    """The files a dist-info's RECORD lists with a sha256: real path -> (RECORD's hash, size or None);
    ``__pycache__`` left out (pip lists byte caches without a hash; the manifest and env_problems' walk cover them)."""
    files = {}
    try:
        with open(os.path.join(info, "RECORD"), encoding="utf-8", errors="replace", newline="") as handle:
            rows = list(csv.reader(handle))
    except OSError:
        return files
    for row in rows:
        if len(row) < 2 or not row[1].startswith("sha256=") or "__pycache__" in row[0].split("/"):
            continue
        size = int(row[2]) if len(row) > 2 and row[2].isdigit() else None
        files[os.path.normpath(os.path.join(site, row[0]))] = (row[1][len("sha256="):], size)
    return files


def _record_paths(site: str, info: str) -> set[str]:
    """Every path a dist-info's RECORD lists (with a hash or not: pip lists byte caches without one), real paths."""
    try:
        with open(os.path.join(info, "RECORD"), encoding="utf-8", errors="replace", newline="") as handle:
            return {os.path.normpath(os.path.join(site, row[0])) for row in csv.reader(handle) if row and row[0]}
    except OSError:
        return set()


def _record_differs(full: str, want_hash: str, size: int | None, deep: bool) -> str:
    try:
        info = os.stat(full)
    except OSError:
        return "missing"
    if not stat.S_ISREG(info.st_mode):
        return "missing"
    if size is not None and info.st_size != size:
        return "changed"
    if deep:
        try:
            found = base64.urlsafe_b64encode(bytes.fromhex(sha256_of(full))).rstrip(b"=").decode()
        except OSError:
            return "changed"
        return "" if found == want_hash else "changed"
    return ""


def _describe(problems: list[tuple[str, str]]) -> str:
    if not problems:
        return "ok"
    order = {"missing": 0, "changed": 1, "added": 2}
    problems = sorted(set(problems), key=lambda p: (order.get(p[0], 3), p[1]))
    text = "; ".join(f"{kind}: {path}" for kind, path in problems[:MOST_PROBLEMS])
    if len(problems) > MOST_PROBLEMS:
        text += f"; +{len(problems) - MOST_PROBLEMS} more"
    return text


def env_problems(prefix: str, dists: list[tuple[str, str, str, str]], deep: bool = False) -> list[tuple[str, str]]:
    """What differs in the env at ``prefix`` from what was installed there, as (kind, name) with kind "missing",
    "changed" or "added"; a path inside site-packages is named relative to it, any other relative to the prefix.

    - Every file hvd_tree's manifest (``.hvd-manifest``) lists is checked as hvd_tree does (size and modification
      time, ``deep``: sha256); every other file the RECORD of a distribution installed later (Horovod), or of any
      distribution when there is no manifest, lists with a sha256 must exist with its size (``deep``: its hash). A
      missing manifest is itself a problem: the env was not installed by hvdcluster, or it was tampered with.
    - The env holds nothing else: a file neither the manifest, Horovod's RECORD (installed later) nor hvdcluster's
      own markers account for is "added" - an extra distribution, a stray module, a ``*.pth`` or
      ``sitecustomize.py`` (both run at every interpreter start), a planted byte cache.
    """
    sites = sorted({site for dummy_name, dummy_version, site, dummy_info in dists}, key=len, reverse=True)

    def name(full: str) -> str:
        for site in sites:
            if full.startswith(site + os.sep):
                return os.path.relpath(full, site)
        return os.path.relpath(full, prefix) if full.startswith(prefix + os.sep) else full

    problems = []
    manifest = read_manifest(prefix)
    listed = set()
    if manifest is None:
        problems.append(("missing", MANIFEST))
    # one walk: its lstat judges each file the manifest lists (a listed path it did not find is looked up on its own:
    # a path through a link), and what it found that nothing accounts for is "added"
    found = dict(walk_tree(prefix)) if manifest is not None else {}
    for rel, want in (manifest or {}).items():
        full = os.path.normpath(os.path.join(prefix, rel))
        listed.add(full)
        kind = manifest_entry_differs(full, want, deep, found.get(rel))
        if kind:
            problems.append((kind, name(full)))
    known = set(listed) | {os.path.join(prefix, marker) for marker in ENV_MARKERS}
    for dist, dummy_version, site, info in dists:
        if dist in ENV_LATER:
            known |= _record_paths(site, info)
        elif manifest is not None:
            # what the manifest lists is judged by it; a RECORD line it does not list was never installed (a script
            # a conda package's entry points replaced, say): not a problem of this env
            continue
        for full, (want_hash, size) in _record_files(site, info).items():
            if full in listed:
                continue
            listed.add(full)
            kind = _record_differs(full, want_hash, size, deep)
            if kind:
                problems.append((kind, name(full)))
    if manifest is not None:
        for rel in found:
            full = os.path.join(prefix, rel)
            if full not in known:
                problems.append(("added", name(full)))
    return problems


def verify_env(prefix: str, dists: list[tuple[str, str, str, str]], deep: bool = False) -> str:
    """``env.files``: "ok" or what differs (:func:`env_problems`)."""
    return _describe(env_problems(prefix, dists, deep))


def manifest_d16(prefix: str) -> str:
    """``env.manifest``: d16 of what the env's manifest says was installed (each path with its size and sha256, a
    link with its target; modification times left out), so every node that installed the same archive has the same
    value, and a manifest edited to vouch for an added file shows."""
    manifest = read_manifest(prefix)
    if manifest is None:
        return ABSENT
    content = {rel: (want if want[:1] == ["link"] else [want[0], want[2]]) if isinstance(want, list) and len(want) >= 2
               else want for rel, want in manifest.items()}
    return d16(json.dumps(content, sort_keys=True, separators=(",", ":")).encode())


def conda_packages(prefix: str) -> list[tuple[str, str, str]]:
    """A conda env's packages as its ``conda-meta/*.json`` records say (name, version, build); [] for a venv. A
    record that cannot be read is named with version "unreadable"."""
    meta = os.path.join(prefix, "conda-meta")
    try:
        names = sorted(n for n in os.listdir(meta) if n.endswith(".json"))
    except OSError:
        return []
    out = []
    for file in names:
        try:
            with open(os.path.join(meta, file), encoding="utf-8") as handle:
                record = json.load(handle)
            out.append((str(record["name"]).lower(), str(record["version"]), str(record.get("build", ""))))
        except (OSError, ValueError, KeyError, TypeError):
            out.append((file[:-len(".json")], "unreadable", ""))
    return out


def env_state(root: str, env_prefix: str, deep: bool = False) -> dict:
    """``env.*`` (interpreter, key, lock, every distribution but Horovod, its files) and ``horovod.*``."""
    keys = ("env.python", "env.key", "env.lock", "env.files", "env.manifest", "horovod.version", "horovod.record", "horovod.key",
            "horovod.checked")
    prefix = under(root, env_prefix)
    if not os.path.isdir(prefix):
        return dict.fromkeys(keys, ABSENT)
    out = {}
    python = resolve(root, os.path.join(env_prefix, "bin", "python"))
    out["env.python"] = f"{python} {_python_version(prefix)}" if os.path.isfile(under(root, python)) else ABSENT
    for key, file in (("env.key", ".hvd-env-key"), ("horovod.key", ".hvd-horovod-key"),
                      ("horovod.checked", ".hvd-horovod-checked")):
        text = read_text(os.path.join(prefix, file))
        out[key] = text.strip() if text is not None else ABSENT
    lock = os.path.join(prefix, "hvd-requirements.lock")
    try:
        out["env.lock"] = sha256_of(lock)
    except OSError:
        out["env.lock"] = ABSENT
    dists = distributions(prefix)
    items: dict[str, list[str]] = {}
    horovod = []
    for name, version, dummy_site, info in dists:
        record = file_d16(os.path.join(info, "RECORD"))
        if name == "horovod":
            horovod.append((version, record))
        else:
            items.setdefault(f"env.dist.{name}", []).append(f"{version} {record}")
    for name, version, build in conda_packages(prefix):
        items.setdefault(f"env.conda.{name}", []).append(f"{version} {build}")
    out.update({key: ", ".join(sorted(values)) for key, values in items.items()})
    out["horovod.version"], out["horovod.record"] = horovod[0] if horovod else (ABSENT, ABSENT)
    out["env.files"] = verify_env(prefix, dists, deep)
    out["env.manifest"] = manifest_d16(prefix)
    return out


# ------------------------------------------------------------------------------------------ blocks we manage


def read_blocks(path: str, begin: str, prefix: bool = False) -> list[tuple[str, list[str]]]:
    """The blockinfile blocks of a file whose BEGIN marker line is ``begin`` (``prefix``: starts with ``begin``
    and a space), as (marker without '# BEGIN ', lines between the markers)."""
    text = read_text(path)
    blocks: list[tuple[str, list[str]]] = []
    current = None
    for line in (text or "").splitlines():
        mark = line.rstrip()
        if current is None:
            if mark == begin or (prefix and mark.startswith(begin + " ")):
                current = (mark[len("# BEGIN "):], [])
        elif mark == "# END " + current[0]:
            blocks.append(current)
            current = None
        else:
            current[1].append(line)
    if current is not None:
        blocks.append(current)
    return blocks


def blocks_d16(blocks: list[tuple[str, list[str]]], named: bool = False) -> str:
    """d16 of a block's lines (each ended by a newline, as blockinfile's ``block``); ``named``: of every block's
    marker and lines, in marker order (the order blocks were added in does not count)."""
    if not blocks:
        return ABSENT
    if not named:
        return d16("".join(line + "\n" for line in blocks[0][1]).encode())
    return d16("".join(f"{mark}\n" + "".join(line + "\n" for line in lines) + "\0"
                       for mark, lines in sorted(blocks)).encode())


def block_text(blocks: list[tuple[str, list[str]]]) -> str:
    """The first block's lines, one per line (a small block we manage, shown as it is so that `check` can name the
    line that differs); "absent" without one, "" for an empty one."""
    if not blocks:
        return ABSENT
    return "\n".join(line.rstrip() for line in blocks[0][1])


def home_of(root: str, user: str) -> str | None:
    for line in (read_text(under(root, "/etc/passwd")) or "").splitlines():
        fields = line.split(":")
        if len(fields) >= 6 and fields[0] == user:
            return fields[5]
    return None


def _key_pairs(line: str) -> set[tuple[str, str]]:
    """(type, base64) pairs of an OpenSSH key line (authorized_keys options and comments around it ignored)."""
    tokens = line.split()
    return {(tokens[i], tokens[i + 1]) for i in range(len(tokens) - 1) if tokens[i + 1].startswith("AAAA")}


def mesh_state(root: str, cluster: str, user: str = "root", public_key: str = "") -> dict:
    """``mesh.authorized`` (the cluster key in the user's authorized_keys), ``mesh.known_hosts`` (d16 of every node's
    hvdcluster block in /etc/ssh/ssh_known_hosts) and ``mesh.ssh_config`` (the block in the user's ~/.ssh/config, as
    text)."""
    home = home_of(root, user)
    want = _key_pairs(public_key)
    authorized = False
    if home and want:
        for line in (read_text(under(root, os.path.join(home, ".ssh", "authorized_keys"))) or "").splitlines():
            if not line.lstrip().startswith("#") and want & _key_pairs(line):
                authorized = True
                break
    begin = f"# BEGIN hvdcluster {cluster}"
    config = read_blocks(under(root, os.path.join(home, ".ssh", "config")), begin) if home else []
    return {"mesh.authorized": authorized,
            "mesh.known_hosts": blocks_d16(read_blocks(under(root, KNOWN_HOSTS), begin, prefix=True), named=True),
            "mesh.ssh_config": block_text(config),
            "mesh.other_keys": other_keys(root, home, want)}


def other_keys(root: str, home: str | None, cluster_keys: set[tuple[str, str]]) -> str:
    """``mesh.other_keys``: the keys in the user's authorized_keys beyond the cluster's, one per line as
    "<type> SHA256:<fingerprint> <comment>" (as ``ssh-keygen -l`` names them), in file order; "absent" for none. A
    notice `check` names, never a drift: the controller's own key is one of them."""
    if not home:
        return ABSENT
    lines = []
    for line in (read_text(under(root, os.path.join(home, ".ssh", "authorized_keys"))) or "").splitlines():
        if line.lstrip().startswith("#"):
            continue
        tokens = line.split()
        for i, (kind, blob) in enumerate(zip(tokens, tokens[1:])):
            if blob.startswith("AAAA") and (kind, blob) not in cluster_keys:
                try:
                    raw = base64.b64decode(blob, validate=True)
                except ValueError:
                    raw = blob.encode()
                print_ = base64.b64encode(hashlib.sha256(raw).digest()).decode().rstrip("=")
                lines.append(" ".join([kind, f"SHA256:{print_}", *tokens[i + 2:]])[:LAUNCH_LINE])
                break
        if len(lines) > LAUNCH_LINES:
            lines[LAUNCH_LINES:] = ["+ more keys"]
            break
    return "\n".join(lines) or ABSENT


def run_dir_state(path: str) -> str:
    """``ok`` when the folder of job leases and roll marks is the login user's (the reader's: the state is read as
    the login user) with mode 0700, as hvd_base makes it, else what is wrong: no other local user may write there."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return ABSENT
    except OSError as exc:
        return f"unreadable: {exc.strerror}"
    if not stat.S_ISDIR(info.st_mode):
        return "not a folder"
    mode = stat.S_IMODE(info.st_mode)
    wrong = [f"mode {mode:04o}"] if mode != 0o700 else []
    wrong += [f"owner uid {info.st_uid}, not the login user's (uid {os.geteuid()})"] \
        if info.st_uid != os.geteuid() else []
    return ", ".join(wrong) or "ok"


def base_state(root: str, cluster: str) -> dict:
    """``base.hosts`` (hvd_base's /etc/hosts block, as text), ``base.fabric_interface`` (the interface hvd_base found
    for the node's fabric address: what `run` passes to horovodrun), ``base.ca`` (the CA files it installs), ``profile.<file>``
    and ``ldconf.<file>`` (our /etc/profile.d/hvd-*.sh and /etc/ld.so.conf.d/hvd-*.conf)."""
    out = {"base.hosts": block_text(read_blocks(under(root, "/etc/hosts"), f"# BEGIN hvdcluster {cluster} nodes")),
           "base.fabric_interface": (read_fact(root, "hvd_base") or {}).get("fabric_interface") or ABSENT}
    digest = hashlib.sha256()
    cas = sorted(glob.glob(glob.escape(under(root, os.path.dirname(CA_GLOB))) + "/" + os.path.basename(CA_GLOB)))
    for path in cas:
        try:
            with open(path, "rb") as handle:
                digest.update(os.path.basename(path).encode() + b"\0" + handle.read() + b"\0")
        except OSError:
            digest.update(os.path.basename(path).encode() + b" -\0")
    out["base.ca"] = digest.hexdigest()[:16] if cas else ABSENT
    out["base.run_dir"] = run_dir_state(under(root, RUN_DIR))
    for key, folder, pattern in (("profile", "/etc/profile.d", "hvd-*.sh"),
                                 ("ldconf", "/etc/ld.so.conf.d", "hvd-*.conf")):
        for path in sorted(glob.glob(os.path.join(glob.escape(under(root, folder)), pattern))):
            out[f"{key}.{os.path.basename(path)}"] = file_d16(path)
    return out


# ------------------------------------------------------------------------------------------ how a rank is launched

# The most lines one launch item keeps of one file, and the longest line (a longer one is cut, a file with more lines
# ends in "+N more lines <d16 of them>"): node-supplied text, bounded.
LAUNCH_LINES = 50
LAUNCH_LINE = 200
SSHD_CONFIG = "/etc/ssh/sshd_config"
# sshd_config keywords that give a command variables (lowercase: sshd reads keywords case-insensitively).
SSHD_ENV = ("permituserenvironment", "setenv", "acceptenv")
# What `ssh -G <peer>` resolves that changes how a node reaches its peer or what the peer's command gets.
SSH_OPTIONS = ("hostname", "port", "user", "proxycommand", "proxyjump", "identityfile", "stricthostkeychecking",
               "userknownhostsfile", "globalknownhostsfile", "hostkeyalias", "sendenv", "setenv")
SSH_TIMEOUT = 10


def _settings(root: str, path: str, keep=None) -> list[str] | None:
    """The lines of the node's file ``path`` that set something (not blank, not a comment), stripped; ``keep``: only
    the lines it says yes to. [] for a missing file, None for one the reader may not read."""
    try:
        text = read_text(under(root, path), strict=True)
    except OSError:
        return None
    lines = [line.strip() for line in (text or "").splitlines()]
    return [line for line in lines if line and not line.startswith("#") and (keep is None or keep(line))]


def setting_lines(root: str, path: str, lines: list[str] | None = None) -> list[str]:
    """``lines`` (default: :func:`_settings` of ``path``) as "<path>: <line>", bounded (:data:`LAUNCH_LINES`, cut at
    :data:`LAUNCH_LINE`); "<path>: unreadable" for a file the reader may not read."""
    lines = _settings(root, path) if lines is None else lines
    if lines is None:
        return [f"{path}: unreadable"]
    out = [f"{path}: {line}"[:LAUNCH_LINE] for line in lines[:LAUNCH_LINES]]
    if len(lines) > LAUNCH_LINES:
        out.append(f"{path}: +{len(lines) - LAUNCH_LINES} more lines {d16(chr(10).join(lines).encode())}")
    return out


def _lines_value(lines: list[str]) -> str:
    return "\n".join(lines) or ABSENT


def _keyword(line: str) -> tuple[str, list[str]]:
    """An sshd_config line's keyword (lowercase) and arguments ("Keyword value" or "Keyword=value")."""
    words = line.replace("=", " ", 1).split()
    return (words[0].lower(), words[1:]) if words else ("", [])


def sshd_lines(root: str) -> tuple[list[str], bool]:
    """sshd_config's lines (its Include'd files' in place) that give a command variables (PermitUserEnvironment,
    SetEnv, AcceptEnv), and whether sshd reads the user's ~/.ssh/environment (the first PermitUserEnvironment says
    anything but no)."""
    out, todo, seen, user_env = [], [SSHD_CONFIG], set(), None
    while todo:
        path = todo.pop(0)
        if path in seen:
            continue
        seen.add(path)
        lines = _settings(root, path, keep=lambda line: _keyword(line)[0] in (*SSHD_ENV, "include"))
        for line in lines or []:
            keyword, args = _keyword(line)
            if keyword == "include":
                for pattern in args:
                    pattern = pattern if pattern.startswith("/") else os.path.join("/etc/ssh", pattern)
                    todo += [on_node(root, full) for full in sorted(glob.glob(under(root, pattern)))]
            elif keyword == "permituserenvironment" and user_env is None:
                user_env = args[:1] != ["no"]
        out += setting_lines(root, path, None if lines is None else
                             [line for line in lines if _keyword(line)[0] != "include"])
    return out, bool(user_env)


def ld_lines(root: str) -> list[str]:
    """The dynamic linker's configuration: /etc/ld.so.preload, /etc/ld.so.conf and the files its include lines name,
    but our own /etc/ld.so.conf.d/hvd-*.conf (the roles' files: the ``ldconf.*`` items)."""
    lines = setting_lines(root, "/etc/ld.so.preload")
    todo, seen = ["/etc/ld.so.conf"], set()
    while todo:
        path = todo.pop(0)
        if path in seen:
            continue
        seen.add(path)
        if path.startswith("/etc/ld.so.conf.d/hvd-") and path.endswith(".conf"):
            continue
        found = _settings(root, path)
        lines += setting_lines(root, path, found)
        for line in found or []:
            words = line.split()
            if words[:1] == ["include"]:
                for pattern in words[1:]:
                    pattern = pattern if pattern.startswith("/") else os.path.join(os.path.dirname(path), pattern)
                    todo += [on_node(root, full) for full in sorted(glob.glob(under(root, pattern)))]
    return lines


def ssh_resolved(root: str, user: str, peers: list[str], ssh: str = "ssh") -> dict:
    """``launch.ssh.<peer>``: the options (:data:`SSH_OPTIONS`) ``ssh -G <peer>`` resolves for the login user, one
    per line as ssh prints them: what the user's ~/.ssh/config and /etc/ssh/ssh_config, every Host and Match block
    of them, make of that peer's name. Run as the user (a reader running as root runs it with the user's ids); below
    a test's ``root``, with that root's ~/.ssh/config (``-F``). "absent" where ssh cannot say."""
    import pwd
    import subprocess

    if not peers:
        return {}
    argv = [ssh, "-G"]
    if root not in ("", "/"):
        home = home_of(root, user)
        argv += ["-F", under(root, os.path.join(home, ".ssh", "config")) if home else os.devnull]
    ids: dict = {}
    if os.geteuid() == 0 and user != "root" and root in ("", "/"):
        try:
            entry = pwd.getpwnam(user)
            ids = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": os.getgrouplist(user, entry.pw_gid)}
        except KeyError:
            return {f"launch.ssh.{peer}": ABSENT for peer in peers}
    out = {}
    names = list(dict.fromkeys(peers))
    for start in range(0, len(names), 16):  # at most 16 at once
        running = {}
        for peer in names[start:start + 16]:
            try:
                running[peer] = subprocess.Popen([*argv, "--", peer], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                                 stderr=subprocess.DEVNULL, text=True, **ids)
            except OSError:
                out[f"launch.ssh.{peer}"] = ABSENT
        for peer, proc in running.items():
            try:
                text = proc.communicate(timeout=SSH_TIMEOUT)[0]
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                text = ""
            lines = [line.strip()[:LAUNCH_LINE] for line in (text or "").splitlines()
                     if proc.returncode == 0 and line.split(" ", 1)[0] in SSH_OPTIONS]
            out[f"launch.ssh.{peer}"] = _lines_value(lines[:LAUNCH_LINES])
    return out


def launch_state(root: str, user: str = "root", peers: list[str] | None = None, ssh_path: str = "") -> dict:
    """What changes what a rank runs or how it reaches its peers, beside the env itself, as text (one line per
    setting, "<file>: <line>", so that `check` names the file and the line that differ; "absent" for none):

    - ``launch.env``: the variables a non-interactive SSH command gets from pam_env (/etc/environment,
      /etc/default/locale, /etc/security/pam_env.conf, the user's ~/.pam_environment) and sshd (the user's
      ~/.ssh/environment, where PermitUserEnvironment lets sshd read it): PYTHONPATH, LD_*, OMPI_MCA_*, NCCL_*, ...
    - ``launch.sshd``: sshd_config's PermitUserEnvironment, SetEnv and AcceptEnv lines (its Include'd files too).
    - ``launch.mpi``: Open MPI's parameter files (<prefix>/etc/openmpi-mca-params.conf of the mpirun on the SSH
      PATH, Debian's /etc/openmpi/openmpi-mca-params.conf, the user's ~/.openmpi/mca-params.conf).
    - ``launch.nccl``: /etc/nccl.conf and the user's ~/.nccl.conf. Horovod reads only variables (``launch.env``).
    - ``launch.ld``: the dynamic linker's preload and search-path files (:func:`ld_lines`).
    - ``launch.ssh.<peer>`` for every name in ``peers`` (:func:`ssh_resolved`).
    """
    home = home_of(root, user)
    mine = (lambda rel: [os.path.join(home, rel)]) if home else (lambda rel: [])
    sshd, user_env = sshd_lines(root)
    env_files = ["/etc/environment", "/etc/default/locale", "/etc/security/pam_env.conf", *mine(".pam_environment")]
    if user_env:
        env_files += mine(".ssh/environment")
    mpirun = mpi_state(root, ssh_path)["mpi.path"]
    mpi_files = [os.path.join(os.path.dirname(os.path.dirname(mpirun)), "etc", "openmpi-mca-params.conf")
                 if mpirun != ABSENT else "", "/etc/openmpi/openmpi-mca-params.conf", *mine(".openmpi/mca-params.conf")]
    groups = {"launch.env": env_files, "launch.mpi": list(dict.fromkeys(f for f in mpi_files if f)),
              "launch.nccl": ["/etc/nccl.conf", *mine(".nccl.conf")]}
    out = {key: _lines_value([line for path in files for line in setting_lines(root, path)])
           for key, files in groups.items()}
    out["launch.sshd"] = _lines_value(sshd)
    out["launch.ld"] = _lines_value(ld_lines(root))
    out.update(ssh_resolved(root, user, list(peers or [])))
    return out


# ------------------------------------------------------------------------------------------ Slurm

SLURM_FILES = ("slurm.conf", "cgroup.conf", "gres.conf")  # hvd_slurm's, in /etc/slurm
SLURM_TIMEOUT = 10
# What scontrol says when slurmctld could not verify this node's munge credential, or this node slurmctld's: their
# munge keys differ (or their clocks, by more than munge's TTL).
MUNGE_REFUSED = ("Zero Bytes were transmitted or received", "authentication error", "Protocol authentication error",
                 "Invalid credential")


def _run(argv: list[str], stdin: bytes | None = None) -> tuple[int | None, str]:
    """(exit status, output with errors) of ``argv``; status None when it could not run or took too long."""
    import subprocess

    try:
        proc = subprocess.run(argv, input=stdin if stdin is not None else b"", stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=SLURM_TIMEOUT, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"{argv[0]}: {exc}"
    return proc.returncode, proc.stdout.decode("utf-8", "replace")


def _said(text: str) -> str:
    """A program's words, as an item holds them: the first non-empty line, printable, bounded."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "") or "no output"
    return "".join(c if c.isprintable() else "?" for c in line)[:LAUNCH_LINE]


def running(root: str, names: tuple[str, ...]) -> set[str]:
    """Which of the process names ``names`` run on the node (/proc/<pid>/comm, readable by every user)."""
    found = set()
    for comm in glob.glob(os.path.join(glob.escape(under(root, "/proc")), "[0-9]*", "comm")):
        name = (read_text(comm) or "").strip()
        if name in names:
            found.add(name)
    return found


def slurm_state(root: str, role: str, run=_run, hostname: str = "") -> dict:
    """Where the cluster runs under Slurm (``role``: "controller" on the node that runs slurmctld, else "node"):

    - ``slurm.config.<file>``: d16 of hvd_slurm's /etc/slurm/slurm.conf, cgroup.conf and gres.conf.
    - ``slurm.slurmd`` and, on the controller, ``slurm.slurmctld``: "running" or "not running".
    - ``slurm.munge``: "ok" when the node's munged encodes and decodes a credential and slurmctld accepts this node's
      (the node asks it for its own record, below), else what fails. The key itself is munge's alone (0400): it is
      judged by what it does, never read.
    - ``slurm.node`` and ``slurm.drain``: the node as slurmctld has it (plugins/module_utils/hvd_slurm.py's judge):
      "ok", or down or drained by Slurm itself, and why; "absent", or an operator's or hvdcluster's drain, its reason
      and who set it (a notice).
    """
    from ansible_collections.hvd.cluster.plugins.module_utils import hvd_slurm  # noqa: PLC0415 - only under Slurm

    out = {f"slurm.config.{name}": file_d16(under(root, f"/etc/slurm/{name}")) for name in SLURM_FILES}
    daemons = ("slurmd", "slurmctld") if role == "controller" else ("slurmd",)
    up = running(root, daemons)
    out.update({f"slurm.{name}": "running" if name in up else "not running" for name in daemons})
    out["slurm.drain"] = ABSENT
    rc, cred = run(["munge", "-n"])
    if rc == 0:
        rc, said = run(["unmunge"], stdin=cred.encode())
    else:
        said = cred
    if rc != 0:
        out["slurm.munge"] = f"munged does not answer: {_said(said)}"
        out["slurm.node"] = "not read: munged does not answer"
        return out
    import socket  # noqa: PLC0415 - only under Slurm

    name = hostname or socket.gethostname().split(".", 1)[0]
    rc, said = run(["scontrol", "-o", "show", "node", name])
    if rc == 0:
        out["slurm.munge"] = "ok"
        out["slurm.node"], out["slurm.drain"] = hvd_slurm.judge(hvd_slurm.fields(said.strip().splitlines()[0]))
    elif any(words in said for words in MUNGE_REFUSED):
        out["slurm.munge"] = ("the Slurm controller refuses this node's munge credentials: its munge key is not the "
                              f"controller's ({_said(said)})")
        out["slurm.node"] = "not read: munge refused"
    elif "not found" in said:
        out["slurm.munge"] = "ok"
        out["slurm.node"] = f"not in the controller's slurm.conf as {name}: {_said(said)}"
    else:
        out["slurm.munge"] = "not judged: the Slurm controller did not answer"
        out["slurm.node"] = f"cannot reach the Slurm controller: {_said(said)}"
    return out


# ------------------------------------------------------------------------------------------ all of it


SECTIONS = ("os", "packages", "driver", "components", "mpi", "env", "mesh", "base", "launch")


def node_state(root: str = "/", *, cluster: str, packages: list[str] | None = None, env_prefix: str = "/opt/hvd/env",
               user: str = "root", cluster_public_key: str = "", ssh_path: str = "",
               deep: bool = False, sections: list[str] | None = None, peers: list[str] | None = None,
               slurm: str = "") -> dict:
    """The node's state: one flat dict, sorted by key; ``sections``: only those parts (default: all); ``peers``: the
    names the node's ``ssh`` reaches its peers by (``launch.ssh.<peer>``); ``slurm``: under Slurm, "controller" or
    "node" (the ``slurm.*`` items, read with every section), "" for a cluster without it."""
    unknown = sorted(set(sections or ()) - set(SECTIONS))
    if unknown:
        raise ValueError(f"unknown sections {unknown} (known: {', '.join(SECTIONS)})")
    readers = {
        "os": lambda: os_state(root),
        "packages": lambda: packages_state(root, list(packages or [])),
        "driver": lambda: driver_state(root),
        "components": lambda: components_state(root, deep),
        "mpi": lambda: mpi_state(root, ssh_path),
        "env": lambda: env_state(root, env_prefix, deep),
        "mesh": lambda: mesh_state(root, cluster, user, cluster_public_key),
        "base": lambda: base_state(root, cluster),
        "launch": lambda: launch_state(root, user, peers, ssh_path),
    }
    state = {}
    for section in SECTIONS:
        if not sections or section in sections:
            state.update(readers[section]())
    if slurm and not sections:
        state.update(slurm_state(root, slurm))
    return dict(sorted(state.items()))
