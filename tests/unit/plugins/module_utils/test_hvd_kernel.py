"""plugins/module_utils/hvd_kernel.py: the next boot kernel's NVIDIA modules, its headers, DKMS (its tree, ``dkms
status``, make.log) and the guard over them, and the nouveau blacklist, read from real folder trees in tmp_path and
from recorded command output.

What a GPU node would add: a real DKMS build against real headers, a real reboot into the next kernel and
``modprobe nvidia`` there. None of that runs here (no GPU, no second kernel, no boot loader in a container), so
these tests build the trees those steps leave behind (/boot, /lib/modules, /var/lib/dkms, grub.cfg, grubenv) and
feed the readers what dkms printed on real machines (../shared/fixtures-gpu, read in place). Those recordings are an
extra layer: test_hvd_kernel_own.py feeds the same readers the project's own fixtures
(tests/unit/plugins/fixtures/gpu), and without ../shared/fixtures-gpu the tests here that read it are skipped. The trees are kernel_tree.py's.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ansible_collections.hvd.cluster.tests.unit.plugins.module_utils.kernel_tree import (
    NEW, OLD, add_dkms, add_headers, add_modules,
)
# a fixture: the tests below ask for it by name
from ansible_collections.hvd.cluster.tests.unit.plugins.module_utils.kernel_tree import node  # noqa: F401
from ansible_collections.hvd.cluster.tests.unit.plugins.support import gpu_fixture, link, write

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_kernel


def fixture(name: str) -> str:
    return gpu_fixture(name).read_text()


# ------------------------------------------------------------------------------------------ modules and headers


def test_the_three_modules_are_found_in_any_folder_and_compression(node: Path) -> None:
    write(node, f"/lib/modules/{NEW}/updates/dkms/nvidia.ko.zst", b"\x7fELF")
    write(node, f"/lib/modules/{NEW}/kernel/nvidia-535srv/nvidia-uvm.ko", b"\x7fELF")  # Ubuntu's prebuilt
    write(node, f"/lib/modules/{NEW}/updates/dkms/nvidia-current-modeset.ko.gz", b"\x7fELF")  # Debian's name
    assert hvd_kernel.nvidia_modules(str(node), NEW) == {
        "nvidia": f"/lib/modules/{NEW}/updates/dkms/nvidia.ko.zst",
        "nvidia-modeset": f"/lib/modules/{NEW}/updates/dkms/nvidia-current-modeset.ko.gz",
        "nvidia-uvm": f"/lib/modules/{NEW}/kernel/nvidia-535srv/nvidia-uvm.ko"}


def test_other_nvidia_named_modules_and_other_kernels_do_not_count(node: Path) -> None:
    add_modules(node, OLD)
    for name in ("nvidia-drm", "nvidia-peermem", "nvidia-fs", "nvidiafb"):
        write(node, f"/lib/modules/{NEW}/updates/dkms/{name}.ko", b"\x7fELF")
    write(node, f"/lib/modules/{NEW}/updates/dkms/nvidia.ko.sig", b"")
    write(node, f"/lib/modules/{NEW}/build/nvidia.ko", b"\x7fELF")  # a build tree, which depmod skips
    write(node, f"/lib/modules/{NEW}/updates/dkms/nvidia.o", b"")
    assert hvd_kernel.nvidia_modules(str(node), NEW) == dict.fromkeys(hvd_kernel.NVIDIA_MODULES)
    assert hvd_kernel.nvidia_modules(str(node), OLD)["nvidia-uvm"] == f"/lib/modules/{OLD}/updates/dkms/nvidia-uvm.ko.xz"


def test_modules_are_found_through_a_merged_usr(tmp_path: Path) -> None:
    link(tmp_path, "/lib", "usr/lib")
    write(tmp_path, f"/usr/lib/modules/{NEW}/updates/dkms/nvidia.ko.xz", b"\x7fELF")
    assert hvd_kernel.nvidia_modules(str(tmp_path), NEW)["nvidia"] == f"/usr/lib/modules/{NEW}/updates/dkms/nvidia.ko.xz"


def test_headers_are_the_build_link_to_a_folder_or_usr_src(node: Path) -> None:
    assert hvd_kernel.headers_present(str(node), NEW) is False
    link(node, f"/lib/modules/{NEW}/build", f"/usr/src/linux-headers-{NEW}")
    assert hvd_kernel.headers_present(str(node), NEW) is False  # the link is left behind when the headers are removed
    write(node, f"/usr/src/linux-headers-{NEW}/Makefile", "")
    assert hvd_kernel.headers_present(str(node), NEW) is True
    write(node, f"/usr/src/linux-headers-{OLD}/Makefile", "")  # no build link: the folder alone does
    assert hvd_kernel.headers_present(str(node), OLD) is True


# ------------------------------------------------------------------------------------------ DKMS


def test_dkms_status_of_dkms_3_from_a_real_machine() -> None:
    entries = hvd_kernel.dkms_status(fixture("dkms-status_nvidia-535.86.05_installed.txt"))
    assert entries == [
        {"module": "nvidia", "version": "535.86.05", "kernel": "6.5.0-060500rc5-generic", "arch": "x86_64",
         "state": "installed", "note": ""},
        {"module": "rtl8852bu", "version": "1.19.3", "kernel": "6.5.0-060500rc5-generic", "arch": "x86_64",
         "state": "installed", "note": ""}]
    assert [hvd_kernel.is_nvidia_dkms(e["module"]) for e in entries] == [True, False]


def test_dkms_status_of_dkms_2_with_added_lines_and_warnings() -> None:
    text = ("nvidia, 535.86.05, 6.1.0-13-amd64, x86_64: installed (WARNING! Diff between built and installed "
            "module!)\n"
            "nvidia-current, 525.147.05, 6.1.0-27-amd64, x86_64: built\n"
            "nvidia-current, 535.216.03: added\n"
            "Error! Could not locate dkms.conf file.\n"
            "File: /var/lib/dkms/broken/1.0/source/dkms.conf does not exist.\n")
    assert hvd_kernel.dkms_status(text) == [
        {"module": "nvidia", "version": "535.86.05", "kernel": "6.1.0-13-amd64", "arch": "x86_64",
         "state": "installed", "note": "(WARNING! Diff between built and installed module!)"},
        {"module": "nvidia-current", "version": "525.147.05", "kernel": "6.1.0-27-amd64", "arch": "x86_64",
         "state": "built", "note": ""},
        {"module": "nvidia-current", "version": "535.216.03", "kernel": None, "arch": None, "state": "added",
         "note": ""}]


@pytest.mark.parametrize("name", ["nvidia-smi_FAIL-couldnt-communicate_kernel-upgraded-module-missing.txt",
                                  "dkms-install_nvidia-470.86_FAIL-bad-exit-status_kernel-5.13.18.txt",
                                  "dkms-install_nvidia-465.19.01_FAIL-kernel-5.12-too-new.txt"])
def test_dkms_errors_and_other_output_are_no_status_lines(name: str) -> None:
    text = fixture(name)
    assert "dkms" in text and hvd_kernel.dkms_status(text) == []


def test_the_dkms_tree_reads_as_dkms_status_would(node: Path) -> None:
    add_dkms(node, "nvidia", "535.86.05", OLD)
    add_dkms(node, "nvidia", "535.86.05", NEW, installed=False)
    link(node, "/var/lib/dkms/nvidia/560.35.03/source", "/usr/src/nvidia-560.35.03")
    add_dkms(node, "nvidia-fs", "2.17.5", OLD)
    assert [(e["module"], e["version"], e["kernel"], e["state"]) for e in hvd_kernel.dkms_tree_status(str(node))] == [
        ("nvidia", "535.86.05", OLD, "installed"), ("nvidia", "535.86.05", NEW, "built"),
        ("nvidia", "560.35.03", None, "added"), ("nvidia-fs", "2.17.5", OLD, "installed")]
    assert hvd_kernel.dkms_tree_status(str(node / "nothing")) == []


def test_the_make_log_tail_is_the_kernels_own_log_else_the_build_log_about_it(node: Path) -> None:
    make_log = fixture("dkms-make-log-excerpt_nvidia-465.19.01_kernel-5.12_sys_close-error.txt")
    kernel = "5.12.0-rc5-144-tkg-cfs"
    write(node, "/var/lib/dkms/nvidia/465.19.01/build/make.log", make_log)
    tail = hvd_kernel.dkms_make_log_tail(str(node), "nvidia", "465.19.01", kernel, lines=3)
    assert tail == make_log.splitlines()[-3:]
    assert tail[-1] == "make: *** [Makefile:80: modules] Error 2"
    assert hvd_kernel.dkms_make_log_tail(str(node), "nvidia", "465.19.01", NEW) == []  # that log is about another kernel
    write(node, f"/var/lib/dkms/nvidia/465.19.01/{NEW}/x86_64/log/make.log", "line 1\nline 2\nline 3\n")
    assert hvd_kernel.dkms_make_log_tail(str(node), "nvidia", "465.19.01", NEW, lines=2) == ["line 2", "line 3"]


# ------------------------------------------------------------------------------------------ the guard


def test_a_healthy_next_boot_kernel_passes_whatever_its_version(node: Path) -> None:
    add_modules(node, NEW)
    add_headers(node, NEW)
    add_dkms(node, "nvidia", "535.86.05", NEW)
    guard = hvd_kernel.module_guard(str(node))
    assert guard["kernel"] == NEW and guard["missing"] == [] and guard["cause"] is None
    assert guard["dkms"]["state"] == "installed" and guard["headers"] is True
    assert guard["message"] == f"ok: next boot kernel {NEW} has nvidia, nvidia-modeset, nvidia-uvm"
    assert hvd_kernel.guard_item(guard) == "ok"


def test_the_next_boot_kernel_without_headers_is_named_with_its_header_package(node: Path) -> None:
    add_modules(node, OLD)  # the running kernel is fine: only the next boot would lose the driver
    add_headers(node, OLD)
    add_dkms(node, "nvidia", "535.86.05", OLD)
    guard = hvd_kernel.module_guard(str(node))
    assert guard["kernel"] == NEW and guard["cause"] == hvd_kernel.HEADERS_MISSING and guard["headers"] is False
    assert guard["missing"] == ["nvidia", "nvidia-modeset", "nvidia-uvm"] and guard["dkms"] is None
    assert guard["message"] == (f"next boot kernel {NEW} has no NVIDIA module (nvidia, nvidia-modeset, nvidia-uvm): "
                                f"headers missing (install linux-headers-{NEW})")
    assert hvd_kernel.guard_item(guard) == f"{NEW} has no NVIDIA module (nvidia, nvidia-modeset, nvidia-uvm): headers missing"


def test_a_failed_dkms_build_is_named_with_the_end_of_its_make_log(tmp_path: Path) -> None:
    """The kernel and make.log of the recorded failure (a driver too old for a new kernel), on a node without GRUB."""
    make_log = fixture("dkms-make-log-excerpt_nvidia-465.19.01_kernel-5.12_sys_close-error.txt")
    kernel, node = "5.12.0-rc5-144-tkg-cfs", tmp_path
    write(node, "/boot/vmlinuz-5.11.16-arch1-1", b"MZ")
    write(node, f"/boot/vmlinuz-{kernel}", b"MZ")
    add_headers(node, kernel)
    link(node, "/var/lib/dkms/nvidia/465.19.01/source", "/usr/src/nvidia-465.19.01")
    write(node, "/var/lib/dkms/nvidia/465.19.01/build/make.log", make_log)
    guard = hvd_kernel.module_guard(str(node))
    assert guard["kernel"] == kernel and guard["cause"] == hvd_kernel.BUILD_FAILED
    assert guard["log_tail"] == make_log.splitlines()[-20:]
    assert any("implicit declaration of function ‘sys_close’" in line for line in guard["log_tail"])
    assert guard["dkms"] is None  # only "added": no entry for that kernel
    assert guard["message"] == (f"next boot kernel {kernel} has no NVIDIA module (nvidia, nvidia-modeset, "
                                f"nvidia-uvm): DKMS build failed (/var/lib/dkms/nvidia/465.19.01: make.log)")


def test_a_kernel_dkms_never_built_for_says_how_to_build_it(node: Path) -> None:
    add_headers(node, NEW)
    add_modules(node, NEW, ("nvidia-uvm",))  # a stale file from another driver does not make it whole
    add_dkms(node, "nvidia", "535.86.05", OLD)
    guard = hvd_kernel.module_guard(str(node))
    assert guard["cause"] == hvd_kernel.NOT_BUILT and guard["missing"] == ["nvidia", "nvidia-modeset"]
    assert guard["message"] == (f"next boot kernel {NEW} has no NVIDIA module (nvidia, nvidia-modeset): not built "
                                f"(dkms install -m nvidia -v 535.86.05 -k {NEW})")


def test_dkms_status_output_given_by_the_caller_is_used_instead_of_the_tree(tmp_path: Path) -> None:
    kernel = "6.5.0-060500rc5-generic"
    write(tmp_path, f"/boot/vmlinuz-{kernel}", b"MZ")
    add_modules(tmp_path, kernel)
    guard = hvd_kernel.module_guard(str(tmp_path), dkms_text=fixture("dkms-status_nvidia-535.86.05_installed.txt"))
    assert guard["cause"] is None and guard["how"] == "no /boot/grub/grub.cfg: the newest kernel in /boot"
    assert guard["dkms"] == {"module": "nvidia", "version": "535.86.05", "kernel": kernel, "arch": "x86_64",
                             "state": "installed", "note": ""}


def test_a_node_without_any_kernel_image_cannot_pass(tmp_path: Path) -> None:
    guard = hvd_kernel.module_guard(str(tmp_path))
    assert guard["kernel"] is None and guard["cause"] == hvd_kernel.NOT_BUILT
    assert hvd_kernel.guard_item(guard) == "no kernel image in /boot"


# ------------------------------------------------------------------------------------------ nouveau


def test_nouveau_is_blacklisted_by_a_modprobe_d_conf_comments_aside(node: Path) -> None:
    assert hvd_kernel.nouveau_blacklisted(str(node)) is False
    write(node, "/etc/modprobe.d/admin.conf", "# blacklist nouveau\noptions nouveau modeset=0\n")
    write(node, "/etc/modprobe.d/old-blacklist", "blacklist nouveau\n")  # not a .conf: modprobe skips it
    assert hvd_kernel.nouveau_blacklisted(str(node)) is False
    write(node, "/lib/modprobe.d/nvidia-installer-disable-nouveau.conf", "blacklist nouveau  # the installer's\n")
    assert hvd_kernel.nouveau_blacklist_files(str(node)) == ["/lib/modprobe.d/nvidia-installer-disable-nouveau.conf"]
    write(node, "/etc/modprobe.d/nvidia-installer-disable-nouveau.conf", "options nouveau modeset=0\n")
    assert hvd_kernel.nouveau_blacklisted(str(node)) is False  # /etc's file of the same name masks /lib's


def test_the_initramfs_must_be_newer_than_the_blacklist(node: Path) -> None:
    assert hvd_kernel.initramfs_after_blacklist(str(node), NEW) is None
    conf = write(node, "/etc/modprobe.d/hvd-blacklist-nouveau.conf", "blacklist nouveau\noptions nouveau modeset=0\n")
    os.utime(conf, (2000, 2000))
    os.utime(node / f"boot/initrd.img-{NEW}", (1000, 1000))
    assert hvd_kernel.initramfs_after_blacklist(str(node), NEW) is False
    os.utime(node / f"boot/initrd.img-{NEW}", (3000, 3000))
    assert hvd_kernel.initramfs_after_blacklist(str(node), NEW) is True


def test_driver_nouveau_names_a_missing_blacklist_then_an_initramfs_that_predates_it(node: Path) -> None:
    """`check`'s driver.nouveau: the blacklist first, then the initramfs of the kernel booted next built after it; a
    kernel without an initramfs reads modprobe.d from its root file system, so it passes."""
    assert hvd_kernel.nouveau_item(str(node), NEW) == hvd_kernel.NOUVEAU_NOT_BLACKLISTED
    conf = write(node, "/etc/modprobe.d/hvd-blacklist-nouveau.conf", "blacklist nouveau\noptions nouveau modeset=0\n")
    os.utime(conf, (2000, 2000))
    os.utime(node / f"boot/initrd.img-{NEW}", (1000, 1000))
    assert hvd_kernel.nouveau_item(str(node), NEW) == (
        f"the initramfs of {NEW} predates the nouveau blacklist (update-initramfs -u -k {NEW})")
    os.utime(node / f"boot/initrd.img-{NEW}", (3000, 3000))
    assert hvd_kernel.nouveau_item(str(node), NEW) == "ok"
    (node / f"boot/initrd.img-{NEW}").unlink()
    assert hvd_kernel.nouveau_item(str(node), NEW) == "ok"
    conf.write_text("# blacklist nouveau\n")  # edited away: the comment does not count
    assert hvd_kernel.nouveau_item(str(node), NEW) == hvd_kernel.NOUVEAU_NOT_BLACKLISTED
