"""hvd_node_state's GPU stack and MPI items (the driver installed, loaded, given from outside; the next boot;
mpirun on the SSH path; nccl-tests), read from a fake root (real files in tmp_path, modules/node_tree.py).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from ansible_collections.hvd.cluster.tests.unit.plugins.modules.node_tree import look
# a fixture: the tests below ask for it by name
from ansible_collections.hvd.cluster.tests.unit.plugins.modules.node_tree import node  # noqa: F401
from ansible_collections.hvd.cluster.tests.unit.plugins.support import write

from ansible_collections.hvd.cluster.plugins.modules import hvd_tree
from ansible_collections.hvd.cluster.plugins.module_utils import hvd_driver, hvd_state_stack


# ------------------------------------------------------------------------------------------ GPU stack and MPI


def test_a_swapped_nccl_header_shows_although_the_fact_was_not_rewritten(node: Path) -> None:
    write(node, "/opt/nccl/include/nccl.h", "#define NCCL_MAJOR 2\n#define NCCL_MINOR 21\n#define NCCL_PATCH 5\n")
    state = look(node)
    assert state["nccl.version"] == "2.19.3" and state["nccl.header"] == "2.21.5"
    (node / "opt/nccl/include/nccl.h").unlink()
    assert look(node)["nccl.header"] == "absent"


def test_driver_loaded_reads_the_proprietary_module_line_too(node: Path) -> None:
    write(node, "/proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb\n")
    write(node, "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.14", b"")
    state = look(node)
    assert state["driver.loaded"] == "550.54.14" and state["driver.installed"] == "535.161.08,550.54.14"


def test_a_driver_mounted_from_outside_is_found_where_the_loader_is_configured_to_look(node: Path) -> None:
    """A container or VM given the host's driver (the workplace's GPU machine, 2026-11-26: NVML in
    /usr/local/nvidia/lib64, named by /etc/ld.so.conf.d, nothing under /usr/lib): `check` read "installed: absent"
    beside "loaded: 580.159.04". The loader's configuration, includes and all, is where the user space is."""
    write(node, "/proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu\n")
    for path in node.rglob("libnvidia-ml.so*"):
        path.unlink()
    write(node, "/usr/local/nvidia/lib64/libnvidia-ml.so.580.159.04", b"\x7fELF")
    os.symlink("libnvidia-ml.so.580.159.04", node / "usr/local/nvidia/lib64/libnvidia-ml.so.1")
    assert look(node)["driver.installed"] == "absent"
    write(node, "/etc/ld.so.conf", "# libc default\ninclude /etc/ld.so.conf.d/*.conf\n")
    write(node, "/etc/ld.so.conf.d/000_cuda.conf", "/usr/local/cuda/targets/x86_64-linux/lib\n")
    write(node, "/etc/ld.so.conf.d/nvidia.conf", "include nested.d/*.conf\n")  # relative: beside this file
    write(node, "/etc/ld.so.conf.d/nested.d/gpu.conf", "/usr/local/nvidia/lib64 /usr/local/nvidia/lib  # mounted\n")
    assert hvd_driver.loader_dirs(str(node)) == ["/usr/local/cuda/targets/x86_64-linux/lib", "/opt/openmpi-4.1.6/lib",
                                                 "/usr/local/nvidia/lib64", "/usr/local/nvidia/lib"]
    state = look(node)
    assert state["driver.installed"] == state["driver.loaded"] == "580.159.04"


MOUNTINFO = """\
1180 1101 0:355 / / rw,relatime master:509 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/A
1183 1180 0:358 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
1201 1180 259:1 /var/lib/docker/containers/x/hosts /etc/hosts rw,relatime - ext4 /dev/nvme0n1p1 rw
{lines}"""


@pytest.mark.parametrize("mounted", ["/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.159.04", "/usr/local/nvidia"])
def test_a_driver_handed_into_a_container_is_read_as_given(node: Path, mounted: str) -> None:
    """The NVIDIA Container Toolkit mounts each library file of the host's driver into the container; other
    platforms mount a folder (the workplace's GPU machine: /usr/local/nvidia). Either way the library lies on a mount
    of its own: driver.given. Where it lies on the node's own system (its root, a separate /usr), it is not."""
    for path in node.rglob("libnvidia-ml.so*"):
        path.unlink()
    folder = "/usr/lib/x86_64-linux-gnu" if mounted.endswith(".04") else mounted + "/lib64"
    write(node, f"{folder}/libnvidia-ml.so.580.159.04", b"\x7fELF")
    write(node, "/etc/ld.so.conf", f"{folder}\n")
    line = f"1300 1180 259:1 /host{mounted} {mounted} ro,nosuid,nodev,relatime master:1 - ext4 /dev/nvme0n1p1 ro"
    write(node, "/proc/self/mountinfo", MOUNTINFO.format(lines=line + "\n"))
    state = look(node)
    assert state["driver.installed"] == state["driver.given"] == "580.159.04", state
    write(node, "/proc/self/mountinfo", MOUNTINFO.format(lines="1300 1180 259:2 / /usr rw - ext4 /dev/sda2 rw\n"))
    assert "driver.given" not in look(node)
    (node / "proc/self/mountinfo").unlink()
    assert "driver.given" not in look(node)


def test_mount_points_are_read_with_their_escapes_undone(node: Path) -> None:
    write(node, "/proc/self/mountinfo", MOUNTINFO.format(lines="9 1180 0:1 / /srv/a\\040b\\134c rw - tmpfs t rw\n"))
    assert hvd_driver.mount_points(str(node)) == ["/", "/proc", "/etc/hosts", "/srv/a b\\c"]


def test_the_mount_holding_a_path_is_the_longest_above_it_or_the_path_itself() -> None:
    points = ["/", "/usr", "/usr/local/nvidia", "/usr/lib/libnvidia-ml.so.1", "/usr/local/nv"]
    assert hvd_driver.holding_mount("/usr/local/nvidia/lib64/libnvidia-ml.so.1", points) == "/usr/local/nvidia"
    assert hvd_driver.holding_mount("/usr/lib/libnvidia-ml.so.1", points) == "/usr/lib/libnvidia-ml.so.1"
    assert hvd_driver.holding_mount("/usr/local/nvidia2/x", points) == "/usr"  # a name that only starts alike
    assert hvd_driver.holding_mount("/opt/x", []) == "/"


def test_debians_driver_behind_its_alternatives_links_is_read_by_the_file_they_lead_to(node: Path) -> None:
    """Debian's libnvidia-ml1 (non-free 535) puts the versioned library in nvidia/current/ and reaches it through
    /etc/alternatives: only libnvidia-ml.so.1 lies where the loader looks. Before, `check` read "absent" there (the
    role, with its own deeper search, did not; molecule driver and gpu caught the difference once both used one
    reader)."""
    for path in node.rglob("libnvidia-ml.so*"):
        path.unlink()
    lib = "/usr/lib/x86_64-linux-gnu"
    write(node, f"{lib}/nvidia/current/libnvidia-ml.so.535.216.01", b"\x7fELF")
    os.symlink("libnvidia-ml.so.535.216.01", node / f"{lib.lstrip('/')}/nvidia/current/libnvidia-ml.so.1")
    (node / "etc/alternatives").mkdir(parents=True, exist_ok=True)
    os.symlink(f"{lib}/nvidia/current/libnvidia-ml.so.1",
               node / "etc/alternatives/nvidia--libnvidia-ml.so.1-x86_64-linux-gnu")
    os.symlink("/etc/alternatives/nvidia--libnvidia-ml.so.1-x86_64-linux-gnu",
               node / f"{lib.lstrip('/')}/libnvidia-ml.so.1")
    assert look(node)["driver.installed"] == "535.216.01"
    (node / f"{lib.lstrip('/')}/nvidia/current/libnvidia-ml.so.535.216.01").unlink()  # a dangling link: none
    assert look(node)["driver.installed"] == "absent"


def kernel_mode_node(node: Path, kernel: str, modules: tuple[str, ...]) -> None:
    """The node as hvd_nvidia_driver leaves a GPU host: driver in kernel mode, ``kernel`` the only image in /boot
    (no GRUB: the newest boots), ``modules`` built for it, its headers there."""
    write(node, "/etc/ansible/facts.d/hvd_nvidia_driver.fact", json.dumps({"mode": "kernel", "gpu_count": "2"}))
    write(node, f"/boot/vmlinuz-{kernel}", b"MZ")
    write(node, f"/usr/src/linux-headers-{kernel}/Makefile", "")
    for name in modules:
        write(node, f"/lib/modules/{kernel}/updates/dkms/{name}.ko.xz", b"\x7fELF")


def test_next_boot_reads_ok_on_every_healthy_node_whatever_its_kernel(node: Path, tmp_path: Path) -> None:
    kernel_mode_node(node, "6.1.0-27-amd64", ("nvidia", "nvidia-modeset", "nvidia-uvm"))
    other = tmp_path / "other"
    kernel_mode_node(other, "6.1.0-28-amd64", ("nvidia", "nvidia-modeset", "nvidia-uvm"))
    assert look(node)["driver.next_boot"] == "ok"
    assert hvd_state_stack.driver_state(str(other))["driver.next_boot"] == "ok"


def test_next_boot_names_the_kernel_and_the_missing_module(node: Path) -> None:
    kernel_mode_node(node, "6.1.0-27-amd64", ("nvidia", "nvidia-modeset"))
    assert look(node)["driver.next_boot"] == "6.1.0-27-amd64 has no NVIDIA module (nvidia-uvm): not built"
    write(node, "/boot/vmlinuz-6.1.0-28-amd64", b"MZ")  # a kernel upgrade without its headers
    assert look(node)["driver.next_boot"] == ("6.1.0-28-amd64 has no NVIDIA module (nvidia, nvidia-modeset, "
                                              "nvidia-uvm): headers missing")


@pytest.mark.parametrize("mode", ["user-space", "skipped", None])
def test_next_boot_is_only_read_where_the_driver_runs_in_kernel_mode(node: Path, mode: str | None) -> None:
    kernel_mode_node(node, "6.1.0-27-amd64", ())
    fact = {"gpu_count": "0"} if mode is None else {"mode": mode, "gpu_count": "0"}
    write(node, "/etc/ansible/facts.d/hvd_nvidia_driver.fact", json.dumps(fact))
    assert "driver.next_boot" not in look(node)


def test_nouveau_is_read_only_where_the_driver_role_keeps_its_blacklist(node: Path) -> None:
    """driver.nouveau: absent where the fact says nothing of the blacklist (a fact written before the item, or the
    role's blacklist turned off); else the blacklist and the next boot kernel's initramfs built after it."""
    kernel_mode_node(node, "6.1.0-27-amd64", ("nvidia", "nvidia-modeset", "nvidia-uvm"))
    assert "driver.nouveau" not in look(node)
    fact = {"mode": "kernel", "gpu_count": "2", "blacklist_nouveau": True}
    write(node, "/etc/ansible/facts.d/hvd_nvidia_driver.fact", json.dumps(fact))
    assert look(node)["driver.nouveau"] == "nouveau not blacklisted (no modprobe.d file says blacklist nouveau)"
    conf = write(node, "/etc/modprobe.d/hvd-blacklist-nouveau.conf", "blacklist nouveau\n")
    initrd = write(node, "/boot/initrd.img-6.1.0-27-amd64", b"\x1f\x8b")
    os.utime(initrd, (1000, 1000))
    os.utime(conf, (2000, 2000))
    assert look(node)["driver.nouveau"] == ("the initramfs of 6.1.0-27-amd64 predates the nouveau blacklist "
                                            "(update-initramfs -u -k 6.1.0-27-amd64)")
    os.utime(initrd, (3000, 3000))
    assert look(node)["driver.nouveau"] == "ok"
    write(node, "/etc/ansible/facts.d/hvd_nvidia_driver.fact", json.dumps({**fact, "blacklist_nouveau": False}))
    assert "driver.nouveau" not in look(node)


def test_mpirun_is_the_first_on_the_ssh_path(node: Path) -> None:
    assert look(node, ssh_path="/usr/bin:/bin")["mpi.path"] == "absent"
    write(node, "/usr/bin/mpirun", "#!elf", 0o755)
    assert look(node)["mpi.path"] == "/opt/openmpi-4.1.6/bin/mpirun"  # /usr/local/bin comes first
    assert look(node, ssh_path="/usr/bin:/usr/local/bin")["mpi.path"] == "/usr/bin/mpirun"


def test_the_ssh_path_is_the_one_etc_environment_sets(node: Path) -> None:
    """pam_env gives SSH commands /etc/environment's PATH: the pre-flight's advice for a login-only mpirun."""
    write(node, "/opt/ompi/bin/mpirun", "#!elf", 0o755)
    assert look(node)["mpi.path"] == "/opt/openmpi-4.1.6/bin/mpirun"
    write(node, "/etc/environment", 'LANG=C.UTF-8\nPATH="/opt/ompi/bin:/usr/local/bin:/usr/bin:/bin"\n')
    assert look(node)["mpi.path"] == "/opt/ompi/bin/mpirun"
    assert look(node, ssh_path="/usr/local/bin")["mpi.path"] == "/opt/openmpi-4.1.6/bin/mpirun"  # given wins


def test_gpu_models_come_from_the_driver_when_nvidia_smi_cannot_say(node: Path) -> None:
    from ansible_collections.hvd.cluster.plugins.module_utils import hvd_host

    for bus, model in (("0000:17:00.0", "NVIDIA H100 80GB HBM3"), ("0000:65:00.0", "NVIDIA H100 80GB HBM3")):
        write(node, f"/proc/driver/nvidia/gpus/{bus}/information", f"Model: \t\t {model}\nIRQ:   42\n")
    seen = hvd_host.nvidia(str(node))
    assert seen["gpus"] == ["NVIDIA H100 80GB HBM3"] * 2 and seen["loaded"] == "535.161.08"
    assert seen["installed"] == ["535.161.08"] and seen["nouveau"] is False


# ------------------------------------------------------------------------------------------ nccl-tests


NCCL_TESTS = "/opt/hvd/nccl-tests"


NCCL_TESTS_BINARIES = ("all_reduce_perf", "all_gather_perf", "reduce_scatter_perf")


def install_nccl_tests(node: Path, tmp_path: Path, key: str = "ntkey789") -> Path:
    """nccl-tests as hvd_nccl_tests installs it: its packed tree unpacked by hvd_tree at the prefix (manifest, build
    key last), and its fact naming the prefix."""
    from ansible_collections.hvd.cluster.tests.unit.plugins.support import UNPACK, make_archive

    archive, digest = make_archive(tmp_path, {**{f"bin/{name}": f"\x7fELF {name}" for name in NCCL_TESTS_BINARIES},
                                              "share/doc/nccl-tests/LICENSE.txt": "BSD-3-Clause\n"})
    prefix = node / NCCL_TESTS.lstrip("/")
    hvd_tree.unpack(str(archive), digest, str(prefix), marker_content=key,
                    **{**UNPACK, "marker": hvd_state_stack.NCCL_TESTS_MARKER})
    write(node, "/etc/ansible/facts.d/hvd_nccl_tests.fact",
          json.dumps({"version": "2.19.6", "prefix": NCCL_TESTS, "key": key}))
    return prefix


def test_nccl_tests_reads_its_version_build_key_and_files_where_its_fact_names_the_prefix(node: Path,
                                                                                          tmp_path: Path) -> None:
    assert not [key for key in look(node) if key.startswith("nccl_tests.")]  # not installed: no item at all
    install_nccl_tests(node, tmp_path)
    state = look(node)
    assert {key: value for key, value in state.items() if key.startswith("nccl_tests.")} == {
        "nccl_tests.version": "2.19.6", "nccl_tests.key": "ntkey789", "nccl_tests.files": "ok"}
    assert look(node, sections=["components"])["nccl_tests.files"] == "ok"  # part of the components' section


def test_a_removed_nccl_tests_binary_is_named_missing_and_an_edited_one_changed(node: Path, tmp_path: Path) -> None:
    prefix = install_nccl_tests(node, tmp_path)
    (prefix / "bin" / "all_reduce_perf").unlink()
    assert look(node)["nccl_tests.files"] == "missing: bin/all_reduce_perf"
    target = prefix / "bin" / "all_gather_perf"
    before = target.stat()
    target.write_bytes(b"\x7fELF all_gather_pxrf")  # same size, new time
    assert look(node)["nccl_tests.files"] == "missing: bin/all_reduce_perf; changed: bin/all_gather_perf"
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))  # time put back: only the content tells
    assert look(node)["nccl_tests.files"] == "missing: bin/all_reduce_perf"
    assert look(node, deep=True)["nccl_tests.files"] == "missing: bin/all_reduce_perf; changed: bin/all_gather_perf"


def test_a_removed_nccl_tests_prefix_reads_absent_where_its_fact_still_names_it(node: Path, tmp_path: Path) -> None:
    prefix = install_nccl_tests(node, tmp_path)
    shutil.rmtree(prefix)
    state = look(node)
    assert (state["nccl_tests.key"], state["nccl_tests.files"]) == ("absent", "missing: .hvd-manifest")
    (node / "etc/ansible/facts.d/hvd_nccl_tests.fact").write_text('{"version": "2.19.6", "prefix": "relative/x"}')
    assert not [key for key in look(node) if key.startswith("nccl_tests.")]  # no absolute prefix named: none read
