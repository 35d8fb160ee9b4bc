"""plugins/module_utils/hvd_boot.py: the installed kernels and the one the next boot starts (GRUB's default, a
saved entry, grub-reboot's one-shot), read from real folder trees in tmp_path.

What a GPU node would add: a real DKMS build against real headers, a real reboot into the next kernel and
``modprobe nvidia`` there. None of that runs here (no GPU, no second kernel, no boot loader in a container), so
these tests build the trees those steps leave behind (/boot, grub.cfg, grubenv; kernel_tree.py's).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ansible_collections.hvd.cluster.tests.unit.plugins.module_utils.kernel_tree import (
    NEW, OLD, UUID, grub_cfg, grubenv_text,
)
# a fixture: the tests below ask for it by name
from ansible_collections.hvd.cluster.tests.unit.plugins.module_utils.kernel_tree import node  # noqa: F401
from ansible_collections.hvd.cluster.tests.unit.plugins.support import write

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_boot


# ------------------------------------------------------------------------------------------ kernels


def test_versions_sort_the_way_dpkg_sorts_them() -> None:
    # each pair as `dpkg --compare-versions a lt b` answers
    ordered = ["1.0~rc1", "1.0", "1.0a", "1.0+b1", "1.0.1", "1.2", "1.10"]
    assert sorted(reversed(ordered), key=hvd_boot.version_key) == ordered
    assert hvd_boot.version_key("6.1.0-9-amd64") < hvd_boot.version_key("6.1.0-13-amd64")
    assert hvd_boot.version_key("6.12~rc6-amd64") < hvd_boot.version_key("6.12-amd64")
    # dpkg splits the revision off at the last '-': upstream 6.5.0-060500rc5 is after 6.5.0-060500 (mainline
    # kernel builds sort their release candidates after the release, as GRUB's 10_linux does too)
    assert hvd_boot.version_key("6.5.0-060500rc5-generic") > hvd_boot.version_key("6.5.0-060500-generic")
    assert hvd_boot.version_key("1:5.10.0-1-amd64") > hvd_boot.version_key("6.1.0-27-amd64")


def test_versions_sort_as_dpkg_itself_answers() -> None:
    dpkg = shutil.which("dpkg")
    if dpkg is None:
        pytest.skip("no dpkg here to compare with (test_versions_sort_the_way_dpkg_sorts_them holds its answers)")
    versions = ["6.1.0-27-amd64", "6.1.0-9-amd64", "6.5.0-060500rc5-generic", "6.5.0-060500-generic",
                "6.12~rc6-amd64", "6.12-amd64", "6.12.0+bpo-amd64", "6.12.0~bpo12+1-amd64", "5.15.0-1048-nvidia",
                "5.15.0-105-generic", "6.8.0-45-generic", "6.8.0-45-generic-64k", "1:4.19.0-0.bpo.1-amd64"]
    for a in versions:
        for b in versions:
            lt = subprocess.run([dpkg, "--compare-versions", a, "lt", b], check=False).returncode == 0
            assert (hvd_boot.version_key(a) < hvd_boot.version_key(b)) == lt, (a, b)


def test_installed_kernels_are_the_images_in_boot_newest_last(tmp_path: Path) -> None:
    for kernel in ("6.1.0-27-amd64", "5.10.0-28-amd64", "6.1.0-9-amd64", "6.12~rc6-amd64", "6.1.0-13-amd64"):
        write(tmp_path, f"/boot/vmlinuz-{kernel}", b"MZ")
    write(tmp_path, "/boot/initrd.img-6.13.0-1-amd64", b"")  # an initramfs without its image is no kernel
    write(tmp_path, "/boot/vmlinuz-6.1.0-9-amd64.dpkg-tmp", b"")
    assert hvd_boot.installed_kernels(str(tmp_path)) == ["5.10.0-28-amd64", "6.1.0-9-amd64", "6.1.0-13-amd64",
                                                         "6.1.0-27-amd64", "6.12~rc6-amd64"]
    assert hvd_boot.installed_kernels(str(tmp_path / "empty")) == []


# ------------------------------------------------------------------------------------------ GRUB


def test_the_menu_of_a_debian_grub_cfg() -> None:
    menu = hvd_boot.grub_menu(grub_cfg())
    assert [(i["kind"], i["title"], i["kernel"]) for i in menu] == [
        ("menuentry", "Debian GNU/Linux", NEW), ("submenu", "Advanced options for Debian GNU/Linux", None),
        ("menuentry", "UEFI Firmware Settings", None)]
    assert [(i["id"], i["kernel"]) for i in menu[1]["entries"]] == [
        (f"gnulinux-{NEW}-advanced-{UUID}", NEW), (f"gnulinux-{NEW}-recovery-{UUID}", NEW),
        (f"gnulinux-{OLD}-advanced-{UUID}", OLD), (f"gnulinux-{OLD}-recovery-{UUID}", OLD)]


@pytest.mark.parametrize("default, kernel", [
    ("0", NEW),
    ("1>2", OLD),
    ("1>1", NEW),
    (f"gnulinux-advanced-{UUID}>gnulinux-{OLD}-advanced-{UUID}", OLD),
    (f"Advanced options for Debian GNU/Linux>Debian GNU/Linux, with Linux {OLD} (recovery mode)", OLD),
    ("Debian GNU/Linux", NEW),
    (f"gnulinux-simple-{UUID}", NEW),
])
def test_grubs_default_is_resolved_by_index_path_title_and_id(node: Path, default: str, kernel: str) -> None:
    write(node, "/etc/default/grub", f'GRUB_DEFAULT="{default}"\n')
    write(node, "/boot/grub/grub.cfg", grub_cfg(default))
    found = hvd_boot.next_boot_kernel(str(node))
    assert found["version"] == kernel
    assert found["how"].startswith("grub.cfg default")


def test_a_saved_default_is_grubenvs_saved_entry_and_grub_reboot_wins(node: Path) -> None:
    write(node, "/etc/default/grub", "GRUB_DEFAULT=saved\nGRUB_SAVEDEFAULT=false\n")
    write(node, "/boot/grub/grub.cfg", grub_cfg("saved"))
    write(node, "/boot/grub/grubenv",
          grubenv_text(saved_entry=f"Advanced options for Debian GNU/Linux>Debian GNU/Linux, with Linux {OLD}"))
    assert hvd_boot.next_boot_kernel(str(node)) == {
        "version": OLD, "how": f"grubenv saved_entry (GRUB_DEFAULT=saved): 'Debian GNU/Linux, with Linux {OLD}'"}
    write(node, "/boot/grub/grubenv", grubenv_text(saved_entry="1>2", next_entry="0"))
    found = hvd_boot.next_boot_kernel(str(node))
    assert found["version"] == NEW and found["how"].startswith("grubenv next_entry (grub-reboot, one-shot)")


def test_a_default_that_names_a_removed_kernel_boots_the_first_entry(node: Path) -> None:
    write(node, "/boot/grub/grub.cfg", grub_cfg("saved"))
    write(node, "/boot/grub/grubenv", grubenv_text(saved_entry="1>Debian GNU/Linux, with Linux 6.1.0-9-amd64"))
    found = hvd_boot.next_boot_kernel(str(node))
    assert found["version"] == NEW
    assert "'1>Debian GNU/Linux, with Linux 6.1.0-9-amd64' names no entry: GRUB boots the first" in found["how"]


def test_a_default_entry_without_a_linux_image_falls_back_to_the_newest_kernel(node: Path) -> None:
    write(node, "/boot/grub/grub.cfg", grub_cfg("uefi-firmware"))
    write(node, "/boot/vmlinuz-6.1.0-28-amd64", b"MZ")  # installed, update-grub not run yet
    found = hvd_boot.next_boot_kernel(str(node))
    assert found["version"] == "6.1.0-28-amd64"
    assert found["how"].endswith("it boots no Linux image: the newest kernel in /boot")


def test_without_grub_cfg_the_newest_kernel_boots(node: Path) -> None:
    (node / "boot/grub/grub.cfg").unlink()
    assert hvd_boot.next_boot_kernel(str(node)) == {"version": NEW,
                                                    "how": "no /boot/grub/grub.cfg: the newest kernel in /boot"}


def test_an_unreadable_grub_cfg_is_said_so(node: Path) -> None:
    cfg = node / "boot/grub/grub.cfg"
    cfg.unlink()
    cfg.mkdir()  # unreadable as a file, for root too
    assert hvd_boot.next_boot_kernel(str(node)) == {
        "version": NEW, "how": "/boot/grub/grub.cfg is not readable: the newest kernel in /boot"}


def test_grub_default_comes_from_the_last_grub_d_file_when_grub_cfg_sets_none(node: Path) -> None:
    write(node, "/boot/grub/grub.cfg", grub_cfg().replace('   set default="0"\n', ""))
    write(node, "/etc/default/grub.d/10-hvd.cfg", 'GRUB_DEFAULT="1>2"\n')
    write(node, "/etc/default/grub.d/05-first.cfg", "GRUB_DEFAULT=0\n")
    assert hvd_boot.grub_default_setting(str(node)) == ("1>2", "/etc/default/grub.d/10-hvd.cfg")
    found = hvd_boot.next_boot_kernel(str(node))
    assert found["version"] == OLD and found["how"].startswith("GRUB_DEFAULT in /etc/default/grub.d/10-hvd.cfg")


def test_grub_cfg_wins_over_an_edit_update_grub_has_not_applied(node: Path) -> None:
    write(node, "/etc/default/grub", "export GRUB_DEFAULT='1>2'  # the old kernel\n")
    found = hvd_boot.next_boot_kernel(str(node))
    assert found["version"] == NEW
    assert "(/etc/default/grub says '1>2': update-grub has not run since)" in found["how"]


def test_a_separate_boot_partition_names_the_image_without_boot(node: Path) -> None:
    write(node, "/boot/grub/grub.cfg", grub_cfg("1>2").replace("/boot/vmlinuz-", "/vmlinuz-"))
    assert hvd_boot.next_boot_kernel(str(node))["version"] == OLD
