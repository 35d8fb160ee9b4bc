"""plugins/module_utils/hvd_apt_conf.py: unattended-upgrades' Package-Blacklist as apt reads it from every
apt.conf.d file, and the held packages it leaves unguarded (real files in tmp_path).
"""

from __future__ import annotations

from pathlib import Path

from ansible_collections.hvd.cluster.tests.unit.plugins.support import write

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_apt_conf


# ------------------------------------------------------------------------------------------ unattended-upgrades


DEBIAN_50UU = """\
// Unattended-Upgrade::Origins-Pattern controls which packages are
// upgraded.
Unattended-Upgrade::Origins-Pattern {
        "origin=Debian,codename=${distro_codename},label=Debian";
        "origin=Debian,codename=${distro_codename},label=Debian-Security";
};

// Python regular expressions, matching packages to exclude from upgrading
Unattended-Upgrade::Package-Blacklist {
    // The following matches all packages starting with linux-
//  "linux-";

    // Use $ to explicitely define the end of a package name. Without
    // the $, "libc6" would match all of them.
//  "libc6$";
//  "libc6-dev$";
};

// Split the upgrade into the smallest possible chunks so that
// they can be interrupted with SIGTERM.
//Unattended-Upgrade::MinimalSteps "false";
"""


OURS = """\
# Managed by hvdcluster: what the holds keep, unattended-upgrades keeps too.
Unattended-Upgrade::Package-Blacklist { "nvidia-"; "libnvidia-"; "libcuda1$"; /* CUDA: */ "cuda-"; };
Unattended-Upgrade {
  Package-Blacklist { "libcudnn9"; "libnccl"; };  // cuDNN and NCCL
};
Unattended-Upgrade::Package-Blacklist:: "firmware-nvidia-gsp";
Unattended-Upgrade::Package-Blacklist "not-a-list-item";
"""


DPKG = "".join(f"Package: {name}\nStatus: {status}\nArchitecture: amd64\nVersion: 1\n\n" for name, status in [
    ("nvidia-open", "hold ok installed"), ("libcuda1", "hold ok installed"), ("libcuda1-i386", "install ok installed"),
    ("cuda-toolkit-12-4", "hold ok installed"), ("libcudnn9-cuda-12", "hold ok installed"),
    ("libnccl2", "hold ok installed"), ("nvidia-cuda-dev", "install ok installed"),
    ("xserver-xorg-video-nvidia-legacy-390xx", "install ok installed"),
    ("linux-image-6.1.0-27-amd64", "install ok installed"), ("nvidia-driver", "deinstall ok config-files")])


def test_the_package_blacklist_is_the_union_of_every_apt_conf_d_file(tmp_path: Path) -> None:
    write(tmp_path, "/etc/apt/apt.conf.d/50unattended-upgrades", DEBIAN_50UU)
    assert hvd_apt_conf.uu_blacklist(str(tmp_path)) == []  # Debian's entries are all commented out
    write(tmp_path, "/etc/apt/apt.conf.d/51hvdcluster", OURS)
    write(tmp_path, "/etc/apt/apt.conf.d/52admin.conf", 'Unattended-Upgrade::Package-Blacklist { "linux-"; };\n')
    write(tmp_path, "/etc/apt/apt.conf.d/51hvdcluster.dpkg-old", 'Unattended-Upgrade::Package-Blacklist { "x"; };')
    write(tmp_path, "/etc/apt/apt.conf.d/has space", 'Unattended-Upgrade::Package-Blacklist { "y"; };')
    assert hvd_apt_conf.uu_blacklist(str(tmp_path)) == ["nvidia-", "libnvidia-", "libcuda1$", "cuda-", "libcudnn9", "libnccl",
                                                        "firmware-nvidia-gsp", "linux-"]


def test_a_later_clear_drops_the_guard(tmp_path: Path) -> None:
    write(tmp_path, "/etc/apt/apt.conf.d/51hvdcluster", OURS)
    write(tmp_path, "/etc/apt/apt.conf.d/99local", '#clear Unattended-Upgrade::Package-Blacklist;\n'
                                                   'unattended-upgrade::package-blacklist { "vim"; };\n')
    assert hvd_apt_conf.uu_blacklist(str(tmp_path)) == ["vim"]


def test_packages_the_blacklist_misses_are_named_matched_from_their_start(tmp_path: Path) -> None:
    write(tmp_path, "/var/lib/dpkg/status", DPKG)
    packages = ["nvidia-open", "libcuda1", "libcuda1-i386", "cuda-toolkit-12-4", "libcudnn9-cuda-12", "libnccl2:amd64",
                "nvidia-cuda-dev", "xserver-xorg-video-nvidia-legacy-390xx", "nvidia-driver", "not-installed"]
    assert hvd_apt_conf.uu_guard_missing(str(tmp_path), packages) == sorted(
        ["nvidia-open", "libcuda1", "libcuda1-i386", "cuda-toolkit-12-4", "libcudnn9-cuda-12", "libnccl2",
         "nvidia-cuda-dev", "xserver-xorg-video-nvidia-legacy-390xx"])
    write(tmp_path, "/etc/apt/apt.conf.d/51hvdcluster", OURS)
    # "libcuda1$" stops at the name's end; "nvidia-" must match at the name's start, not inside it
    missing = ["libcuda1-i386", "xserver-xorg-video-nvidia-legacy-390xx"]
    assert hvd_apt_conf.uu_guard_missing(str(tmp_path), packages) == missing
    write(tmp_path, "/etc/apt/apt.conf.d/52bad", 'Unattended-Upgrade::Package-Blacklist { "libcuda1-(" ; };\n')
    assert hvd_apt_conf.uu_guard_missing(str(tmp_path), packages) == missing  # a broken regex covers nothing
