"""Whether the NVIDIA driver can load in the kernel a node boots next (issue 24: the module guard), and nouveau
kept out of that boot, by plain file reads: no subprocess, nothing written.

Every reader takes ``root``, the prefix the node's files are read under ("/" on a node; a fake root in tests), like
plugins/module_utils/hvd_state.py's; paths in values are the node's paths (``root`` left out). Standard library only and
Python 3.9 compatible (it runs on the nodes); the node's files are read with hvd_files' helpers, as hvd_state's are.

- the kernel it checks: hvd_boot.py's :func:`next_boot_kernel` (what GRUB starts next).
- :func:`nvidia_modules`, :func:`headers_present`, :func:`dkms_status`, :func:`dkms_tree_status`,
  :func:`dkms_make_log_tail`: what that kernel has.
- :func:`module_guard`: the verdict (and why not) before any reboot and in ``check``.
- :func:`nouveau_blacklisted`, :func:`initramfs_after_blacklist`, :func:`nouveau_item`: nouveau kept out of the next
  boot (``driver.nouveau`` in ``check``).
- unattended-upgrades' ``Package-Blacklist``: hvd_apt_conf.py.
"""

from __future__ import annotations

import glob
import os
import re

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_boot import next_boot_kernel, version_key
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import mtime, read_text, resolve, under

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
NOUVEAU_NOT_BLACKLISTED = "nouveau not blacklisted (no modprobe.d file says blacklist nouveau)"
BUILD_FAILED = "DKMS build failed"
NOT_BUILT = "not built"


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
    image = mtime(under(root, f"/boot/initrd.img-{kernel}"))
    times = [t for t in (mtime(under(root, resolve(root, f))) for f in files) if t is not None]
    if image is None or not times:
        return None
    return image >= max(times)


def nouveau_item(root: str, kernel: str | None) -> str:
    """``driver.nouveau`` where the driver's role blacklists nouveau: "ok" when a modprobe.d file says so and the
    initramfs of ``kernel`` (the one the node boots next) was built after it, so nouveau stays out from the boot's
    first stage on; else what is wrong, in one line. A kernel without an initramfs reads modprobe.d from its root
    file system: nothing to rebuild there."""
    if not nouveau_blacklisted(root):
        return NOUVEAU_NOT_BLACKLISTED
    if kernel and initramfs_after_blacklist(root, kernel) is False:
        return f"the initramfs of {kernel} predates the nouveau blacklist (update-initramfs -u -k {kernel})"
    return "ok"
