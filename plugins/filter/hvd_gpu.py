"""GPU component policy for hvd_gpu_component (CUDA toolkit, cuDNN, NCCL), in Python rather than Jinja.

Each component is described by data (``roles/hvd_gpu_component/vars/<name>.yml``: package names, pin formats,
wheel name, where its version is written and how to read it). These filters turn that data and a request
into a plan (what to install, where it lives, where to look for it) and read the version a node really has.
They are plain functions over plain data: ``tests/unit/test_gpu_filters.py`` calls them without Ansible.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_limits import release


_SOURCES = ("system", "env")


def _by_key(table: Any, key: str) -> Any:
    """``table`` itself, or its entry for ``key`` (else its ``"*"`` entry) when it is a mapping."""
    if isinstance(table, dict):
        return table.get(key, table.get("*"))
    return table


def _fields(spec: dict, version: str, cuda: str) -> dict[str, str]:
    """The names a format string of the data may use."""
    cuda_parts = cuda.split(".") if cuda else []
    own = version.split(".")
    return {
        "version": version,
        "major": own[0],
        "mm": ".".join(own[:2]),
        "mm_dash": "-".join(own[:2]),
        "cuda_mm": ".".join(cuda_parts[:2]),
        "cuda_major": cuda_parts[0] if cuda_parts else "",
        # A release given with fewer parts than the exact form ("9.1.0" of "9.1.0.70") takes that release's build.
        "build": spec.get("build", {}).get("exact" if _exact(spec, version) else "release", ""),
    }


def _exact(spec: dict, version: str) -> bool:
    return version.count(".") + 1 >= int(spec.get("exact_parts", 3))


def _wheel_pin(spec: dict, fields: dict[str, str], hashes: dict[str, list[str]]) -> tuple[str, str]:
    """The exact ``name==version`` of the component's wheel (a release resolved by the hash table), or an error."""
    name = spec["wheel"].format(**fields)
    version = fields["version"]
    if _exact(spec, version):
        return f"{name}=={version}", ""
    known = sorted(
        (key.split("==", 1)[1] for key in hashes if key.split("==", 1)[0] == name),
        key=lambda v: [int(p) if p.isdigit() else p for p in re.split(r"[.]", v)],
    )
    builds = [v for v in known if v.startswith(version + ".")]
    if builds:
        return f"{name}=={builds[-1]}", ""
    return "", (
        f"{spec['title']} {version} is a release, not a build: name the exact wheel version"
        f" ({name}==<{version}.N>) or add its sha256 to hvd_gpu_component_wheel_sha256"
    )


def _with_hashes(requirement: str, hashes: dict[str, list[str]]) -> tuple[str, str]:
    """``requirement`` as a pip requirements line with its ``--hash`` options, or an error naming it."""
    line = requirement.strip()
    if "--hash=" in line:
        return line, ""
    pin = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][0-9A-Za-z.+!_-]*)", line)
    if not pin:
        return "", f"wheel requirement {line!r} is not pinned exactly (name==version)"
    key = f"{pin.group(1).lower().replace('_', '-')}=={pin.group(2)}"
    digests = hashes.get(key) or []
    if not digests:
        return "", (
            f"no sha256 is known for {key}: add it to hvd_gpu_component_wheel_sha256 (checked against a source you"
            f" trust) or write the requirement with --hash=sha256:...; hvdcluster installs no wheel unchecked"
        )
    return " ".join([key] + [f"--hash=sha256:{d}" for d in digests]), ""


def hvd_gpu_component_plan(
    spec: dict,
    source: str,
    repo: str,
    version: str,
    cuda_version: str = "",
    packages: list | None = None,
    wheels: list | None = None,
    env_prefix: str = "",
    distribution: str = "Debian",
    architecture: str = "x86_64",
    wheel_sha256: dict | None = None,
) -> dict[str, Any]:
    """What hvd_gpu_component does for one request.

    Returns ``error`` (empty when the request is sound: the role stops with it otherwise) and ``packages``,
    ``apt_specs`` (each package pinned), ``wheels`` (pip requirement lines with their hashes), ``home``,
    ``lib_dir``, ``register_libs`` (whether the libraries need an ld.so.conf.d entry), and the places to read
    the version from: ``programs`` and ``headers`` (absolute paths, first found wins).
    """
    version = str(version or "")
    cuda = str(cuda_version or "") if spec.get("needs_cuda", True) else version
    hashes = {str(k).lower(): [str(d) for d in v] for k, v in (wheel_sha256 or {}).items()}
    plan: dict[str, Any] = {
        "error": "", "packages": [], "apt_specs": [], "wheels": [], "home": "", "lib_dir": "",
        "register_libs": False, "programs": [], "headers": [],
    }
    title = spec["title"]
    usage = spec.get("usage", "")
    problems = []
    if source not in _SOURCES:
        problems.append(f"source {source!r} is not one of {', '.join(_SOURCES)}")
    if repo not in spec["repos"] and not (source == "env" and repo in ("nvidia", "distro")):
        problems.append(f"repo {repo!r} is not one of {', '.join(spec['repos'])}")
    if version and not re.fullmatch(spec["version_regex"], version):
        problems.append(f"version {version!r} is not like {spec['version_example']}")
    if version and spec.get("needs_cuda", True) and not re.match(r"^\d+\.\d+", cuda):
        if not (source == "env" and wheels) and not (source == "system" and repo == "distro"):
            problems.append(f"cuda {cuda!r} must be X.Y: {spec.get('cuda_why', 'the build is per CUDA version')}")
    if version and source == "system" and repo == "distro" and distribution in spec.get("distro_missing", []):
        problems.append(f"{distribution}'s archive has no {title}: use repo nvidia or source env")
    if problems:
        plan["error"] = f"hvd_{spec['name']}: " + "; ".join(problems) + (f". {usage}" if usage else "")
        return plan

    fields = _fields(spec, version, cuda) if version else {}
    if source == "env":
        plan["home"] = env_prefix
        plan["lib_dir"] = f"{env_prefix}/lib"
    else:
        plan["home"] = _by_key(spec["home"], repo).format(**fields) if version else ""
        plan["lib_dir"] = f"{plan['home']}/{_by_key(spec.get('lib', 'lib'), repo)}" if version else ""
    plan["register_libs"] = bool(version) and plan["home"] not in ("", "/usr")

    if version and source == "system":
        names = list(packages or []) or [
            p.format(**fields) for p in _by_key(_by_key(spec["packages"], repo), fields["major"])
        ]
        pin = _by_key(_by_key(spec["pin"], repo), fields["major"]).format(**fields)
        plan["packages"] = names
        plan["apt_specs"] = [name + pin for name in names]
    if version and source == "env":
        requirements = list(wheels or [])
        if not requirements and "wheel" not in spec:
            plan["error"] = f"hvd_{spec['name']}: {spec['wheels_needed']}"
            return plan
        if not requirements:
            requirement, error = _wheel_pin(spec, fields, hashes)
            if error:
                plan["error"] = f"hvd_{spec['name']}: {error}"
                return plan
            requirements = [requirement]
        for requirement in requirements:
            line, error = _with_hashes(str(requirement), hashes)
            if error:
                plan["error"] = f"hvd_{spec['name']}: {error}"
                return plan
            plan["wheels"].append(line)

    subst = {"arch": architecture, "prefix": env_prefix}

    def place(path: str) -> str:  # absolute as written, else in the component's home
        path = path.format(**subst)
        return path if path.startswith("/") else f"{plan['home']}/{path}"

    if version:
        plan["programs"] = [place(p) for p in _by_key(spec.get("programs", []), source)]
        plan["headers"] = [place(h) for h in _by_key(spec.get("headers", []), source)]
    else:
        plan["programs"] = [place(p) for p in spec.get("search_programs", [])]
        plan["headers"] = [place(h) for h in spec.get("search_headers", [])]
    return plan


def hvd_gpu_home_of(path: str) -> str:
    """The home of a component from where its program or header was found (``/usr/local/cuda-12.4/bin/nvcc``,
    ``/usr/include/x86_64-linux-gnu/cudnn_version_v9.h`` -> ``/usr``); empty for an empty path."""
    for part in ("/bin/", "/include/"):
        if part in path:
            return path.rsplit(part, 1)[0] or "/"
    return ""


def hvd_gpu_found_version(spec: dict, program_output: str = "", header_text: str = "") -> dict[str, Any]:
    """The version a node has, in the component's own words: its program's ``--version`` output, else its header.

    ``code`` is the component's numeric version code where the data defines one (NCCL_VERSION_CODE, which
    ``hvd.nccl_built()`` returns), else 0.
    """
    found = ""
    if program_output and spec.get("program_regex"):
        match = re.search(spec["program_regex"], program_output)
        found = match.group(1) if match else ""
    parts: list[int] = []
    if not found and header_text:
        values = []
        for name in spec.get("defines", []):
            match = re.search(rf"#define {re.escape(name)}\s+(\d+)", header_text)
            values.append(match.group(1) if match else "")
        if values and all(values):
            if spec.get("define_kind") == "cudart":  # CUDART_VERSION 11070 -> 11.7
                number = int(values[0])
                found = f"{number // 1000}.{number % 1000 // 10}"
            else:
                found = ".".join(values)
    if found:
        parts = [int(p) for p in found.split(".")[:3] if p.isdigit()]
    code = 0
    if spec.get("code") == "nccl" and len(parts) == 3:
        # nccl.h: NCCL_VERSION(X, Y, Z) = X*10000 + Y*100 + Z from 2.9 on, X*1000 + Y*100 + Z before.
        code = parts[0] * (10000 if parts[:2] >= [2, 9] else 1000) + parts[1] * 100 + parts[2]
    return {"version": found, "code": code}


def hvd_gpu_version_matches(found: str, requested: str) -> bool:
    """Whether the version found is the one asked for: one is the other or a more precise form of it."""
    if not found or not requested:
        return False
    return (found + ".").startswith(requested + ".") or (requested + ".").startswith(found + ".")


def hvd_driver_branch(version: Any) -> str:
    """The NVIDIA driver's branch, as its packages name it: ``"550.54.15"`` -> ``"550"``, ``"550"`` -> ``"550"``; ``""``
    for no version (hvd_limits.release reads the version, as the resolver and the pre-flight do)."""
    numbers = release(version)
    return str(numbers[0]) if numbers else ""


def hvd_so_links(names: list[str]) -> dict[str, str]:
    """The unversioned links a build links against (``libnccl.so`` -> ``libnccl.so.2``) that ``names`` lack."""
    present = set(names)
    links: dict[str, str] = {}
    for name in sorted(names):
        if name.endswith(".so"):
            continue
        link = re.sub(r"\.so(\.\d+)+$", ".so", name)
        if link != name and link not in present and link not in links:
            links[link] = name
    return links


def hvd_nvidia_smi_gpus(lines: list[str]) -> list[dict[str, str]]:
    """``nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader`` as a list of GPUs."""
    gpus = []
    for line in lines:
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 3:
            gpus.append({"name": fields[0], "compute_cap": fields[1], "driver": fields[2]})
    return gpus


_CC = re.compile(r"\d{2,3}")


def hvd_nvcc_gencode(cc_list: str) -> list[str]:
    """nvcc's ``-gencode`` options for compute capabilities written as hvd_nvidia_driver records them ("80,90"): the
    device code of each, and the newest one's PTX too, which a newer GPU compiles when the program loads (what
    nccl-tests' own default does). ValueError names an entry that is not a capability without its dot."""
    ccs = [cc.strip() for cc in str(cc_list).split(",") if cc.strip()]
    bad = [cc for cc in ccs if not _CC.fullmatch(cc)]
    if bad or not ccs:
        raise ValueError(f"compute capabilities {cc_list!r}: write them without the dot, comma-separated (\"80,90\")")
    ccs = sorted(set(ccs), key=int)
    return [f"-gencode=arch=compute_{cc},code=sm_{cc}" for cc in ccs] + [
        f"-gencode=arch=compute_{ccs[-1]},code=compute_{ccs[-1]}"]


class FilterModule:
    def filters(self) -> dict:
        return {
            "hvd_nvcc_gencode": hvd_nvcc_gencode,
            "hvd_gpu_component_plan": hvd_gpu_component_plan,
            "hvd_gpu_found_version": hvd_gpu_found_version,
            "hvd_gpu_version_matches": hvd_gpu_version_matches,
            "hvd_driver_branch": hvd_driver_branch,
            "hvd_gpu_home_of": hvd_gpu_home_of,
            "hvd_so_links": hvd_so_links,
            "hvd_nvidia_smi_gpus": hvd_nvidia_smi_gpus,
        }
