"""Which kernel a node boots next, by plain file reads (no subprocess, nothing written): GRUB's menu (grub.cfg), its
``next_entry`` and ``saved_entry`` (grubenv), /etc/default/grub's GRUB_DEFAULT, else the newest image in /boot; and the
order of Debian kernel versions (:func:`version_key`).

Every reader takes ``root``, the prefix the node's files are read under ("/" on a node; a fake root in tests), like
plugins/module_utils/hvd_state.py's; paths in values are the node's paths (``root`` left out). Standard library only and
Python 3.9 compatible (it runs on the nodes).
"""

from __future__ import annotations

import glob
import os
import re
import shlex

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import read_text, resolve, under


# ------------------------------------------------------------------------------------------ kernels


def _order_weight(char: str) -> int:
    """dpkg's order of a non-digit character: '~' before the end of a part, the end before letters, letters before
    everything else."""
    if char == "~":
        return -1
    if char.isalpha():
        return ord(char)
    return ord(char) + 256


def _part_key(text: str) -> list:
    key = []
    for chars, digits in re.findall(r"(\D*)(\d*)", text):
        if chars or digits:
            key.append((tuple(_order_weight(c) for c in chars) + (0,), int(digits or 0)))
    key.append(((0,), 0))  # the end: after a '~' part, before any other part
    return key


def version_key(version: str) -> tuple:
    """A sort key that orders versions the way ``dpkg --compare-versions`` does (how Debian's kernel hooks and
    GRUB's 10_linux order kernels): epoch, then the upstream part, then the revision after the last '-', each
    compared in runs: digits as numbers, other characters one by one with '~' before anything, even before the end
    ("6.12~rc6-amd64" < "6.12-amd64")."""
    epoch, sep, rest = version.partition(":")
    if not sep or not epoch.isdigit():
        epoch, rest = "0", version
    upstream, sep, revision = rest.rpartition("-")
    if not sep:
        upstream, revision = rest, ""
    return (int(epoch), _part_key(upstream), _part_key(revision))


def installed_kernels(root: str) -> list[str]:
    """The kernel versions with an image in /boot (``vmlinuz-<version>``), oldest first, newest last."""
    found = {os.path.basename(path)[len("vmlinuz-"):]
             for path in glob.glob(os.path.join(glob.escape(under(root, "/boot")), "vmlinuz-*"))}
    found.discard("")
    return sorted((v for v in found if not v.endswith((".old", ".bak", ".dpkg-tmp"))), key=version_key)


# ------------------------------------------------------------------------------------------ GRUB


def _shell_assignments(text: str) -> dict[str, str]:
    """``NAME=value`` lines of a shell file as the shell reads simple ones (quotes, ``export``); comments and
    lines that are not assignments ignored."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        match = re.match(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)$", line)
        if not match:
            continue
        try:
            words = shlex.split(match.group(2), comments=True)
        except ValueError:
            continue
        out[match.group(1)] = words[0] if words else ""
    return out


def grub_default_setting(root: str) -> tuple[str | None, str]:
    """GRUB_DEFAULT as update-grub sees it: /etc/default/grub, then /etc/default/grub.d/*.cfg in name order (a later
    file wins); (None, "") when none sets it. The second value names the file that set it."""
    value, source = None, ""
    files = ["/etc/default/grub"] + sorted(
        "/etc/default/grub.d/" + os.path.basename(p)
        for p in glob.glob(os.path.join(glob.escape(under(root, "/etc/default/grub.d")), "*.cfg")))
    for path in files:
        found = _shell_assignments(read_text(under(root, path)) or "").get("GRUB_DEFAULT")
        if found is not None:
            value, source = found, path
    return value, source


def grubenv(root: str) -> dict[str, str]:
    """/boot/grub/grubenv's variables (``saved_entry``, ``next_entry`` ...)."""
    out = {}
    for line in (read_text(under(root, "/boot/grub/grubenv")) or "").splitlines():
        if line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if sep:
            out[key] = value
    return out


def grub_menu(text: str) -> list[dict]:
    """grub.cfg's menu: every top-level ``menuentry`` and ``submenu`` in order, as {kind, title, id, kernel,
    entries}: ``kernel`` the version of the ``linux`` line's /vmlinuz-<version> (None without one), ``entries`` a
    submenu's own items."""
    top: list[dict] = []
    stack: list[dict] = []  # open menuentry/submenu blocks; a None marks another brace block (if ... { is not grub)
    depth_marks: list[dict | None] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        head = re.match(r"(menuentry|submenu)\s", line)
        if head and line.endswith("{"):
            try:
                words = shlex.split(line[:-1])
            except ValueError:
                words = line[:-1].split()
            ident = ""
            for i, word in enumerate(words[:-1]):
                if word in ("$menuentry_id_option", "--id"):
                    ident = words[i + 1]
            item = {"kind": head.group(1), "title": words[1] if len(words) > 1 else "", "id": ident,
                    "kernel": None, "entries": []}
            (stack[-1]["entries"] if stack else top).append(item)
            stack.append(item)
            depth_marks.append(item)
            continue
        if line.endswith("{"):
            depth_marks.append(None)
            continue
        if line == "}" or line.startswith("}"):
            if depth_marks:
                if depth_marks.pop() is not None:
                    stack.pop()
            continue
        if stack and stack[-1]["kind"] == "menuentry" and stack[-1]["kernel"] is None:
            linux = re.match(r"linux(?:efi|16)?\s+(\S+)", line)
            if linux:
                name = os.path.basename(linux.group(1))
                stack[-1]["kernel"] = name[len("vmlinuz-"):] if name.startswith("vmlinuz-") else linux.group(1)
    return top


def _find(items: list[dict], key: str) -> dict | None:
    """One level of GRUB's default lookup: a number is a position, anything else a title or an id."""
    if re.fullmatch(r"\d+", key):
        index = int(key)
        return items[index] if index < len(items) else None
    for item in items:
        if key in (item["title"], item["id"]):
            return item
    return None


def resolve_grub_entry(menu: list[dict], default: str) -> dict | None:
    """The menuentry ``default`` names: a number, a title or an id, or a ``>``-separated path through submenus
    (``1>2``, ``gnulinux-advanced-<uuid>>gnulinux-6.1.0-27-amd64-advanced-<uuid>``). None when it names nothing
    bootable (GRUB then boots the first entry)."""
    items, found = menu, None
    for part in default.split(">"):
        found = _find(items, part)
        if found is None:
            return None
        items = found["entries"]
    return found if found is not None and found["kind"] == "menuentry" else None


def _cfg_default(text: str) -> str | None:
    """What grub.cfg sets ``default`` to when no one-shot ``next_entry`` is pending (update-grub writes
    GRUB_DEFAULT there; ``saved`` becomes ``${saved_entry}``)."""
    values = [m.group(1) for m in re.finditer(r"""^\s*set\s+default=["']?([^"'\n]*)["']?\s*$""", text, re.M)]
    values = [v for v in values if v != "${next_entry}"]
    return values[-1] if values else None


def _image_kernel(root: str, kernel: str) -> str:
    """A ``linux`` line's path that is not /vmlinuz-<version> (a /vmlinuz link): the version it links to."""
    if not kernel.startswith("/"):
        return kernel
    for path in (kernel, "/boot" + kernel):
        name = os.path.basename(resolve(root, path))
        if name.startswith("vmlinuz-") and os.path.exists(under(root, resolve(root, path))):
            return name[len("vmlinuz-"):]
    return kernel


def next_boot_kernel(root: str) -> dict:
    """The kernel the boot loader starts next: {version, how}; version None where none can be found.

    GRUB (Debian and Ubuntu): a pending one-shot ``next_entry`` (grub-reboot) in /boot/grub/grubenv wins; else the
    default grub.cfg sets, which update-grub takes from GRUB_DEFAULT (/etc/default/grub, then
    /etc/default/grub.d/*.cfg) - ``saved`` means grubenv's ``saved_entry`` (grub-set-default). Where grub.cfg has no
    default, GRUB_DEFAULT itself. The default is resolved against grub.cfg's menu (number, title, id or a
    ``>``-separated submenu path); one that names nothing makes GRUB boot the first entry. Without a grub.cfg, or
    where that entry boots no Linux image, the newest installed kernel (what Debian's kernel hooks make the
    default) - ``how`` says which it was.
    """
    kernels = installed_kernels(root)
    newest = kernels[-1] if kernels else None
    cfg_text = read_text(under(root, "/boot/grub/grub.cfg"))
    if cfg_text is None:
        # grub-mkconfig makes grub.cfg 0400 where it holds a password: a reader that is not root cannot see it
        there = os.path.exists(under(root, "/boot/grub/grub.cfg"))
        what = "/boot/grub/grub.cfg is not readable" if there else "no /boot/grub/grub.cfg"
        return {"version": newest, "how": f"{what}: the newest kernel in /boot"}
    menu = grub_menu(cfg_text)
    env = grubenv(root)
    setting, source = grub_default_setting(root)
    compiled = _cfg_default(cfg_text)
    if env.get("next_entry"):
        default, why = env["next_entry"], "grubenv next_entry (grub-reboot, one-shot)"
    elif compiled is not None:
        default, why = compiled, "grub.cfg default"
        if compiled == "${saved_entry}":
            default, why = env.get("saved_entry", ""), "grubenv saved_entry (GRUB_DEFAULT=saved)"
        elif setting is not None and setting not in (compiled, "saved"):
            why += f" ({source} says {setting!r}: update-grub has not run since)"
    elif setting is not None:
        default, why = setting, f"GRUB_DEFAULT in {source}"
        if setting == "saved":
            default, why = env.get("saved_entry", ""), "grubenv saved_entry (GRUB_DEFAULT=saved)"
    else:
        default, why = "0", "GRUB's first entry (no default set)"
    entry = resolve_grub_entry(menu, default) if default else None
    if entry is None:
        why = f"{why} {default!r} names no entry: GRUB boots the first" if default else f"{why} empty: the first"
        entry = resolve_grub_entry(menu, "0")
    if entry is None or not entry["kernel"]:
        return {"version": newest, "how": f"{why}; it boots no Linux image: the newest kernel in /boot"}
    version = _image_kernel(root, entry["kernel"])
    return {"version": version, "how": f"{why}: {entry['title']!r}"}
