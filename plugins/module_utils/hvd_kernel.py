"""The kernel a node boots next and whether the NVIDIA driver can load there (issue 24: module guard and
unattended-upgrades guard), by plain file reads: no subprocess, nothing written.

Every reader takes ``root``, the prefix the node's files are read under ("/" on a node; a fake root in tests), like
plugins/module_utils/hvd_state.py's; paths in values are the node's paths (``root`` left out). Standard library only and
Python 3.9 compatible (it runs on the nodes); the node's files are read with hvd_files' helpers, as hvd_state's are.

- :func:`next_boot_kernel`: what GRUB starts next (grub.cfg's default, grubenv's ``next_entry`` and
  ``saved_entry``, /etc/default/grub), else the newest image in /boot.
- :func:`nvidia_modules`, :func:`headers_present`, :func:`dkms_status`, :func:`dkms_tree_status`,
  :func:`dkms_make_log_tail`: what that kernel has.
- :func:`module_guard`: the verdict (and why not) before any reboot and in ``check``.
- :func:`nouveau_blacklisted`, :func:`initramfs_after_blacklist`: nouveau kept out of the next boot.
- :func:`uu_blacklist`, :func:`uu_guard_missing`: unattended-upgrades' ``Package-Blacklist``.
"""

from __future__ import annotations

import glob
import os
import re
import shlex

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import read_text, resolve, under

NVIDIA_MODULES = ("nvidia", "nvidia-modeset", "nvidia-uvm")
MODULE_SUFFIXES = (".ko", ".ko.xz", ".ko.zst", ".ko.gz")
# Module file names: NVIDIA's and Ubuntu's packages build nvidia.ko, nvidia-uvm.ko, nvidia-modeset.ko; Debian's
# (nvidia-kernel-dkms, nvidia-open-kernel-dkms, the tesla and legacy variants) rename them (nvidia-current.ko,
# nvidia-current-uvm.ko ...) and alias the plain names in modprobe.d. Never nvidia-drm, nvidia-peermem, nvidia-fs.
_MODULE_FILE = re.compile(r"nvidia(?:[-_](?:current|tesla(?:[-_]\d+)?|legacy[-_]\d+xx))?(?:[-_]open)?"
                          r"(?:[-_](uvm|modeset))?")
# DKMS module names of the NVIDIA kernel driver: NVIDIA's and Ubuntu's "nvidia", Ubuntu's server builds
# "nvidia-srv", Debian's "nvidia-current" and "nvidia-current-open" (and the tesla and legacy variants).
_DKMS_NAME = re.compile(r"nvidia(?:-(?:current|srv|tesla(?:-\d+)?|legacy-\d+xx))?(?:-open)?")

HEADERS_MISSING = "headers missing"
BUILD_FAILED = "DKMS build failed"
NOT_BUILT = "not built"


# ------------------------------------------------------------------------------------------ files


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


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


# ------------------------------------------------------------------------------------------ modules and headers


def nvidia_modules(root: str, kernel: str) -> dict[str, str | None]:
    """nvidia, nvidia-modeset, nvidia-uvm -> the module file built for ``kernel`` (anywhere below
    /lib/modules/<kernel>/, compressed or not; one in updates/ first, where depmod looks first), or None."""
    folder = resolve(root, f"/lib/modules/{kernel}")
    found: dict[str, list[str]] = {name: [] for name in NVIDIA_MODULES}
    base = under(root, folder)
    for current, dirs, files in os.walk(base):
        dirs[:] = [d for d in dirs if d not in ("build", "source")]
        for file in files:
            suffix = next((s for s in MODULE_SUFFIXES if file.endswith(s)), None)
            if suffix is None:
                continue
            match = _MODULE_FILE.fullmatch(file[: -len(suffix)])
            full = os.path.join(current, file)
            if match and os.path.exists(full):
                name = "nvidia" + (f"-{match.group(1)}" if match.group(1) else "")
                found[name].append(os.path.join(folder, os.path.relpath(full, base)))
    out: dict[str, str | None] = {}
    for name, paths in found.items():
        paths.sort(key=lambda p: ("/updates/" not in p, p))
        out[name] = paths[0] if paths else None
    return out


def headers_present(root: str, kernel: str) -> bool:
    """The kernel's build tree is there: /lib/modules/<kernel>/build resolves to a folder (what DKMS builds
    against), or /usr/src/linux-headers-<kernel> is one."""
    for path in (f"/lib/modules/{kernel}/build", f"/usr/src/linux-headers-{kernel}"):
        if os.path.isdir(under(root, resolve(root, path))):
            return True
    return False


# ------------------------------------------------------------------------------------------ DKMS

_DKMS_LINE = re.compile(
    r"^(?P<module>[^\s,/:]+)(?:/|, )(?P<version>[^\s,:]+)"
    r"(?:, (?P<kernel>[^\s,:]+)(?:, (?P<arch>[^\s,:]+))?)?: (?P<state>added|built|installed|broken)\b(?P<note>.*)$")


def dkms_status(text: str) -> list[dict]:
    """``dkms status`` output as {module, version, kernel, arch, state, note}: both forms (dkms 2's
    ``nvidia, 535.86.05, 6.1.0-13-amd64, x86_64: installed`` and dkms 3's ``nvidia/535.86.05, ...``), ``kernel``
    and ``arch`` None on an ``added`` line; what follows the state (``(WARNING! Diff between built and installed
    module!)``) goes to ``note``; prompts, errors and warnings on lines of their own are left out."""
    out = []
    for line in text.splitlines():
        match = _DKMS_LINE.match(line.strip())
        if match:
            entry = match.groupdict()
            entry["note"] = entry["note"].strip()
            out.append(entry)
    return out


def dkms_tree_status(root: str) -> list[dict]:
    """What ``dkms status`` would say, read from DKMS's tree (/var/lib/dkms) instead of running it: a
    <module>/<version>/<kernel>/<arch>/module/ folder with a module in it is ``built``, ``installed`` where
    <module>/kernel-<kernel>-<arch> links to it; a version without any kernel is ``added``. Same shape as
    :func:`dkms_status`."""
    out = []
    tree = under(root, "/var/lib/dkms")
    for module in sorted(os.listdir(tree)) if os.path.isdir(tree) else ():
        mdir = os.path.join(tree, module)
        if not os.path.isdir(mdir) or os.path.islink(mdir):
            continue
        links = {}
        for name in os.listdir(mdir):
            path = os.path.join(mdir, name)
            if name.startswith("kernel-") and os.path.islink(path):
                links[os.path.normpath(os.path.join(mdir, os.readlink(path)))] = True
        for version in sorted(os.listdir(mdir), key=version_key):
            vdir = os.path.join(mdir, version)
            if version.startswith("kernel-") or os.path.islink(vdir) or not os.path.isdir(vdir):
                continue
            kernels = 0
            for kernel in sorted(os.listdir(vdir), key=version_key):
                if kernel in ("build", "source", "tarball"):
                    continue
                for arch_dir in sorted(glob.glob(os.path.join(glob.escape(os.path.join(vdir, kernel)), "*"))):
                    modules = glob.glob(os.path.join(glob.escape(arch_dir), "module", "*.ko*"))
                    if not modules:
                        continue
                    kernels += 1
                    state = "installed" if os.path.normpath(arch_dir) in links else "built"
                    out.append({"module": module, "version": version, "kernel": kernel,
                                "arch": os.path.basename(arch_dir), "state": state, "note": ""})
            if not kernels:
                out.append({"module": module, "version": version, "kernel": None, "arch": None, "state": "added",
                            "note": ""})
    return out


def is_nvidia_dkms(module: str) -> bool:
    """A DKMS module name of the NVIDIA kernel driver (not nvidia-fs, nvidia-peermem, a wifi driver)."""
    return bool(_DKMS_NAME.fullmatch(module))


def dkms_make_log_tail(root: str, module: str, version: str, kernel: str, lines: int = 20) -> list[str]:
    """The last ``lines`` lines of DKMS's make.log for ``kernel``: the kernel's own
    /var/lib/dkms/<module>/<version>/<kernel>/<arch>/log/make.log, else the shared build/make.log when it is about
    that kernel (a failed build leaves it there, and it names the kernel's build tree); [] without one."""
    vdir = f"/var/lib/dkms/{module}/{version}"
    candidates = sorted(glob.glob(os.path.join(glob.escape(under(root, f"{vdir}/{kernel}")), "*", "log",
                                               "make.log")))
    for path in candidates:
        text = read_text(path)
        if text is not None:
            return text.splitlines()[-lines:] if lines > 0 else []
    text = read_text(under(root, f"{vdir}/build/make.log"))
    if text is not None and kernel in text:
        return text.splitlines()[-lines:] if lines > 0 else []
    return []


# ------------------------------------------------------------------------------------------ the guard


def module_guard(root: str, dkms_text: str | None = None, kernel: str | None = None) -> dict:
    """Can the NVIDIA driver load after the next boot? For the next boot kernel (or ``kernel``):

    {kernel, how, modules (name -> file or None), missing, headers, dkms (the NVIDIA DKMS entry for that kernel, or
    None), cause, log_tail, message}. ``cause``: None when every module is there, else ``headers missing``,
    ``DKMS build failed`` (a make.log for that kernel says so; ``log_tail`` holds its last lines) or ``not built``.
    ``message`` is one line: "ok: ..." or "next boot kernel X has no NVIDIA module (nvidia, nvidia-uvm): headers
    missing (install linux-headers-X)".

    ``dkms_text``: ``dkms status`` output where the caller ran it; else DKMS's tree is read
    (:func:`dkms_tree_status`). Only meaningful on a node whose driver runs in kernel mode (the
    hvd_nvidia_driver fact's ``mode`` is ``kernel``): a CPU node or a container has no NVIDIA module by design.
    That decision is the caller's.
    """
    how = "asked for"
    if kernel is None:
        boot = next_boot_kernel(root)
        kernel, how = boot["version"], boot["how"]
    out = {"kernel": kernel, "how": how, "modules": {}, "missing": [], "headers": False, "dkms": None,
           "cause": None, "log_tail": []}
    if not kernel:
        out["cause"] = NOT_BUILT
        out["message"] = f"no kernel to boot next was found ({how})"
        return out
    out["modules"] = nvidia_modules(root, kernel)
    out["missing"] = [name for name, path in out["modules"].items() if path is None]
    out["headers"] = headers_present(root, kernel)
    entries = dkms_status(dkms_text) if dkms_text is not None else dkms_tree_status(root)
    nvidia = [e for e in entries if is_nvidia_dkms(e["module"])]
    for entry in nvidia:
        if entry["kernel"] == kernel:
            out["dkms"] = entry
    if not out["missing"]:
        out["message"] = f"ok: next boot kernel {kernel} has {', '.join(NVIDIA_MODULES)}"
        return out
    lost = ", ".join(out["missing"])
    if not out["headers"]:
        out["cause"] = HEADERS_MISSING
        hint = f" (install linux-headers-{kernel})"
    else:
        out["cause"], hint = NOT_BUILT, ""
        for entry in sorted(nvidia, key=lambda e: version_key(e["version"]), reverse=True):
            tail = dkms_make_log_tail(root, entry["module"], entry["version"], kernel)
            if tail and (out["dkms"] is None or out["dkms"]["state"] != "installed"):
                out["cause"], out["log_tail"] = BUILD_FAILED, tail
                hint = f" (/var/lib/dkms/{entry['module']}/{entry['version']}: make.log)"
                break
        if out["cause"] == NOT_BUILT and nvidia:
            best = max(nvidia, key=lambda e: version_key(e["version"]))
            hint = f" (dkms install -m {best['module']} -v {best['version']} -k {kernel})"
    out["message"] = f"next boot kernel {kernel} has no NVIDIA module ({lost}): {out['cause']}{hint}"
    return out


def guard_item(guard: dict) -> str:
    """The guard as one state item value: "ok" on every healthy node whatever kernel it boots (so that healthy
    peers compare equal), else "<kernel> has no NVIDIA module (<missing>): <cause>"."""
    if not guard["missing"] and guard["kernel"]:
        return "ok"
    if not guard["kernel"]:
        return "no kernel image in /boot"
    return f"{guard['kernel']} has no NVIDIA module ({', '.join(guard['missing'])}): {guard['cause']}"


# ------------------------------------------------------------------------------------------ nouveau


def _modprobe_files(root: str) -> list[str]:
    """The modprobe.d files modprobe reads, as the node's paths: *.conf of /etc, /run, /usr/lib and /lib
    modprobe.d, a name in an earlier folder masking the same name in a later one."""
    chosen: dict[str, str] = {}
    for folder in ("/etc/modprobe.d", "/run/modprobe.d", "/usr/local/lib/modprobe.d", "/usr/lib/modprobe.d",
                   "/lib/modprobe.d"):
        for path in sorted(glob.glob(os.path.join(glob.escape(under(root, folder)), "*.conf"))):
            chosen.setdefault(os.path.basename(path), f"{folder}/{os.path.basename(path)}")
    return [chosen[name] for name in sorted(chosen)]


def nouveau_blacklist_files(root: str) -> list[str]:
    """The modprobe.d files (node's paths) that say ``blacklist nouveau`` (comments ignored)."""
    out = []
    for path in _modprobe_files(root):
        for line in (read_text(under(root, path)) or "").splitlines():
            words = line.split("#", 1)[0].split()
            if words[:2] == ["blacklist", "nouveau"]:
                out.append(path)
                break
    return out


def nouveau_blacklisted(root: str) -> bool:
    """A modprobe.d file blacklists nouveau."""
    return bool(nouveau_blacklist_files(root))


def initramfs_after_blacklist(root: str, kernel: str) -> bool | None:
    """The kernel's initramfs (/boot/initrd.img-<kernel>) was built after the newest nouveau blacklist file, so the
    copy of modprobe.d it carries keeps nouveau out too; None where there is no blacklist or no initramfs."""
    files = nouveau_blacklist_files(root)
    image = _mtime(under(root, f"/boot/initrd.img-{kernel}"))
    times = [t for t in (_mtime(under(root, resolve(root, f))) for f in files) if t is not None]
    if image is None or not times:
        return None
    return image >= max(times)


# ------------------------------------------------------------------------------------------ unattended-upgrades

_UU_KEY = "unattended-upgrade::package-blacklist"
# apt skips files in its parts folders whose names have other characters, and these (Dir::Ignore-Files-Silently).
_APT_PART = re.compile(r"[A-Za-z0-9_.\-]+")
_APT_IGNORED = re.compile(r"(~|\.disabled|\.bak|\.dpkg-[a-z]+|\.ucf-[a-z]+|\.save|\.orig|\.distUpgrade)$")


def _apt_tokens(text: str) -> list[str]:
    """apt.conf's tokens: quoted strings (kept with their quotes), '{', '}', ';', words, '#clear' and '#include'
    directives; comments (``//`` to the end of the line, ``/* ... */``, ``#`` to the end of the line) dropped."""
    tokens: list[str] = []
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char.isspace():
            i += 1
        elif char == '"':
            end = text.find('"', i + 1)
            end = n if end < 0 else end
            tokens.append(text[i:end + 1])
            i = end + 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif char == "#":
            directive = re.match(r"#(clear|include)\b", text[i:])
            if directive:
                tokens.append(directive.group(0))
                i += len(directive.group(0))
            else:
                end = text.find("\n", i)
                i = n if end < 0 else end
        elif char in "{};":
            tokens.append(char)
            i += 1
        else:
            match = re.match(r'[^\s{};"]+', text[i:])
            tokens.append(match.group(0))
            i += len(match.group(0))
    return tokens


def apt_conf_values(text: str, key: str, values: list[str] | None = None) -> list[str]:
    """The list ``key`` (``Scope::Name``, case-insensitive as apt compares them) of one apt.conf text, appended to
    ``values`` (the list so far, from earlier files): ``Key { "a"; "b"; };``, ``Scope { Key { "a"; }; };`` and
    ``Key:: "a";`` all add; ``#clear Key;`` empties it."""
    values = [] if values is None else values
    want = key.lower()
    scopes: list[str] = []
    pending: list[str] = []  # the words since the last ';', '{' or '}'
    tokens = _apt_tokens(text)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token == "#clear":
            j = i + 1
            while j < len(tokens) and tokens[j] != ";":
                if tokens[j].strip('"').lower().rstrip(":") == want:
                    values.clear()
                j += 1
            i = j + 1
            continue
        if token == "#include":
            while i < len(tokens) and tokens[i] != ";":
                i += 1
            i += 1
            continue
        if token == "{":
            scopes.append(pending[0] if pending else "")
            pending = []
        elif token == "}":
            if scopes:
                scopes.pop()
            pending = []
        elif token == ";":
            name = "::".join(s for s in scopes if s)
            words = [w for w in pending if not w.startswith('"')]
            strings = [w[1:-1] for w in pending if w.startswith('"')]
            full = "::".join(p for p in (name, *words) if p).rstrip(":").lower()
            # a list item: a bare value inside the key's block, or "Key:: value"; "Key value" sets the key itself
            item = not words or words[-1].endswith("::")
            if full == want and strings and item:
                values.append(strings[-1])
            pending = []
        else:
            pending.append(token)
        i += 1
    return values


def apt_conf_files(root: str) -> list[str]:
    """/etc/apt/apt.conf.d's files apt reads (the node's paths), in the order it reads them (by name)."""
    folder = "/etc/apt/apt.conf.d"
    names = []
    for path in glob.glob(os.path.join(glob.escape(under(root, folder)), "*")):
        name = os.path.basename(path)
        if os.path.isfile(path) and _APT_PART.fullmatch(name) and not _APT_IGNORED.search(name):
            names.append(name)
    return [f"{folder}/{name}" for name in sorted(names)]


def uu_blacklist(root: str) -> list[str]:
    """unattended-upgrades' Unattended-Upgrade::Package-Blacklist as apt builds it from /etc/apt/apt.conf.d (and
    /etc/apt/apt.conf, read last): every file's entries in file order, without duplicates."""
    values: list[str] = []
    for path in [*apt_conf_files(root), "/etc/apt/apt.conf"]:
        text = read_text(under(root, path))
        if text is not None:
            apt_conf_values(text, _UU_KEY, values)
    return list(dict.fromkeys(values))


def uu_blacklisted(name: str, patterns: list[str]) -> bool:
    """unattended-upgrades skips ``name``: one entry, a Python regular expression, matches it from its start
    (``re.match``: "nvidia-" covers every nvidia-* package, "libcuda1$" only libcuda1). An entry that is no valid
    expression matches nothing."""
    for pattern in patterns:
        try:
            if re.match(pattern, name):
                return True
        except re.error:
            continue
    return False


def installed_packages(root: str) -> set[str]:
    """The names of the packages dpkg's status file says are installed (held or not)."""
    names = set()
    for stanza in (read_text(under(root, "/var/lib/dpkg/status")) or "").split("\n\n"):
        fields = dict(re.findall(r"^(Package|Status):[ \t]*(.*?)[ \t]*$", stanza, re.M))
        if "Package" in fields and fields.get("Status", "").split()[2:3] == ["installed"]:
            names.add(fields["Package"])
    return names


def uu_guard_missing(root: str, packages: list[str]) -> list[str]:
    """Those of ``packages`` (names; ``name:arch`` is taken as ``name``) that are installed and that
    unattended-upgrades' Package-Blacklist does not cover, sorted: each one an unattended run may upgrade behind
    the holds' back. A package not installed needs no guard."""
    patterns = uu_blacklist(root)
    installed = installed_packages(root)
    names = {p.split(":", 1)[0] for p in packages}
    return sorted(n for n in names if n in installed and not uu_blacklisted(n, patterns))
