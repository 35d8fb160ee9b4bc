"""plugins/module_utils/hvd_kernel.py's readers of command output (``dkms status``, ``dkms install``, DKMS's make.log)
over the project's own fixtures.

test_hvd_kernel.py asserts the same on real recorded outputs (../shared/fixtures-gpu), an extra layer skipped where
that folder is absent; these are ours (tests/unit/plugins/fixtures/gpu, written in dkms(8)'s and nvidia-smi's
documented formats, its README.md says what each stands for), so every path runs in any checkout and under
ansible-test units. The node trees are kernel_tree.py's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.hvd.cluster.tests.unit.plugins.module_utils.kernel_tree import NEW, add_headers, add_modules
# a fixture: the tests below ask for it by name
from ansible_collections.hvd.cluster.tests.unit.plugins.module_utils.kernel_tree import node  # noqa: F401
from ansible_collections.hvd.cluster.tests.unit.plugins.support import link, own_gpu_fixture, write

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_kernel


DKMS_STATUS = "dkms-status_dkms3_nvidia-550.144.03_installed.txt"
MAKE_LOG = "dkms-make.log_nvidia-470.223.02_kernel-6.5.0-14-generic_FAIL-implicit-declaration.txt"
FAILED_KERNEL = "6.5.0-14-generic"


def fixture(name: str) -> str:
    return own_gpu_fixture(name).read_text(encoding="utf-8")


def test_dkms_status_of_dkms_3() -> None:
    entries = hvd_kernel.dkms_status(fixture(DKMS_STATUS))
    assert entries == [
        {"module": "nvidia", "version": "550.144.03", "kernel": "6.8.0-49-generic", "arch": "x86_64",
         "state": "installed", "note": ""},
        {"module": "zfs", "version": "2.2.2", "kernel": "6.8.0-49-generic", "arch": "x86_64", "state": "installed",
         "note": ""}]
    assert [hvd_kernel.is_nvidia_dkms(e["module"]) for e in entries] == [True, False]


@pytest.mark.parametrize("name", ["nvidia-smi_FAIL-couldnt-communicate_then-dkms-install-without-headers.txt",
                                  "dkms-install_nvidia-470.223.02_FAIL-bad-return-status_kernel-6.5.0-14.txt",
                                  "dkms-install_nvidia-450.248.02_FAIL-build-exclusive_kernel-6.8.0-49.txt"])
def test_dkms_errors_and_other_output_are_no_status_lines(name: str) -> None:
    text = fixture(name)
    assert "dkms" in text and hvd_kernel.dkms_status(text) == []


def test_the_make_log_tail_is_the_kernels_own_log_else_the_build_log_about_it(node: Path) -> None:
    make_log = fixture(MAKE_LOG)
    write(node, "/var/lib/dkms/nvidia/470.223.02/build/make.log", make_log)
    tail = hvd_kernel.dkms_make_log_tail(str(node), "nvidia", "470.223.02", FAILED_KERNEL, lines=3)
    assert tail == make_log.splitlines()[-3:]
    assert tail[-1] == "make: *** [Makefile:82: modules] Error 2"
    assert hvd_kernel.dkms_make_log_tail(str(node), "nvidia", "470.223.02", NEW) == []  # that log is about another kernel
    write(node, f"/var/lib/dkms/nvidia/470.223.02/{NEW}/x86_64/log/make.log", "line 1\nline 2\nline 3\n")
    assert hvd_kernel.dkms_make_log_tail(str(node), "nvidia", "470.223.02", NEW, lines=2) == ["line 2", "line 3"]
    assert hvd_kernel.dkms_make_log_tail(str(node), "nvidia", "470.223.02", NEW, lines=0) == []


def test_a_failed_dkms_build_is_named_with_the_end_of_its_make_log(tmp_path: Path) -> None:
    """The kernel and make.log of our failed build (a driver too old for a newer kernel), on a node without GRUB."""
    make_log = fixture(MAKE_LOG)
    node = tmp_path
    write(node, "/boot/vmlinuz-6.2.0-39-generic", b"MZ")
    write(node, f"/boot/vmlinuz-{FAILED_KERNEL}", b"MZ")
    add_headers(node, FAILED_KERNEL)
    link(node, "/var/lib/dkms/nvidia/470.223.02/source", "/usr/src/nvidia-470.223.02")
    write(node, "/var/lib/dkms/nvidia/470.223.02/build/make.log", make_log)
    guard = hvd_kernel.module_guard(str(node))
    assert guard["kernel"] == FAILED_KERNEL and guard["cause"] == hvd_kernel.BUILD_FAILED
    assert guard["log_tail"] == make_log.splitlines()[-20:]
    assert any("implicit declaration of function ‘acpi_bus_get_device’" in line for line in guard["log_tail"])
    assert guard["dkms"] is None  # only "added": no entry for that kernel
    assert guard["message"] == (f"next boot kernel {FAILED_KERNEL} has no NVIDIA module (nvidia, nvidia-modeset, "
                                f"nvidia-uvm): DKMS build failed (/var/lib/dkms/nvidia/470.223.02: make.log)")
    assert hvd_kernel.guard_item(guard) == (f"{FAILED_KERNEL} has no NVIDIA module (nvidia, nvidia-modeset, nvidia-uvm): "
                                            "DKMS build failed")


def test_dkms_status_output_given_by_the_caller_is_used_instead_of_the_tree(tmp_path: Path) -> None:
    kernel = "6.8.0-49-generic"
    write(tmp_path, f"/boot/vmlinuz-{kernel}", b"MZ")
    add_modules(tmp_path, kernel)
    guard = hvd_kernel.module_guard(str(tmp_path), dkms_text=fixture(DKMS_STATUS))
    assert guard["cause"] is None and guard["how"] == "no /boot/grub/grub.cfg: the newest kernel in /boot"
    assert guard["dkms"] == {"module": "nvidia", "version": "550.144.03", "kernel": kernel, "arch": "x86_64",
                             "state": "installed", "note": ""}
    assert hvd_kernel.guard_item(guard) == "ok"
