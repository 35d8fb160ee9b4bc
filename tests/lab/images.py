"""Node images for the labs, built locally (no registry): the bare Debian 12 node with sshd (tests/images/build.sh),
the site's golden image holding the roles' distro packages, the image being built that holds a kernel and its
headers; and ``docker``, the one way the labs run the Docker CLI."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]  # tests/: its images/build.sh; the roles beside it
IMAGE = os.environ.get("HVD_NODE_IMAGE", "hvdcluster/node:debian12")
# The bare node plus the distro packages hvd_base and hvd_openmpi install, not held: a site's golden image. Suites
# whose subject is not the first install (training, fan-out, conda, molecule horovod/gpu/conda) start from it; the
# roles still hold, pin and read them back. The bare image stays for test_up, the bundle, the defaults and the demo.
PACKAGED_IMAGE = IMAGE + "-packages"
# The bare node plus a kernel image and its headers (Debian's own packages), as an image being built holds them:
# molecule/driver's node, where DKMS builds the NVIDIA modules for that kernel.
KERNEL_IMAGE = IMAGE + "-kernel"
# zstd: initramfs-tools recommends it (Debian 12 compresses the initramfs with it), so an installed machine has it;
# without it (the lab installs no recommends) every initramfs falls back to gzip, about a third slower here.
KERNEL_PACKAGES = ["linux-image-amd64", "linux-headers-amd64", "zstd"]
LABEL = "hvdcluster.lab"


def docker(*args: str, check: bool = True) -> str:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def build_image() -> None:
    subprocess.run([str(TESTS / "images" / "build.sh")], check=True)


def role_packages() -> list[str]:
    """The distro packages hvd_base and hvd_openmpi install by default, read from the roles' own defaults."""
    import yaml  # noqa: PLC0415 - the venv's (tests/setup.sh); `python -m tests.lab up` (the demo) never needs it

    roles = TESTS.parent / "roles"
    base = yaml.safe_load((roles / "hvd_base" / "defaults" / "main.yml").read_text())["hvd_base_packages"]
    mpi = yaml.safe_load((roles / "hvd_openmpi" / "defaults" / "main.yml").read_text())["hvd_openmpi_packages"]
    return [*base, *mpi]


def _build_variant(variant: str, packages: list[str]) -> str:
    """IMAGE-<variant>: the bare image plus ``packages``, and the bare image under it (tests/images/build.sh builds
    both and caches each by label)."""
    subprocess.run([str(TESTS / "images" / "build.sh")], check=True,
                   env={**os.environ, "HVD_NODE_PACKAGES": " ".join(packages), "HVD_NODE_VARIANT": variant})
    return f"{IMAGE}-{variant}"


def build_packaged_image() -> str:
    """PACKAGED_IMAGE (the roles' distro packages)."""
    return _build_variant("packages", role_packages())


def build_kernel_image() -> str:
    """KERNEL_IMAGE (a kernel image and its headers)."""
    return _build_variant("kernel", KERNEL_PACKAGES)


def host_ca_bundle() -> str | None:
    for candidate in (os.environ.get("PIP_CERT"), "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and Path(candidate).is_file():
            return candidate
    return None
