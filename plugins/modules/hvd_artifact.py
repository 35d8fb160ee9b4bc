#!/usr/bin/python
"""Ansible module: an artifact (a packed env, a wheel) checked by its sha256, and published atomically.

``state: verified`` judges a file against its sha256 (given, or read from ``<path>.sha256`` beside it): a file
that does not match is removed, with its ``.sha256``, and reported (``valid: false`` and the reason), so the
caller builds or fetches it again. A missing file is simply not valid. A file whose ``.sha256`` is missing is
not trusted either.

With ``pattern``, ``path`` is a cache entry's folder and the artifact the file in it whose name matches (the first
in name order): one module run finds and judges it (a missing folder or no match: not valid, nothing removed).

``state: published`` takes a file written under a temporary name (``src``), checks it against ``sha256`` (the
digest its builder computed), writes ``<path>.sha256`` and then renames ``src`` to ``path``: readers see the
whole, verified file or nothing, never a half-written one.

``state: copied`` copies ``src`` (a file another user could change, such as the login user's copy of a wheel)
to ``path`` in a folder of root's own, hashing exactly the bytes it writes: ``path`` exists only when they are
``sha256``. Root then uses ``path``, never ``src`` again. With ``workdir``, that folder is hvdcluster's private work
folder of that name, made (or vetted) and emptied in the same module run (hvd_workdir's rules), and ``path`` the
file's name in it.

``state: held`` is a node's own copy in the login user's artifact folder (the folder made 0700 where missing): held
when it is a plain file of the controller copy's ``size`` and, where ``sha256`` is given (the node is about to use
it), of that digest (one that does not match is removed); the folder's other files that match ``prune`` (older
copies) are removed. One module run for what was a folder, a look, a check and a clean-up.

``state: listed`` judges a folder against a list (``files``: relative path -> sha256): it must hold exactly these
regular files, each with its sha256 - else it fails naming each file that is missing, changed, not listed, or a
symlink (none is followed). One module run reads every file once: what an offline bundle offers a build is checked
on the node that uses it, against the manifest's sha256.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: hvd_artifact
short_description: Verify an artifact by sha256, or publish one atomically with its .sha256 beside it
description:
  - Judges a file against its sha256 (removing one that does not match), publishes a file under its final name
    only once its sha256 is checked, copies one hashing exactly the bytes it writes, or judges a folder against a
    list of files and their sha256.
options:
  path: {description: "The artifact (listed: the folder).", type: path, required: true}
  state: {description: "verified, published, copied, held or listed.", type: str,
          choices: [verified, published, copied, held, listed], default: verified}
  pattern: {description: "verified: I(path) is a folder; judge the file in it whose name matches (the first in name
             order).", type: str}
  size: {description: "held: the size of the controller's copy (-1: unknown, so nothing is held).", type: int,
         default: -1}
  prune: {description: "held: patterns of the folder's other files to remove (older copies).", type: list,
          elements: str, default: []}
  files: {description: "listed: every file the folder must hold, relative path -> sha256 (nothing else).",
          type: dict}
  sha256: {description: "Expected digest. verified: default the content of <path>.sha256.", type: str}
  src: {description: "published: the temporary file to check and rename to I(path). copied: the file to copy.",
        type: path}
  workdir: {description: "copied: copy into hvdcluster's private work folder of this name (root-owned 0700 under
             /var/lib/hvdcluster, made or vetted, and emptied first, as hvd_workdir with clean makes it); I(path) is
             then the file's name in it.", type: str}
  workdir_root: {description: "copied: the folder I(workdir) is made in (tests only).", type: path,
                 default: /var/lib/hvdcluster}
  remove_invalid: {description: "verified: remove a file that does not match.", type: bool, default: true}
  fail_invalid: {description: "verified: fail (naming the file) instead of reporting valid=false.", type: bool,
                 default: false}
author: hvdcluster developers (@hvdcluster)
"""

EXAMPLES = r"""
- name: Verify the cached artifact (a corrupt or truncated one is removed and built again)
  hvd.cluster.hvd_artifact:
    path: ~/.cache/hvdcluster/envs/env-3f2a9c.tar.zst
    state: verified
  delegate_to: localhost
  run_once: true
  become: false
  register: cached

- name: Check a downloaded sdist against its pinned sha256, failing on a mismatch
  hvd.cluster.hvd_artifact:
    path: /var/lib/hvdcluster/horovod/horovod-0.28.1.tar.gz
    sha256: "{{ horovod_sdist_sha256 }}"
    fail_invalid: true

- name: Publish the packed env under its final name once its sha256 is checked
  hvd.cluster.hvd_artifact:
    state: published
    src: ~/.cache/hvdcluster/envs/env-3f2a9c.tar.zst.part-{{ run_id }}
    path: ~/.cache/hvdcluster/envs/env-3f2a9c.tar.zst
    sha256: "{{ packed.stat.checksum }}"
  delegate_to: localhost
  become: false

- name: Copy the login user's wheel into root's own folder, hashing exactly the bytes copied
  hvd.cluster.hvd_artifact:
    state: copied
    src: /home/hvd/.cache/hvdcluster/artifacts/horovod-0.28.1-cp311-cp311-linux_x86_64.whl
    path: /var/lib/hvdcluster/horovod/horovod-0.28.1-cp311-cp311-linux_x86_64.whl
    sha256: "{{ wheel_sha256 }}"

- name: The same into a private work folder made clean in the same module run (/var/lib/hvdcluster/horovod-install)
  hvd.cluster.hvd_artifact:
    state: copied
    src: /home/hvd/.cache/hvdcluster/artifacts/horovod-0.28.1-cp311-cp311-linux_x86_64.whl
    workdir: horovod-install
    path: horovod-0.28.1-cp311-cp311-linux_x86_64.whl
    sha256: "{{ wheel_sha256 }}"
  register: copied  # copied.path: the copy's absolute path

- name: Look for the node's own copy by name and size, check it before use, remove older copies
  hvd.cluster.hvd_artifact:
    state: held
    path: ~/.cache/hvdcluster/artifacts/horovod-0.28.1-cp311-cp311-linux_x86_64.whl
    size: 1158837
    sha256: "{{ wheel_sha256 }}"
    prune: ["horovod-*.whl"]
  become: false
  register: held

- name: Check that the work folder holds exactly the offered files, each with its sha256
  hvd.cluster.hvd_artifact:
    state: listed
    path: /var/lib/hvdcluster/pyenv
    files:
      wheels/six-1.16.0-py2.py3-none-any.whl: "{{ six_sha256 }}"
"""

RETURN = r"""
valid: {description: The file exists and matches., type: bool, returned: state=verified}
sha256: {description: The file's digest (when it exists)., type: str, returned: when the file exists}
size: {description: "verified: the valid file's size in bytes (hvd_fanout sizes its copies by it).", type: int,
       returned: state=verified and valid}
reason: {description: Why the file is not valid., type: str, returned: when not valid}
removed: {description: "A file that did not match was removed (with its .sha256).", type: bool, returned: state=verified}
path: {description: The artifact's path., type: str, returned: "state=verified, copied or held"}
holds: {description: "held: the node holds a copy of that size (and digest, where given).", type: bool,
        returned: state=held}
pruned: {description: "held: the older copies removed.", type: list, returned: state=held}
problems: {description: "listed: each file missing, changed, not listed or no plain file.", type: list,
           returned: state=listed and failed}
"""

import fnmatch
import hashlib
import os
import re
import stat

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import (
    copy_verified, make_folders, replace_file, sha256_of, walk_tree)
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_workdir import ROOT, workdir
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_module import AnsibleModule

HEX = re.compile(r"[0-9a-f]{64}")


def recorded(path: str) -> str | None:
    """The digest recorded in ``<path>.sha256`` (``sha256sum`` format: the digest first), or None."""
    try:
        with open(path + ".sha256", encoding="ascii") as handle:
            word = (handle.read().split() or [""])[0].lower()
    except (OSError, UnicodeDecodeError):
        return None
    return word if HEX.fullmatch(word) else None


def verify(path: str, expected: str | None) -> dict:
    """{'valid': bool, 'sha256': str|None, 'reason': str|None} for ``path`` against ``expected``
    (None: what ``<path>.sha256`` records)."""
    if not os.path.isfile(path):
        return {"valid": False, "sha256": None, "reason": f"{path} is missing"}
    want = (expected or "").lower() or recorded(path)
    found = sha256_of(path)
    if want is None:
        return {"valid": False, "sha256": found, "reason": f"{path} has no valid {os.path.basename(path)}.sha256 beside it"}
    if found != want:
        return {"valid": False, "sha256": found,
                "reason": f"{path} is corrupt or truncated: sha256 {found}, expected {want}"}
    return {"valid": True, "sha256": found, "reason": None, "size": os.path.getsize(path)}


def publish(src: str, path: str, sha256: str) -> None:
    """Check ``src`` against ``sha256``, then ``<path>.sha256`` and ``path`` by rename. A bad ``src`` is removed."""
    sha256 = sha256.lower()
    if not HEX.fullmatch(sha256):
        raise ValueError(f"sha256 {sha256!r} is not a sha256 digest")
    found = sha256_of(src)
    if found != sha256:
        os.unlink(src)
        raise ValueError(f"{src} arrived corrupt or truncated: sha256 {found}, the builder computed {sha256}")
    replace_file(path + ".sha256", f"{sha256}  {os.path.basename(path)}\n", suffix=".sha256")
    os.replace(src, path)


def _sha256_no_link(path: str) -> str:
    """The sha256 of the plain file at ``path``, opened without following a link (O_NOFOLLOW)."""
    digest = hashlib.sha256()
    with open(os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)), "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def listed(folder: str, files: dict) -> list[str]:
    """What keeps ``folder`` from holding exactly ``files`` ({relative path: sha256}), one line each: a listed file
    missing, of another sha256 or no plain file; a file not listed; a symlink anywhere (never followed). [] when it
    holds exactly them. Every file is read once."""
    problems = []
    want = {}
    for rel, sha in files.items():
        sha = str(sha).lower()
        if os.path.isabs(rel) or os.path.normpath(rel) != rel or rel.split(os.sep)[0] == "..":
            problems.append(f"{rel!r}: not a plain relative path below {folder}")
        elif not HEX.fullmatch(sha):
            problems.append(f"{rel}: {sha!r} is not a sha256 digest")
        else:
            want[rel] = sha
    found, named = set(), set()
    for rel, info in walk_tree(folder):
        path = os.path.join(folder, rel)
        if stat.S_ISLNK(info.st_mode):
            problems.append(f"{path}: a symlink (not followed)")
        elif not stat.S_ISREG(info.st_mode):
            problems.append(f"{path}: not a plain file")
        elif rel not in want:
            problems.append(f"{path}: not listed")
        else:
            found.add(rel)
            continue
        named.add(rel)
    for rel, sha in sorted(want.items()):
        path = os.path.join(folder, rel)
        if rel not in found:
            if rel not in named:
                problems.append(f"{path}: " + ("not a plain file" if os.path.lexists(path) else "missing"))
            continue
        try:
            digest = _sha256_no_link(path)
        except OSError as exc:
            problems.append(f"{path}: unreadable: {exc.strerror or exc}")
            continue
        if digest != sha:
            problems.append(f"{path}: sha256 {digest}, expected {sha}")
    return problems


def found_in(folder: str, pattern: str) -> str:
    """The first file (in name order) of ``folder`` whose name matches ``pattern``; else the pattern's path there
    (which verify() then finds missing)."""
    try:
        names = sorted(entry.name for entry in os.scandir(folder)
                       if entry.is_file(follow_symlinks=False) and fnmatch.fnmatchcase(entry.name, pattern))
    except (FileNotFoundError, NotADirectoryError):
        names = []
    return os.path.join(folder, names[0] if names else pattern)


def held(path: str, size: int, sha256: str | None, prune: list[str], check_mode: bool) -> dict:
    """The node's own copy at ``path`` (see ``state: held``): {'holds', 'changed', 'pruned', 'reason', ...}."""
    folder = os.path.dirname(path)
    changed = False
    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        changed = True
        if not check_mode:
            make_folders(folder, 0o700)  # its missing parents 0700 too, as the file module made them
        info = None
    if info is not None:
        if not stat.S_ISDIR(info.st_mode):
            raise ValueError(f"{folder}: not a folder of its own (a symlink or a file)")
        if stat.S_IMODE(info.st_mode) != 0o700:
            changed = True
            if not check_mode:
                os.chmod(folder, 0o700)
    pruned = []
    if info is not None:
        name = os.path.basename(path)
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            if (entry.name != name and entry.is_file(follow_symlinks=False)
                    and any(fnmatch.fnmatchcase(entry.name, pattern) for pattern in prune)):
                pruned.append(entry.path)
                if not check_mode:
                    os.unlink(entry.path)
    changed = changed or bool(pruned)
    try:
        mine = os.lstat(path)
    except FileNotFoundError:
        mine = None
    out = {"holds": False, "changed": changed, "pruned": pruned, "path": path, "removed": False, "reason": None}
    if mine is None or not stat.S_ISREG(mine.st_mode) or size < 0 or mine.st_size != size:
        out["reason"] = f"{path}: no copy of {size} bytes"
        return out
    if sha256:
        result = verify(path, sha256)
        if not result["valid"]:
            out.update(reason=result["reason"], removed=True, changed=True)
            if not check_mode:
                remove(path)
            return out
    out["holds"] = True
    return out


def remove(path: str) -> None:
    for victim in (path, path + ".sha256"):
        if os.path.lexists(victim):
            os.unlink(victim)


ARGUMENT_SPEC = {
    "path": {"type": "path", "required": True},
    "state": {"type": "str", "choices": ["verified", "published", "copied", "held", "listed"], "default": "verified"},
    "pattern": {"type": "str"},
    "size": {"type": "int", "default": -1},
    "prune": {"type": "list", "elements": "str", "default": []},
    "files": {"type": "dict"},
    "sha256": {"type": "str"},
    "src": {"type": "path"},
    "workdir": {"type": "str"},
    "workdir_root": {"type": "path", "default": ROOT},
    "remove_invalid": {"type": "bool", "default": True},
    "fail_invalid": {"type": "bool", "default": False},
}
REQUIRED_IF = [("state", "published", ("src", "sha256")), ("state", "copied", ("src", "sha256")),
               ("state", "listed", ("files",))]
# What AnsibleModule checks beside ARGUMENT_SPEC (the controller checks the same for a light run).
ARGUMENT_CHECKS = {"required_if": REQUIRED_IF}


def verified(p: dict, check_mode: bool) -> dict:
    """``state: verified``'s result (``failed`` and ``msg`` set where ``fail_invalid`` fails it): the module's, and
    the action plugin's where the task runs on the controller itself (plugins/action/hvd_artifact.py)."""
    path = found_in(p["path"], p["pattern"]) if p.get("pattern") else p["path"]
    result = verify(path, p.get("sha256"))
    removed = not result["valid"] and result["sha256"] is not None and p["remove_invalid"]
    if removed and not check_mode:
        remove(path)
    out = dict(changed=removed, removed=removed, path=path, **result)
    if not result["valid"] and p["fail_invalid"]:
        out = dict(failed=True, msg=result["reason"], changed=removed, removed=removed,
                   **{k: v for k, v in result.items() if k != "reason"})
    return out


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True, **ARGUMENT_CHECKS)
    p = module.params
    try:
        if p["state"] == "published":
            if module.check_mode:
                module.exit_json(changed=True)
            publish(p["src"], p["path"], p["sha256"])
            module.exit_json(changed=True, sha256=p["sha256"].lower())
        if p["state"] == "copied":
            if p["workdir"] is not None:
                if os.path.basename(p["path"]) != p["path"] or p["path"] in ("", ".", ".."):
                    raise ValueError(f"path {p['path']!r}: with workdir, the file's name only")
                folder, _made = workdir(p["workdir_root"], p["workdir"], clean=True, check_mode=module.check_mode)
                p["path"] = os.path.join(folder, p["path"])
            if module.check_mode:
                module.exit_json(changed=True, path=p["path"])
            copy_verified(p["src"], p["path"], p["sha256"])
            module.exit_json(changed=True, sha256=p["sha256"].lower(), path=p["path"])
        if p["state"] == "held":
            out = held(p["path"], p["size"], p["sha256"], p["prune"], module.check_mode)
            module.exit_json(**out)
        if p["state"] == "listed":  # read-only: check mode judges the folder too
            problems = listed(p["path"], p["files"])
            if problems:
                more = f" (and {len(problems) - 10} more)" if len(problems) > 10 else ""
                module.fail_json(msg=f"{p['path']}: not exactly the listed files, each with its sha256: "
                                     + "; ".join(problems[:10]) + more, problems=problems)
            module.exit_json(changed=False, path=p["path"])
        out = verified(p, module.check_mode)
    except (ValueError, OSError) as exc:
        module.fail_json(msg=str(exc))
    if out.get("failed"):
        module.fail_json(**{k: v for k, v in out.items() if k != "failed"})
    module.exit_json(**out)


if __name__ == "__main__":
    main()
