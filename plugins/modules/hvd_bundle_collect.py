#!/usr/bin/python
"""Ansible module: gather, on a converged node (as root), every file an offline converge of nodes like it needs.

- apt/: every package installed on this converged node (the image's and what the roles installed, with the
  dependencies this node's apt resolved for them), at its installed version, downloaded by this node's apt from its
  own sources; and a flat `Packages` index of them.
- pypi/: the env's lock (written by hvd_pyenv), every distribution by its sha256; and Horovod's sdist.

Only what the bundle lacks (``have``, by sha256) is downloaded; ``out`` (a tar) holds those files (and `Packages`).
The result's ``bundle`` lists every file the bundle needs, with its sha256, size and why. In check mode nothing is
downloaded or written: ``pending`` names the apt packages and locked distributions the bundle lacks.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: hvd_bundle_collect
short_description: Download what an air-gap bundle lacks on a converged node (apt packages, locked wheels)
description:
  - Runs on one converged node of the nodes' OS (the resolver); its own apt and pip resolve what a node needs.
options:
  have: {description: "What the bundle holds already: relative path -> sha256.", type: dict, default: {}}
  prefix: {description: The env prefix (its hvd-requirements.lock and keys are read)., type: path, required: true}
  skip_sha256: {description: "sha256 of files the bundle carries otherwise (the wheelhouse).", type: list,
                elements: str, default: []}
  horovod: {description: The Horovod version whose sdist the bundle carries., type: str, required: true}
  resolver: {description: This node's name (for the reasons)., type: str, default: the resolver node}
  conda_tools: {description: The pip requirements of the conda tools (a conda env only)., type: list,
                elements: str, default: []}
  work: {description: The private work folder (apt/ and pypi/ are made there)., type: path, required: true}
  out: {description: The tar to write the new files into., type: path, required: true}
author: hvdcluster developers (@hvdcluster)
"""

EXAMPLES = r"""
- name: Start from a clean private work folder
  hvd.cluster.hvd_workdir:
    name: bundle
    clean: true
  register: work

- name: Resolve and download what the bundle lacks (apt packages with their dependencies, locked wheels)
  hvd.cluster.hvd_bundle_collect:
    have: "{{ bundle_have }}"
    prefix: /opt/hvd/env
    skip_sha256: "{{ wheelhouse_sha256 }}"
    horovod: "0.28.1"
    resolver: "{{ inventory_hostname }}"
    work: "{{ work.path }}"
    out: "{{ work.path }}/new.tar"
  register: collected
"""

RETURN = r"""
bundle: {description: "files (path, sha256, size, why), new (paths in out), keys (env, horovod), unavailable,
         manual.", type: dict, returned: success}
pending: {description: "Check mode: the apt packages and locked distributions the bundle lacks.", type: list,
          returned: check mode}
"""

import os
import re
import tarfile

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import sha256_of


class CollectError(Exception):
    """A tool failed: the module fails with this message."""


RUN = None  # the module's run_command, set by main()


def run(argv: list[str], cwd: str | None = None, check: bool = True) -> str:
    rc, out, err = RUN(argv, cwd=cwd)
    if rc != 0 and check:
        raise CollectError(f"{' '.join(argv[:3])} ...: rc {rc}: {err.strip()[-2000:]}")
    return out


def installed() -> dict[str, str]:
    """Every package installed on this node -> its version. The node was converged: these are the image's packages
    and what the roles installed, with every dependency as this node's apt resolved it (the alternative it chose for
    an `a | b` dependency, the provider of a virtual one) - what a bare node of the same image ends up with."""
    found = {}
    for line in run(["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${db:Status-Abbrev}\n"]).splitlines():
        name, version, status = (line.split("\t") + ["", ""])[:3]
        if status[1:2] == "i":  # installed (wanted "install" or held: "ii", "hi")
            found[name] = version
    return found


def records(wanted: list[str]) -> dict[str, dict[str, str]]:
    """The apt index record of each ``name=version`` (only those with a file to download), by package name."""
    found: dict[str, dict[str, str]] = {}
    for stanza in run(["apt-cache", "show", *wanted], check=False).split("\n\n"):
        fields, last = {}, None
        for line in stanza.splitlines():
            if line.startswith((" ", "\t")) and last:
                fields[last] += "\n" + line
            elif ":" in line:
                last, value = line.split(":", 1)
                fields[last] = value.strip()
        if "Filename" in fields and "SHA256" in fields and fields.get("Package") not in found:
            fields["_text"] = stanza.strip()
            found[fields["Package"]] = fields
    return found


def collect(request: dict, work: str, out_tar: str, check: bool = False) -> dict:
    """Download what the bundle lacks into ``work`` and pack it into ``out_tar``; in check mode, name it only."""
    have = request["have"]
    resolver = request.get("resolver", "the resolver node")
    files, new, unavailable = [], [], []

    # ---------------------------------------------------------------- apt
    manual = set(run(["apt-mark", "showmanual"]).split())
    versions = installed()
    found = records([f"{name}={version}" for name, version in sorted(versions.items())])
    # Not in the index at the installed version (the mirror moved on, or installed from a file): its candidate.
    later = records(sorted(set(versions) - set(found)))
    found.update(later)
    unavailable = sorted(set(versions) - set(found))
    apt_dir = os.path.join(work, "apt")
    stanzas, fetch = [], []
    for name in sorted(found):
        record = found[name]
        base = os.path.basename(record["Filename"])
        rel = f"apt/{base}"
        how = "by the roles or the image" if name in manual else "as a dependency"
        why = f"{name} {record['Version']}: installed on {resolver} {how}"
        if name in later:
            why += f" (at {versions[name]}, which its apt sources no longer offer: this is their candidate)"
        files.append({"path": rel, "sha256": record["SHA256"], "size": int(record["Size"]), "why": why})
        stanzas.append(re.sub(r"^Filename: .*$", f"Filename: ./{base}", record["_text"], flags=re.M))
        if have.get(rel) != record["SHA256"]:
            fetch.append((name, record["Version"], base, record["SHA256"]))
    if check:
        return {"pending": [f"{n}={v}" for n, v, dummy_base, dummy_sha in fetch] + pending_wheels(request, have),
                "bundle": {}}
    os.makedirs(apt_dir, exist_ok=True)
    if fetch:
        run(["apt-get", "download", "-o", "APT::Sandbox::User=root",
             *[f"{n}={v}" for n, v, dummy_base, dummy_sha in fetch]],
            cwd=apt_dir)
    for name, _version, base, sha in fetch:
        path = os.path.join(apt_dir, base)
        if not os.path.isfile(path):  # apt-get names a download by its epoch-escaped version: find it by package
            candidates = [f for f in os.listdir(apt_dir) if f.startswith(name + "_") and f.endswith(".deb")]
            if len(candidates) == 1:
                os.rename(os.path.join(apt_dir, candidates[0]), path)
        if sha256_of(path) != sha:
            raise CollectError(f"apt-get download {name}: sha256 differs from this node's index")
        new.append(f"apt/{base}")
    packages = os.path.join(apt_dir, "Packages")
    with open(packages, "w", encoding="utf-8") as handle:
        handle.write("\n\n".join(stanzas) + "\n")
    files.append({"path": "apt/Packages", "sha256": sha256_of(packages), "size": os.path.getsize(packages),
                  "why": "the index of the local apt repository the nodes install from"})
    if have.get("apt/Packages") != files[-1]["sha256"]:
        new.append("apt/Packages")

    # ---------------------------------------------------------------- python
    prefix, skip = request["prefix"], set(request.get("skip_sha256", []))
    have_sha = {sha: rel for rel, sha in have.items() if rel.startswith("pypi/")}
    pypi = os.path.join(work, "pypi")
    os.makedirs(pypi, exist_ok=True)
    lock = os.path.join(prefix, "hvd-requirements.lock")
    wanted = []
    for line in open(lock, encoding="utf-8"):
        match = re.match(r"(\S+)==(\S+) --hash=sha256:([0-9a-f]{64})", line.strip())
        if not match or match.group(3) in skip:
            continue
        name, version, sha = match.groups()
        if sha in have_sha:
            rel = have_sha[sha]
            files.append({"path": rel, "sha256": sha, "size": None, "why": f"{name} {version}: the env's lock"})
        else:
            wanted.append((name, version, sha))
    pip = os.path.join(prefix, "bin", "pip")
    quiet = ["--no-input", "--progress-bar", "off", "--quiet", "--no-deps", "-d", pypi]
    if wanted:
        req = os.path.join(work, "wanted.txt")
        with open(req, "w", encoding="utf-8") as handle:
            handle.writelines(f"{n}=={v} --hash=sha256:{s}\n" for n, v, s in wanted)
        run([pip, "download", "--require-hashes", *quiet, "-r", req], cwd=work)
    tools = request.get("conda_tools") or []
    if tools and os.path.isfile(os.path.join(prefix, "hvd-conda.lock")):  # a conda env: the tools that make it
        before = set(os.listdir(pypi))
        run([pip, "download", "--only-binary", ":all:", *quiet[:-3], "-d", pypi, *tools], cwd=work)
        for name in sorted(set(os.listdir(pypi)) - before):
            sha = sha256_of(os.path.join(pypi, name))
            if any(item["sha256"] == sha for item in files):
                continue
            rel = have_sha.get(sha) or f"pypi/{name}"
            files.append({"path": rel, "sha256": sha, "size": None, "why": "a conda tool hvd_pyenv makes the env with"})
            if rel not in have:
                new.append(rel)
    sdist = f"horovod-{request['horovod']}.tar.gz"
    if not any(rel == f"pypi/{sdist}" for rel in have):
        run([pip, "download", "--no-binary", ":all:", *quiet, f"horovod=={request['horovod']}"], cwd=work)
    by_sha = {sha256_of(os.path.join(pypi, f)): f for f in os.listdir(pypi)}
    for name, version, sha in wanted:
        if sha not in by_sha:
            raise CollectError(f"pip download {name}=={version}: no file with the locked sha256 {sha}")
        rel = f"pypi/{by_sha[sha]}"
        files.append({"path": rel, "sha256": sha, "size": None, "why": f"{name} {version}: the env's lock"})
        new.append(rel)
    sdist_path = os.path.join(pypi, sdist)
    if os.path.isfile(sdist_path):
        new.append(f"pypi/{sdist}")
        files.append({"path": f"pypi/{sdist}", "sha256": sha256_of(sdist_path), "size": None,
                      "why": f"horovod {request['horovod']}: the sdist a Horovod build starts from"})
    else:
        files.append({"path": f"pypi/{sdist}", "sha256": have[f"pypi/{sdist}"], "size": None,
                      "why": f"horovod {request['horovod']}: the sdist a Horovod build starts from"})
    for item in files:
        if item["size"] is None and os.path.isfile(os.path.join(work, item["path"])):
            item["size"] = os.path.getsize(os.path.join(work, item["path"]))

    # ---------------------------------------------------------------- keys of the env and the wheel it built
    keys = {}
    for name, marker in (("env", ".hvd-env-key"), ("horovod", ".hvd-horovod-key")):
        try:
            keys[name] = open(os.path.join(prefix, marker), encoding="ascii").read().strip()
        except OSError:
            keys[name] = ""

    with tarfile.open(out_tar, "w") as tar:
        for rel in sorted(set(new)):
            tar.add(os.path.join(work, rel), arcname=rel)
    return {"bundle": {"files": files, "new": sorted(set(new)), "keys": keys, "unavailable": unavailable,
                       "manual": sorted(manual)}}


def pending_wheels(request: dict, have: dict) -> list[str]:
    """The locked distributions (and Horovod's sdist) the bundle lacks, read from the env's lock only."""
    skip, held = set(request.get("skip_sha256", [])), set(have.values())
    pending = []
    with open(os.path.join(request["prefix"], "hvd-requirements.lock"), encoding="utf-8") as handle:
        for line in handle:
            match = re.match(r"(\S+)==(\S+) --hash=sha256:([0-9a-f]{64})", line.strip())
            if match and match.group(3) not in skip and match.group(3) not in held:
                pending.append(f"{match.group(1)}=={match.group(2)}")
    if f"pypi/horovod-{request['horovod']}.tar.gz" not in have:
        pending.append(f"horovod=={request['horovod']} (sdist)")
    return pending


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    global RUN
    module = AnsibleModule(
        argument_spec={
            "have": {"type": "dict", "default": {}},
            "prefix": {"type": "path", "required": True},
            "skip_sha256": {"type": "list", "elements": "str", "default": []},
            "horovod": {"type": "str", "required": True},
            "resolver": {"type": "str", "default": "the resolver node"},
            "conda_tools": {"type": "list", "elements": "str", "default": []},
            "work": {"type": "path", "required": True},
            "out": {"type": "path", "required": True},
        },
        supports_check_mode=True,
    )
    RUN = module.run_command
    p = module.params
    try:
        result = collect(p, p["work"], p["out"], check=module.check_mode)
    except (CollectError, OSError) as err:
        module.fail_json(msg=f"hvd_bundle_collect: {err}")
    changed = bool(result.get("pending")) if module.check_mode else bool(result["bundle"]["new"])
    module.exit_json(changed=changed, **result)


if __name__ == "__main__":
    main()
