#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Write a role's small managed files in one module run: whole files, marked blocks, single lines, folders, removals."""

from __future__ import annotations

DOCUMENTATION = r"""
module: hvd_write
short_description: Put a role's small managed files in place in one module run
description:
  - Each entry of O(files) is one path in one state, done in the order given. One run of this module replaces a
    C(copy), C(template), C(file), C(blockinfile) or C(lineinfile) task per path, each of which costs a module run
    (C(copy) and C(template) two when nothing changes) on every node of every converge.
  - V(file) writes the whole file from O(files[].content). V(block) keeps one marked block in a file, as
    C(ansible.builtin.blockinfile) does with its default markers and place (the same bytes, so a file it wrote is in
    place for this module). The last pair of marker lines is replaced, else the block goes at the end; an empty
    block takes the markers out. V(line) keeps one line, as C(ansible.builtin.lineinfile) does with O(files[].regexp).
    The last line the expression matches is replaced, else the line goes at the end unless it is there already.
    V(directory) makes a folder (and its missing parents, 0755 whatever the umask), V(absent) removes a file (never
    a folder).
  - Files are written through a temporary file beside them and renamed into place; with O(files[].unsafe_writes) a
    file that cannot be replaced (a bind mount, such as a container's /etc/hosts) is rewritten in place.
  - Supports check mode (nothing written, what would change reported) and diff mode.
options:
  files:
    description: The paths to keep, in order.
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description: The path. A leading C(~user/) is that user's home folder.
        type: path
        required: true
      state:
        description: What the path is to be.
        type: str
        choices: [file, block, line, directory, absent]
        default: file
      content:
        description: The whole file (O(files[].state=file)).
        type: str
      block:
        description: The block between the markers (O(files[].state=block)); empty takes the block out.
        type: str
      marker:
        description: The marker line, C({mark}) replaced by BEGIN and END (O(files[].state=block)).
        type: str
      line:
        description: The line (O(files[].state=line)).
        type: str
      regexp:
        description: The lines it replaces (O(files[].state=line)).
        type: str
      mode:
        description: Octal permissions, such as V(0644) or V(01777). Unset, an existing path keeps its own and a new
          file gets 0644, a new folder 0755.
        type: str
      owner:
        description: Owner's name. Unset, an existing path keeps its own and a new one is the module user's.
        type: str
      group:
        description: Group's name. Unset, an existing path keeps its own and a new one is the module user's.
        type: str
      unsafe_writes:
        description: Rewrite the file in place where it cannot be replaced.
        type: bool
        default: false
      parents:
        description: Make the missing folders above a file (0755 whatever the umask, owned by the module user), as
          a local fact's C(/etc/ansible/facts.d); without it a missing folder fails the entry.
        type: bool
        default: false
      manage:
        description: V(false) leaves the entry out (the path as it is).
        type: bool
        default: true
author: hvdcluster developers (@hvdcluster)
"""

EXAMPLES = r"""
- name: Keep the node's managed files
  hvd.cluster.hvd_write:
    files:
      - path: /etc/hosts
        state: block
        marker: "# {mark} hvdcluster lab nodes"
        block: |
          10.0.0.1 gpu01
          10.0.0.2 gpu02
        unsafe_writes: true
      - path: /etc/apt/apt.conf.d/01proxy
        state: absent
      - path: /run/hvdcluster
        state: directory
        owner: hvd
        mode: "0700"
      - path: ~hvd/.ssh/authorized_keys
        state: line
        regexp: " hvdcluster@lab$"
        line: ssh-ed25519 AAAA... hvdcluster@lab
        owner: hvd
        mode: "0600"
  register: written
  notify: Update the CA trust store
"""

RETURN = r"""
updated:
  description: The paths that changed (or would, in check mode), in the order given.
  type: list
  elements: str
  returned: success
"""

import errno
import hashlib
import grp
import os
import pwd
import re
import stat
import tempfile

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import make_folders
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_module import AnsibleModule

DEFAULT_MODE = {"file": 0o644, "directory": 0o755}


class WriteError(Exception):
    """A path that cannot be put in the state asked: the message names it."""


def parse_mode(path: str, mode: str | None) -> int | None:
    if mode is None:
        return None
    if not re.fullmatch(r"0?[0-7]{3,4}", str(mode)):
        raise WriteError(f"{path}: mode {mode!r} is not octal (such as 0644)")
    return int(str(mode), 8)


def ids(path: str, owner: str | None, group: str | None) -> tuple[int, int]:
    try:
        uid = pwd.getpwnam(owner).pw_uid if owner else -1
    except KeyError:
        raise WriteError(f"{path}: no user {owner!r} on this node") from None
    try:
        gid = grp.getgrnam(group).gr_gid if group else -1
    except KeyError:
        raise WriteError(f"{path}: no group {group!r} on this node") from None
    return uid, gid


def expand(path: str) -> str:
    """``path`` as the argument spec expanded it (type path): a ``~user`` it could not is no user here."""
    full = path
    if full.startswith("~"):
        raise WriteError(f"{path}: no such user on this node")
    if not os.path.isabs(full):
        raise WriteError(f"{path}: not an absolute path")
    return full


def read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise WriteError(f"{path}: a folder, where a file is kept") from None


def with_block(original: bytes | None, marker: str, block: str) -> bytes:
    """``original`` with its marked block replaced, added or (an empty block) taken out: blockinfile's bytes."""
    lines = (original or b"").splitlines(True)
    begin = marker.replace("{mark}", "BEGIN").encode() + b"\n"
    end = marker.replace("{mark}", "END").encode() + b"\n"
    body = block.encode()
    if body and not body.endswith(b"\n"):
        body += b"\n"
    new = [begin, *body.splitlines(True), end] if body else []
    first = last = None
    for n, line in enumerate(lines):
        if line == begin:
            first = n
        if line == end:
            last = n
    if first is None or last is None:
        at = len(lines)
    else:
        at, stop = min(first, last), max(first, last)
        lines[at:stop + 1] = []
    if at > 0 and not lines[at - 1].endswith(b"\n"):
        lines[at - 1] += b"\n"
    lines[at:at] = new
    return b"".join(lines)


def with_line(original: bytes | None, regexp: str, line: str) -> bytes:
    """``original`` with the last line ``regexp`` matches replaced by ``line``, else ``line`` added at the end unless
    it is there already: lineinfile's bytes."""
    lines = (original or b"").splitlines(True)
    want = line.encode()
    pattern = re.compile(regexp.encode())
    at = None
    for n, current in enumerate(lines):
        if pattern.search(current.rstrip(b"\r\n")):
            at = n
    if at is not None:
        lines[at] = want + b"\n"
    elif want not in (current.rstrip(b"\r\n") for current in lines):
        if lines and not lines[-1].endswith(b"\n"):
            lines[-1] += b"\n"
        lines.append(want + b"\n")
    return b"".join(lines)


def _replace(path: str, data: bytes, mode: int, uid: int, gid: int, unsafe: bool) -> None:
    folder = os.path.dirname(path)
    fd, temp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".hvd-write", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            os.fchown(handle.fileno(), uid, gid)
            os.fchmod(handle.fileno(), mode)
        try:
            os.replace(temp, path)
            return
        except OSError as error:
            if not unsafe or error.errno not in (errno.EBUSY, errno.EXDEV):
                raise
        with open(path, "r+b") as handle:  # bind-mounted: rewritten in place (unsafe_writes)
            handle.write(data)
            handle.truncate()
    finally:
        if os.path.exists(temp):
            os.unlink(temp)


def _attrs_differ(info: os.stat_result, mode: int | None, uid: int, gid: int) -> bool:
    return ((mode is not None and stat.S_IMODE(info.st_mode) != mode) or (uid != -1 and info.st_uid != uid)
            or (gid != -1 and info.st_gid != gid))


def _describe(info: os.stat_result | None) -> str:
    if info is None:
        return "absent\n"
    kind = "directory" if stat.S_ISDIR(info.st_mode) else "file"
    return f"{kind}, mode {stat.S_IMODE(info.st_mode):04o}, uid {info.st_uid}, gid {info.st_gid}\n"


def keep(entry: dict, check: bool) -> dict | None:
    """Put one entry's path in its state; returns its diff where it changed (or would), else None."""
    path = expand(entry["path"])
    state = entry["state"]
    mode = parse_mode(path, entry.get("mode"))
    uid, gid = ids(path, entry.get("owner"), entry.get("group"))
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    if state == "absent":
        if info is None:
            return None
        if stat.S_ISDIR(info.st_mode):
            raise WriteError(f"{path}: a folder; only files are removed")
        if not check:
            os.unlink(path)
        return {"before_header": path, "after_header": path, "before": _describe(info), "after": "absent\n"}
    if state == "directory":
        if info is not None and not stat.S_ISDIR(info.st_mode):
            raise WriteError(f"{path}: not a folder")
        if info is not None and not _attrs_differ(info, mode, uid, gid):
            return None
        if not check:
            if info is None:
                make_folders(path)  # missing parents too, as the file module makes them
            os.chown(path, uid, gid)
            os.chmod(path, DEFAULT_MODE["directory"] if mode is None and info is None else
                     (mode if mode is not None else stat.S_IMODE(info.st_mode)))
        after = f"directory, mode {(mode if mode is not None else DEFAULT_MODE['directory']):04o}\n"
        return {"before_header": path, "after_header": path, "before": _describe(info), "after": after}
    # file, block, line: the bytes the file is to hold
    if state in ("block", "line"):
        path = os.path.realpath(path)  # as blockinfile and lineinfile: the file a link points at
        try:
            info = os.stat(path)
        except FileNotFoundError:
            info = None
    elif info is not None and stat.S_ISLNK(info.st_mode):
        info = None  # a link where the file is kept is replaced by the file
    original = read(path) if info is not None else None
    if state == "file":
        if entry.get("content") is None:
            raise WriteError(f"{path}: state file needs content")
        data = entry["content"].encode()
    elif state == "block":
        if entry.get("marker") is None or entry.get("block") is None:
            raise WriteError(f"{path}: state block needs marker and block")
        if original is None and not entry["block"]:
            return None  # no block wanted in a file that is not there: as blockinfile's absent, nothing is made
        data = with_block(original, entry["marker"], entry["block"])
    else:
        if entry.get("line") is None or entry.get("regexp") is None:
            raise WriteError(f"{path}: state line needs line and regexp")
        data = with_line(original, entry["regexp"], entry["line"])
    content_changed = original != data
    attrs_changed = info is not None and _attrs_differ(info, mode, uid, gid)
    if not content_changed and not attrs_changed:
        return None
    if not check:
        if entry["parents"]:
            make_folders(os.path.dirname(path))
        if not os.path.isdir(os.path.dirname(path)):
            raise WriteError(f"{path}: its folder is missing")
        if content_changed:
            keep_mode = mode if mode is not None else (stat.S_IMODE(info.st_mode) if info else DEFAULT_MODE["file"])
            _replace(path, data, keep_mode, uid if uid != -1 else (info.st_uid if info else -1),
                     gid if gid != -1 else (info.st_gid if info else -1), entry["unsafe_writes"])
        else:
            os.chown(path, uid, gid)
            if mode is not None:
                os.chmod(path, mode)
    if content_changed:
        before = (original or b"").decode(errors="replace")
        return {"before_header": path, "after_header": path, "before": before, "after": data.decode(errors="replace")}
    return {"before_header": f"{path} (attributes)", "after_header": f"{path} (attributes)", "before": _describe(info),
            "after": f"mode {mode:04o}\n" if mode is not None else f"uid {uid}, gid {gid}\n"}


def invocation(files: list[dict]) -> dict:
    """The arguments as the result echoes them (Ansible's ``invocation``): each content or block by its size and
    sha256, not its text. A CA bundle or a key list would otherwise come back from every node into every run's events
    and logs (a 200 KB bundle: 200 KB a node, each converge), for nothing the log reader needs."""
    out = []
    for item in files:
        shown = dict(item)
        for key in ("content", "block"):
            if isinstance(shown.get(key), str):
                data = shown[key].encode()
                shown[key] = f"({len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()})"
        out.append(shown)
    return {"module_args": {"files": out}}


_ENTRY = {
    "path": {"type": "path", "required": True},
    "state": {"type": "str", "default": "file", "choices": ["file", "block", "line", "directory", "absent"]},
    "content": {"type": "str"},
    "block": {"type": "str"},
    "marker": {"type": "str"},
    "line": {"type": "str"},
    "regexp": {"type": "str"},
    "mode": {"type": "str"},
    "owner": {"type": "str"},
    "group": {"type": "str"},
    "unsafe_writes": {"type": "bool", "default": False},
    "parents": {"type": "bool", "default": False},
    "manage": {"type": "bool", "default": True},
}
ARGUMENT_SPEC = {"files": {"type": "list", "elements": "dict", "required": True, "options": _ENTRY}}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    updated, diffs = [], []
    echoed = invocation(module.params["files"])
    for item in module.params["files"]:
        if not item["manage"]:
            continue
        try:
            diff = keep(item, module.check_mode)
        except WriteError as error:
            module.fail_json(msg=f"hvd_write: {error}", updated=updated, invocation=echoed)
        except OSError as error:
            module.fail_json(msg=f"hvd_write: {item['path']}: {error.strerror or error}", updated=updated,
                             invocation=echoed)
        if diff is not None:
            updated.append(item["path"])
            diffs.append(diff)
    result = {"changed": bool(updated), "updated": updated, "invocation": echoed}
    if module._diff:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
