"""Gather, on a converged node, every file an offline converge of nodes like it needs (run as root, node python3).

Usage: python3 -I collect.py REQUEST.json OUT.tar > RESULT.json

REQUEST: {"have": {relpath: sha256} the bundle holds already, "prefix": the env prefix, "skip_sha256": [sha256 of
files the bundle carries otherwise (the wheelhouse)], "horovod": version, "resolver": this node's name}.

- apt/: every package installed on this converged node (the image's and what the roles installed, with the
  dependencies this node's apt resolved for them), at its installed version, downloaded by this node's apt from its
  own sources; and a flat `Packages` index of them.
- pypi/: the env's lock (written by hvd_pyenv), every distribution by its sha256; and Horovod's sdist.
Only what the bundle lacks (by sha256) is downloaded; OUT.tar holds those files (and `Packages`). RESULT lists every
file the bundle needs, with its sha256, size and why.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile

def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def run(argv: list[str], **kwargs) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:3])} ...: rc {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return proc.stdout


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
    proc = subprocess.run(["apt-cache", "show", *wanted], capture_output=True, text=True)
    for stanza in proc.stdout.split("\n\n"):
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


def main(request_file: str, out_tar: str) -> None:
    request = json.load(open(request_file, encoding="utf-8"))
    have, work = request["have"], os.path.dirname(os.path.abspath(out_tar))
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
    os.makedirs(apt_dir, exist_ok=True)
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
    if fetch:
        run(["apt-get", "download", "-o", "APT::Sandbox::User=root", *[f"{n}={v}" for n, v, _, _ in fetch]],
            cwd=apt_dir)
    for name, _version, base, sha in fetch:
        path = os.path.join(apt_dir, base)
        if not os.path.isfile(path):  # apt-get names a download by its epoch-escaped version: find it by package
            candidates = [f for f in os.listdir(apt_dir) if f.startswith(name + "_") and f.endswith(".deb")]
            if len(candidates) == 1:
                os.rename(os.path.join(apt_dir, candidates[0]), path)
        if sha256_of(path) != sha:
            raise SystemExit(f"apt-get download {name}: sha256 differs from this node's index")
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
            raise SystemExit(f"pip download {name}=={version}: no file with the locked sha256 {sha}")
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
    json.dump({"files": files, "new": sorted(set(new)), "keys": keys, "unavailable": unavailable,
               "manual": sorted(manual)}, sys.stdout)


if __name__ == "__main__":
    main(*sys.argv[1:3])
