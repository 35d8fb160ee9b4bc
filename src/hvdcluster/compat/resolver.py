""":func:`resolve`: the partial ``stack`` of hosts.yaml made complete and consistent, or every conflict listed."""

from __future__ import annotations

from collections.abc import Mapping

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_defaults import ENV_PREFIX

from . import distro
from .draft import _conflicts, _draft, _Draft, _involving_the_user, _is_gpu, _package_pins, _requirements
from .matrix import _Catalog, _matrix
from .model import Conflict, NodeInfo, Plan, ResolveError
from .search import _Filler
from .versions import _listing, _mm, _newest_first

DEFAULT_PREFIX = ENV_PREFIX  # python.prefix when hosts.yaml gives none
_PIP_NAMES = {"pytorch": "torch", "tensorflow": "tensorflow"}


# --------------------------------------------------------------------------------------------- checks


def _unknowns(cat: _Catalog, draft: _Draft, node: NodeInfo, os_row: dict | None) -> list[Conflict]:
    """Versions the matrix does not list, and a node OS it does not support."""
    found = []
    for kind in ("cuda", "driver", "cudnn", "nccl", "pytorch", "tensorflow", "horovod"):
        value = draft.values.get(kind)
        if value is not None and cat.find(kind, value) is None:
            rows, _ = cat.rows[kind]
            ranges = [str(row["versions"]) for row in cat.ranges(kind)]
            stated = f"; ranges the matrix states: {', '.join(ranges)}" if ranges else ""
            found.append(
                Conflict(
                    "unknown-version",
                    f"unknown {kind} {value} (known: {_listing(cat.known(kind))}{stated}; the newest verified is"
                    f" {cat.known(kind)[0]}: add a row with its source to compat.yaml for a newer one)",
                    (draft.label(kind), f"compat.yaml {kind}"),
                    rows[0]["source"],
                    draft.where(kind),
                )
            )
    if node.os_id and os_row is None:
        supported = "; ".join(f"{'/'.join(r['ids'])} {r['version']}" for r in cat.m["os"])
        found.append(
            Conflict(
                "unsupported-os",
                f"node OS {node.os_id} {node.os_version} is not supported (supported: {supported})",
                (f"node.os={node.os_id} {node.os_version}", "compat.yaml os"),
                cat.m["os"][0]["source"],
            )
        )
    return found


def _mpi_source_needs_version(mpi: dict, source: str, draft: _Draft, lines: Mapping[str, int]) -> list[Conflict]:
    if mpi["source"] == "source" and not mpi["version"]:
        line = lines.get("stack.mpi.source")
        return [
            Conflict(
                "mpi-source-needs-version",
                "an Open MPI source build needs stack.mpi.version (there is no default to build)",
                ("stack.mpi.source=source" + (f" (line {line})" if line else ""), "stack.mpi.version=(unset)"),
                source,
                f"{draft.path}:{line}" if line else "",
            )
        ]
    return []


def _nccl_tests(stack: dict, draft: _Draft, cat: _Catalog,
                lines: Mapping[str, int]) -> tuple[dict | None, list[Conflict]]:
    """stack.nccl_tests, asked for by writing it: built on a stack with a GPU and NCCL only (a note says why not
    elsewhere), from the tarball its url names, checked by its sha256. Only GitHub publishes the release, as a tag
    whose tarball's bytes depend on who made it: the matrix pins the sha256 per tarball source, and a stack without
    url and sha256 is refused, saying what to give (GitHub's own tarball has no pin here)."""
    given = stack.get("nccl_tests")
    if given is None:
        return None, []
    rows = cat.m.get("nccl_tests") or []
    version = str(given.get("version") or _newest_first(row["version"] for row in rows)[0])
    if not draft.values["gpu"] or not draft.values.get("nccl"):
        why = "a CPU-only stack has no GPU" if not draft.values["gpu"] else "the stack has no NCCL"
        draft.notes.append(f"nccl_tests: not built ({why} for nccl-tests to measure)")
        return None, []
    row = next((row for row in rows if row["version"] == version), None)
    source = row["source"] if row else cat.m["sources"]["nccl_tests"]
    missing = [key for key in ("url", "sha256") if not given.get(key)]
    if missing:
        line = lines.get("stack.nccl_tests")
        pins = "; ".join(f"a `{t['made_by']}` tarball has sha256 {t['sha256']}"
                         for t in (row or {}).get("tarballs", ()))
        message = (f"nccl-tests {version} is published only on GitHub, whose tag tarball has no sha256 pinned here:"
                   " point stack.nccl_tests.url at your mirror or a local copy of the release and"
                   f" stack.nccl_tests.sha256 at its digest{f' ({pins})' if pins else ''}")
        given_line = lines.get("stack.nccl_tests.version")
        shown = f"stack.nccl_tests.version={version}" + (f" (line {given_line})" if given_line else
                                                          "" if "version" in given else " (default)")
        return None, [Conflict("nccl-tests-needs-tarball", message, (shown, f"stack.nccl_tests.{missing[0]}=(unset)"),
                               source, f"{draft.path}:{line}" if line else "")]
    sha256 = str(given["sha256"]).lower()
    pinned = next((t for t in (row or {}).get("tarballs", ()) if t["sha256"] == sha256), None)
    if pinned:
        why = f"its sha256 is the one pinned for a `{pinned['made_by']}` tarball of commit {row['commit'][:12]}"
    elif row:
        why = "its sha256 is stack.nccl_tests.sha256 (not one the version data pins for this release)"
    else:
        known = ", ".join(_newest_first(r["version"] for r in rows))
        why = f"not a release the version data lists (known: {known}); its sha256 is stack.nccl_tests.sha256"
    draft.notes.append(f"nccl_tests: {version} built from stack.nccl_tests.url ({why})")
    return {"version": version, "url": given["url"], "sha256": sha256}, []


def _range_notes(cat: _Catalog, draft: _Draft) -> list[str]:
    """A note for each value judged by a range of the matrix rather than a verified row."""
    notes = []
    for kind in cat.rows:
        value = draft.values.get(kind)
        row = cat.find(kind, value) if value is not None else None
        if row is not None and "versions" in row:
            notes.append(f"{kind}: {value} is not a verified release; judged by the matrix range {row['versions']}")
    return notes


# --------------------------------------------------------------------------------------------- plan


def _mpi(stack: dict, os_row: dict | None, draft: _Draft) -> dict:
    """The mpi section; a package install takes the OS's Open MPI version."""
    given = dict(stack.get("mpi") or {})
    distro = (os_row or {}).get("openmpi")
    mpi = {"impl": given.pop("impl", "openmpi"), "version": given.pop("version", None)}
    mpi["source"] = given.pop("source", "package")
    if mpi["source"] == "package" and mpi["version"] is None and distro:
        mpi["version"] = distro["version"]
        draft.values["mpi"] = distro["version"]
        draft.notes.append(f"mpi: openmpi {distro['version']} (the {os_row['ids'][0]} {os_row['version']} package)")
    return {**mpi, **given}


def _python(stack: dict, draft: _Draft, cat: _Catalog) -> dict:
    """The python section: given keys kept, framework pins added for the versions chosen, and what building
    Horovod against that framework needs in the env (``build_requires``) unless the user lists the package."""
    given = dict(stack.get("python") or {})
    python = {"manager": given.pop("manager", "venv"), "prefix": given.pop("prefix", DEFAULT_PREFIX)}
    packages = list(given.pop("packages", None) or [])
    python["version"] = draft.values["python"]
    pins = _package_pins(packages)
    for kind in ("pytorch", "tensorflow"):
        value = draft.values.get(kind)
        if value is None or kind in draft.given:
            continue
        pin = f"{_PIP_NAMES[kind]}=={value}.*"
        packages = [pin if kind in pins and p == pins[kind][0] else p for p in packages]
        if kind not in pins:
            packages.append(pin)
        draft.shown[kind] = pin
    listed = {canonicalize_name(req.name) for _, req in _requirements(packages)}
    for kind in ("pytorch", "tensorflow"):
        row = cat.find(kind, draft.values.get(kind)) if draft.values.get(kind) else None
        for need in (row or {}).get("build_requires", ()):
            if canonicalize_name(Requirement(need).name) not in listed:
                packages.append(need)
                draft.notes.append(f"{need}: building horovod against {kind} {draft.values[kind]} needs it"
                                   f" (see {row['build_requires_source']})")
    python["packages"] = packages
    return {**python, **given}



def _default_python(node: NodeInfo, os_row: dict | None, draft: _Draft) -> None:
    """Python defaults to the node's interpreter, else the OS default."""
    if draft.values["python"] is not None:
        return
    if node.python:
        draft.values["python"] = _mm(node.python)
        draft.notes.append(f"python: {draft.values['python']} (the node's python {node.python})")
    elif os_row and "python" in os_row:
        draft.values["python"] = os_row["python"]["version"]
        draft.notes.append(f"python: {draft.values['python']} (the {os_row['ids'][0]} {os_row['version']} default)")


def _defaults_before_search(stack: dict, draft: _Draft, cat: _Catalog) -> dict:
    """Horovod settings that do not depend on the search, with notes."""
    given = dict(stack.get("horovod") or {})
    gpu = draft.values["gpu"]
    horovod = {
        "version": given.pop("version", None) or cat.known("horovod")[0],
        "frameworks": list(given.pop("frameworks", None) or ["pytorch"]),
        "gpu_operations": given.pop("gpu_operations", None) or ("nccl" if gpu else "none"),
        "cpu_operations": given.pop("cpu_operations", None) or "gloo",
        "controllers": list(given.pop("controllers", None) or ["mpi", "gloo"]),
    }
    if draft.values["horovod"] is None:
        draft.values["horovod"] = horovod["version"]
        draft.notes.append(f"horovod: {horovod['version']} (newest known release)")
    draft.values["gpu_operations"] = horovod["gpu_operations"]
    if gpu:
        draft.values["gpu_source"] = stack.get("gpu_source") or "system"
    return {**horovod, **given}


def resolve(
    stack: dict,
    node: NodeInfo | None = None,
    *,
    gpu: bool | None = None,
    lines: Mapping[str, int] | None = None,
    path: str = "hosts.yaml",
) -> Plan:
    """Fill ``stack`` (hosts.yaml's ``stack``) with the newest consistent choices, or raise ResolveError.

    ``lines`` (``ClusterSpec.stack_lines``: "stack.cuda" -> line) and ``path`` let each conflict name the
    hosts.yaml line of the value the user wrote.
    """
    cat = _Catalog(_matrix())
    stack = stack or {}
    node = node or NodeInfo()
    lines = lines or {}
    os_row = cat.os(node)
    draft = _draft(stack, node, _is_gpu(stack, node, gpu), lines, path)
    archive = distro.archive_row(cat, node, os_row, draft) if distro.active(stack, draft) else None
    os_row = os_row or archive  # unprobed, the nodes are held to that archive's OS: its defaults (gcc, python) apply
    conflicts = distro.prepare(archive, draft, cat, lines) if archive else []
    from_distro = "distro_cuda" in draft.values
    horovod = _defaults_before_search(stack, draft, cat)
    _default_python(node, os_row, draft)
    _Filler(cat, draft, node, os_row).fill(horovod["frameworks"])
    if from_distro:
        conflicts += distro.from_wheels(draft, cat)
    mpi = _mpi(stack, os_row, draft)
    python = _python(stack, draft, cat)

    conflicts += _unknowns(cat, draft, node, os_row) + _involving_the_user(draft, _conflicts(cat, draft))
    conflicts += _mpi_source_needs_version(mpi, cat.m["sources"]["horovod_install"], draft, lines)
    nccl_tests, refused = _nccl_tests(stack, draft, cat, lines)
    conflicts += refused
    if conflicts:
        raise ResolveError(conflicts)

    patches = cat.horovod_patches(horovod["version"], draft.values)
    notes = draft.notes + _range_notes(cat, draft)
    notes += [f"horovod patch {p['name']}: lifts the break on {p['fixes']}" for p in patches]
    resolved = {
        "gpu": draft.values["gpu"],
        "gpu_source": draft.values.get("gpu_source"),
        **({"gpu_repo": stack["gpu_repo"]} if stack.get("gpu_repo") and draft.values["gpu"] else {}),
        **({"without_device": True} if stack.get("without_device") and draft.values["gpu"] else {}),
        **({f"{name}_source": "env" for name in distro.FROM_WHEELS} if from_distro else {}),
        **({"archive_os": distro.archive_os(archive)} if from_distro and archive else {}),
        **{name: draft.values.get(name) for name in ("driver", "cuda", "cudnn", "nccl", "gcc")},
        "mpi": mpi,
        "python": python,
        "horovod": horovod,
        **({"nccl_tests": nccl_tests} if nccl_tests else {}),
    }
    return Plan(resolved, tuple(notes), tuple(p["name"] for p in patches))
