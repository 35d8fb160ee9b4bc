"""hvd_kernel_guard, run as Ansible runs it on a node tree in tmp_path: the next boot kernel and why its NVIDIA
modules are missing. Its readers in detail: tests/unit/plugins/module_utils/test_hvd_boot.py and
test_hvd_kernel.py.
"""

from __future__ import annotations

from pathlib import Path

from ansible_collections.hvd.cluster.tests.unit.plugins.support import run_module


# ------------------------------------------------------------------------------------------ hvd_kernel_guard


def test_kernel_guard_names_the_next_boot_kernel_and_why_its_modules_are_missing(tmp_path: Path) -> None:
    """A node tree (no GPU is needed to read one): two kernel images, no GRUB config, so the newest boots next. Its
    modules are missing while its headers are; once built, the guard is ok; the older kernel is judged when asked."""
    root = tmp_path / "node"
    for kernel in ("6.1.0-25-amd64", "6.1.0-27-amd64"):
        (root / "boot").mkdir(parents=True, exist_ok=True)
        (root / "boot" / f"vmlinuz-{kernel}").write_bytes(b"MZ")
    old = root / "lib/modules/6.1.0-25-amd64/updates/dkms"
    old.mkdir(parents=True)
    for name in ("nvidia", "nvidia-modeset", "nvidia-uvm"):
        (old / f"{name}.ko").write_bytes(b"\x7fELF")
    missing = run_module("hvd_kernel_guard", {"root": str(root)}, check=True)
    assert missing["changed"] is False and missing["ok"] is False, missing
    assert missing["kernel"] == "6.1.0-27-amd64" and missing["cause"] == "headers missing", missing
    assert missing["missing"] == ["nvidia", "nvidia-modeset", "nvidia-uvm"]
    assert "install linux-headers-6.1.0-27-amd64" in missing["message"], missing["message"]
    assert run_module("hvd_kernel_guard", {"root": str(root), "kernel": "6.1.0-25-amd64"})["ok"] is True
    (root / "usr/src/linux-headers-6.1.0-27-amd64").mkdir(parents=True)
    assert run_module("hvd_kernel_guard", {"root": str(root)})["cause"] == "not built"
    built = root / "lib/modules/6.1.0-27-amd64/updates/dkms"
    built.mkdir(parents=True)
    for name in ("nvidia", "nvidia-modeset", "nvidia-uvm"):
        (built / f"{name}.ko.xz").write_bytes(b"\x7fELF")
    done = run_module("hvd_kernel_guard", {"root": str(root)})
    assert done["ok"] is True and done["cause"] is None and done["message"].startswith("ok: "), done


def test_kernel_guard_says_whether_the_initramfs_was_built_after_the_nouveau_blacklist(tmp_path: Path) -> None:
    """What hvd_nvidia_driver rebuilds: the initramfs of a kernel that predates the blacklist, and no other."""
    import os

    root = tmp_path / "node"
    (root / "boot").mkdir(parents=True)
    (root / "boot" / "vmlinuz-6.1.0-27-amd64").write_bytes(b"MZ")
    initrd = root / "boot" / "initrd.img-6.1.0-27-amd64"
    initrd.write_bytes(b"\x1f\x8b")
    assert run_module("hvd_kernel_guard", {"root": str(root)})["initramfs_current"] is None  # no blacklist
    conf = root / "etc/modprobe.d/hvd-blacklist-nouveau.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("blacklist nouveau\n")
    os.utime(initrd, (1000, 1000))
    os.utime(conf, (2000, 2000))
    assert run_module("hvd_kernel_guard", {"root": str(root)}, check=True)["initramfs_current"] is False
    os.utime(initrd, (3000, 3000))
    assert run_module("hvd_kernel_guard", {"root": str(root)})["initramfs_current"] is True
