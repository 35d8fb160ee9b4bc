#!/usr/bin/python
"""Ansible module: a folder tree hvdcluster owns (the Python env), replaced atomically and deleted only if ours.

``state: unpacked`` installs an archive at ``path`` so that an interruption at any moment leaves either the old
tree or the new one, never half of one that claims to be complete: the archive's sha256 is checked, it is
unpacked into a fresh sibling folder, checked (``check_argv``), given the ownership marker and then, last, the
completion ``marker``; only then is it renamed into place, the old tree kept until that rename and removed
after it. A tree whose ``marker`` already holds ``marker_content`` is left alone.

Before the markers, the new tree's manifest (``.hvd-manifest``: every file's size, modification time and sha256)
is written, so ``state: verified`` can tell later, read-only, whether the tree is still what was installed: a
file missing, or changed in size or time (``deep``: in content) is named; files added later are named only with
``exact`` (Horovod is installed into the env after it). Python's byte caches (``__pycache__``) count like any
file: a planted one is loaded (plugins/module_utils/hvd_files.walk_tree).

``state: manifested`` records the manifest of a tree built in place (the env's builder), before its marker.

``state: absent`` removes ``path`` only when it carries one of our markers; ``state: owned`` makes an empty
``path`` with the ownership marker (a build in place starts from it). A ``path`` that exists without our markers
is refused, never deleted: ``/usr`` or a user's folder typed as a prefix must not be wiped.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: hvd_tree
short_description: Install an archive as a folder tree atomically, or remove/create a tree only if it is ours
description:
  - Installs an archive as a folder tree atomically (unpacked beside it, then renamed), verifies a tree against its
    manifest, or removes or creates a tree only when it is hvdcluster's.
options:
  path: {description: The tree (absolute)., type: path, required: true}
  state:
    description: unpacked, owned, absent, verified (read-only) or manifested (record the manifest of a tree built in place).
    type: str
    choices: [unpacked, owned, absent, verified, manifested]
    default: unpacked
  deep: {description: "verified: compare every file's sha256 too, not only size and time.", type: bool, default: false}
  exact: {description: "verified: files the manifest does not list count as differences too.", type: bool, default: false}
  force: {description: "unpacked: install even when the marker already holds marker_content (a damaged tree).", type: bool,
          default: false}
  src: {description: "unpacked: the archive on the node (.tar, .tar.gz, .tar.zst).", type: path}
  sha256: {description: "unpacked: the archive's expected sha256.", type: str}
  marker: {description: "Completion marker file inside the tree, written last.", type: str, default: .hvd-complete}
  marker_content: {description: "unpacked: the marker's content (the artifact key).", type: str, default: ""}
  owner_marker: {description: Marks a tree as made by hvdcluster., type: str, default: .hvdcluster}
  check_argv:
    description: "unpacked: a command that must succeed on the unpacked tree before it goes live; '{root}' in an
      argument is replaced by the new tree's path."
    type: list
    elements: str
    default: []
author: hvdcluster developers (@hvdcluster)
"""

EXAMPLES = r"""
- name: Check its sha256, unpack it beside the prefix, mark it with the build key, then swap it in
  hvd.cluster.hvd_tree:
    path: /opt/hvd/env
    src: /home/hvd/.cache/hvdcluster/artifacts/env-3f2a9c.tar.zst
    sha256: "{{ env_sha256 }}"
    marker: .hvd-env-key
    marker_content: "{{ env_key }}"
    check_argv: ["{root}/bin/python", -I, -c, import encodings]

- name: Remove the old environment (only one hvdcluster made)
  hvd.cluster.hvd_tree:
    path: /opt/hvd/env
    state: absent
    marker: .hvd-env-key

- name: Mark the prefix as ours before anything goes in
  hvd.cluster.hvd_tree:
    path: /opt/hvd/env
    state: owned

- name: Record the manifest of the environment built in place
  hvd.cluster.hvd_tree:
    path: /opt/hvd/env
    state: manifested
    marker: .hvd-env-key

- name: Is the installed environment still what was unpacked (read-only)?
  hvd.cluster.hvd_tree:
    path: /opt/hvd/env
    state: verified
    marker: .hvd-env-key
  check_mode: true
  register: env_tree
"""

RETURN = r"""
previous: {description: "unpacked: the marker content the replaced tree had ('' when none).", type: str,
           returned: "state=unpacked"}
intact: {description: "verified: the tree is complete (marker) and every file is as installed.", type: bool,
         returned: "state=verified"}
differences: {description: "verified: what differs (at most 20), e.g. 'changed: lib/x.py', 'missing: bin/y'.", type: list,
              elements: str, returned: "state=verified"}
"""

import errno
import hashlib
import json
import os
import secrets
import shutil
import stat
import threading

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import (
    MANIFEST, make_folders, manifest_entry_differs, read_manifest, sha256_of, walk_tree)

BLOCK = 1 << 20


def read_marker(path: str, marker: str) -> str:
    try:
        with open(os.path.join(path, marker), encoding="utf-8") as handle:
            return handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return ""


def is_ours(path: str, marker: str, owner_marker: str) -> bool:
    return any(os.path.isfile(os.path.join(path, name)) for name in (owner_marker, marker))


def refuse_foreign(path: str, marker: str, owner_marker: str) -> None:
    """Raise unless ``path`` is missing or a real folder carrying one of our markers."""
    if not os.path.lexists(path):
        return
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise ValueError(f"{path} exists and is not a folder (a symlink or a file): refusing to replace it")
    if not is_ours(path, marker, owner_marker) and os.listdir(path):
        raise ValueError(f"{path} exists and was not made by hvdcluster (no {owner_marker} inside): refusing to "
                         "delete or replace it; choose another prefix or remove it yourself")


def _siblings(path: str, kind: str) -> list[str]:
    parent, base = os.path.split(path)
    lead = f".{base}.hvd-{kind}-"
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    return [os.path.join(parent, name) for name in names if name.startswith(lead)]


def clean_leftovers(path: str) -> None:
    """Remove what an interrupted run left beside ``path`` (our new/old siblings, root-owned only)."""
    for leftover in _siblings(path, "new") + _siblings(path, "old"):
        info = os.lstat(leftover)
        if stat.S_ISDIR(info.st_mode) and not stat.S_ISLNK(info.st_mode) and info.st_uid == os.geteuid():
            shutil.rmtree(leftover)


def write_file(path: str, content: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(content)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(path, 0o644)


def _entry(full: str, info: os.stat_result, content: bool) -> list:
    if stat.S_ISLNK(info.st_mode):
        return ["link", os.readlink(full)]
    return [info.st_size, info.st_mtime_ns, sha256_of(full) if content else ""]


def write_manifest(root: str, skip: set[str]) -> None:
    """Record every file of ``root`` (size, mtime, sha256; links by target) in ``root/.hvd-manifest``."""
    entries = {rel: _entry(os.path.join(root, rel), info, True) for rel, info in walk_tree(root, skip | {MANIFEST})}
    write_file(os.path.join(root, MANIFEST), json.dumps(entries, sort_keys=True, separators=(",", ":")) + "\n")


def verify(root: str, skip: set[str], deep: bool = False, exact: bool = False, most: int = 20) -> list[str]:
    """What differs between ``root`` and its manifest: missing or changed files (``deep``: by content), and with
    ``exact`` files it does not list. Each file is judged as hvd_node_state judges it (plugins/module_utils/hvd_files)."""
    recorded = read_manifest(root)
    if recorded is None:
        return [f"no manifest: {root} was not installed by this version of hvdcluster"]
    found = dict(walk_tree(root, skip | {MANIFEST}))
    differences = [f"missing: {rel}" for rel in sorted(set(recorded) - set(found))]
    if exact:
        differences += [f"added: {rel}" for rel in sorted(set(found) - set(recorded))]
    for rel in sorted(set(recorded) & set(found)):
        if manifest_entry_differs(os.path.join(root, rel), recorded[rel], deep, found[rel]):
            differences.append(f"changed: {rel}")
        if len(differences) > most:
            break
    return differences[:most]


def _extract(src: str, new: str, sha256: str, run_command, between=None) -> None:
    """Extract ``src`` into ``new`` from one open file, hashing exactly the bytes tar reads: the archive is checked
    as it is used, so swapping or rewriting ``src`` (the login user's copy) after a check cannot change what is
    installed. A digest that differs raises before anything goes live (``src`` is removed); ``between`` (tests
    only) runs after each block.

    ``run_command`` is AnsibleModule.run_command. tar reads the archive from a pipe it inherits (``pass_fds``) while
    a thread of this process reads ``src`` once, hashing each block as it writes it into that pipe: the streaming
    that tar's stdin gave, with run_command reading tar's output meanwhile."""
    flags = ["--zstd"] if src.endswith(".zst") else []
    digest = hashlib.sha256()
    failed: list[BaseException] = []
    with open(src, "rb") as source:
        read_end, write_end = os.pipe()
        open_ends = {read_end, write_end}

        def feed() -> None:
            try:
                with open(write_end, "wb") as pipe:
                    for block in iter(lambda: source.read(BLOCK), b""):
                        digest.update(block)
                        pipe.write(block)
                        if between is not None:
                            between()
            except BrokenPipeError:
                digest.update(source.read())  # tar stopped early: finish the digest to say why
            except BaseException as exc:  # raised again below, in the caller's thread
                failed.append(exc)

        writer = threading.Thread(target=feed, name="hvd_tree-feed", daemon=True)

        def started(proc) -> None:
            # tar holds the read end now: once it exits, writing fails instead of waiting for a reader forever.
            open_ends.discard(read_end)
            os.close(read_end)
            writer.start()  # a thread only once tar is forked
            open_ends.discard(write_end)  # the writer closes its end

        try:
            # --read-full-records: what tar does by itself for an archive on stdin (a pipe returns short reads).
            # --no-same-owner: every file root's, whatever owners the archive names.
            code, dummy, message = run_command(
                ["tar", "-C", new, *flags, "--read-full-records", "--no-same-owner", "-xf", f"/dev/fd/{read_end}"],
                pass_fds=[read_end], before_communicate_callback=started, expand_user_and_vars=False,
                encoding=None, handle_exceptions=False)
        finally:
            for end in open_ends:  # tar never started: nothing was read or written
                os.close(end)
        writer.join()  # tar has exited: the writer is done, or stops at its next write (the pipe is broken)
    if failed:
        raise failed[0]
    if digest.hexdigest() != sha256.lower():
        os.unlink(src)
        raise ValueError(f"{src} is corrupt or truncated: sha256 {digest.hexdigest()}, expected {sha256.lower()} "
                         "(removed)")
    if code != 0:
        raise ValueError(f"unpacking {src} failed: {message.decode(errors='replace').strip()[-500:]}")


SPECIAL_BITS = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX


def drop_special_bits(root: str) -> None:
    """No setuid, setgid or sticky bit anywhere in ``root`` (an env has no use for one: a bit an archive carried would
    hand root to whoever runs that file), links left as they are."""
    for folder, folders, files in os.walk(root):
        for path in [folder] + [os.path.join(folder, name) for name in folders + files]:
            info = os.lstat(path)
            if not stat.S_ISLNK(info.st_mode) and info.st_mode & SPECIAL_BITS:
                os.chmod(path, stat.S_IMODE(info.st_mode) & ~SPECIAL_BITS)


def replace_in_place(path: str, new: str, marker: str, owner_marker: str) -> None:
    """Put the complete tree ``new`` in place of ``path`` where ``path`` cannot be renamed aside: overlayfs refuses
    (EXDEV) to rename a folder that lies in a lower layer, as in a container started from an image that holds the
    tree. The old tree's completion marker goes first (a run cut short from here on finds no complete tree and
    installs it again; the owner marker stays, so the tree is still known as ours), then every other entry of it;
    then the new tree's entries move in (they lie in the upper layer: renaming them works), its marker last."""
    done = os.path.join(path, marker)
    if os.path.lexists(done):
        os.unlink(done)
    for name in os.listdir(path):
        if name == owner_marker:
            continue
        full = os.path.join(path, name)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full)
        else:
            os.unlink(full)
    for name in sorted(os.listdir(new)):
        if name != marker:
            os.replace(os.path.join(new, name), os.path.join(path, name))
    os.chmod(path, 0o755)
    os.rename(os.path.join(new, marker), done)


def unpack(src: str, sha256: str, path: str, marker: str, marker_content: str, owner_marker: str,
           check_argv: list[str], run_command) -> str:
    """Install ``src`` at ``path`` atomically; returns the marker content of the tree it replaced. ``run_command``:
    AnsibleModule.run_command."""
    if not os.path.isfile(src):
        raise ValueError(f"{src} is missing")
    refuse_foreign(path, marker, owner_marker)
    parent, base = os.path.split(path)
    make_folders(parent)
    clean_leftovers(path)
    new = os.path.join(parent, f".{base}.hvd-new-{secrets.token_hex(6)}")
    os.mkdir(new, 0o700)  # nobody else reaches what it holds until the archive's digest is verified
    try:
        _extract(src, new, sha256, run_command)
        drop_special_bits(new)
        os.chmod(new, 0o755)
        if check_argv:
            argv = [arg.replace("{root}", new) for arg in check_argv]
            code, out, err = run_command(argv, expand_user_and_vars=False, handle_exceptions=False,
                                         errors="surrogate_then_replace")
            if code != 0:
                raise ValueError(f"the unpacked tree fails its check ({' '.join(argv)}): "
                                 f"{(err or out).strip()[-500:]}")
        write_manifest(new, {owner_marker, marker})
        write_file(os.path.join(new, owner_marker), "made by hvdcluster; removed and replaced by it\n")
        write_file(os.path.join(new, marker), marker_content + "\n")  # last: the tree is complete
        previous = read_marker(path, marker)
        if os.path.lexists(path):
            old = os.path.join(parent, f".{base}.hvd-old-{secrets.token_hex(6)}")
            try:
                os.rename(path, old)
            except OSError as error:
                if error.errno != errno.EXDEV:
                    raise
                replace_in_place(path, new, marker, owner_marker)
            else:
                os.rename(new, path)
                shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(new, path)
        return previous
    finally:
        if os.path.lexists(new):
            shutil.rmtree(new, ignore_errors=True)


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["unpacked", "owned", "absent", "verified", "manifested"],
                      "default": "unpacked"},
            "deep": {"type": "bool", "default": False},
            "exact": {"type": "bool", "default": False},
            "force": {"type": "bool", "default": False},
            "src": {"type": "path"},
            "sha256": {"type": "str"},
            "marker": {"type": "str", "default": ".hvd-complete"},
            "marker_content": {"type": "str", "default": ""},
            "owner_marker": {"type": "str", "default": ".hvdcluster"},
            "check_argv": {"type": "list", "elements": "str", "default": []},
        },
        required_if=[("state", "unpacked", ("src", "sha256", "marker_content"))],
        supports_check_mode=True,
    )
    p = module.params
    path, marker, owner = p["path"], p["marker"], p["owner_marker"]
    if not os.path.isabs(path) or os.path.normpath(path) in ("/", ""):
        module.fail_json(msg=f"path {path!r} must be an absolute path below /")
    try:
        if p["state"] == "verified":
            if not read_marker(path, marker):
                module.exit_json(changed=False, intact=False, differences=[f"{path} has no {marker}: not installed"])
            differences = verify(path, {owner, marker}, p["deep"], p["exact"])
            module.exit_json(changed=False, intact=not differences, differences=differences)
        if p["state"] == "manifested":
            if not os.path.isfile(os.path.join(path, owner)):
                module.fail_json(msg=f"{path} was not made by hvdcluster (no {owner} inside): no manifest written")
            if not module.check_mode:
                write_manifest(path, {owner, marker})
            module.exit_json(changed=True)
        if p["state"] == "absent":
            if not os.path.lexists(path):
                module.exit_json(changed=False)
            refuse_foreign(path, marker, owner)
            if not module.check_mode:
                shutil.rmtree(path)
            module.exit_json(changed=True)
        if p["state"] == "owned":
            refuse_foreign(path, marker, owner)
            if os.path.isfile(os.path.join(path, owner)):
                module.exit_json(changed=False)
            if not module.check_mode:
                make_folders(path)
                write_file(os.path.join(path, owner), "made by hvdcluster; removed and replaced by it\n")
            module.exit_json(changed=True)
        if read_marker(path, marker) == p["marker_content"] and not p["force"]:
            module.exit_json(changed=False, previous=p["marker_content"])
        if module.check_mode:
            module.exit_json(changed=True, previous=read_marker(path, marker))
        previous = unpack(p["src"], p["sha256"], path, marker, p["marker_content"], owner, p["check_argv"],
                          module.run_command)
    except (ValueError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=True, previous=previous)


if __name__ == "__main__":
    main()
