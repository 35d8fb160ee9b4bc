"""The GPU fabric pieces a node needs, from the hardware it has (issue 25): persistence mode, ``nvidia-peermem`` and
Fabric Manager, each with the reason it is not needed where it is not. Plain file reads, nothing written.

- :func:`nvidia_pci`: the NVIDIA PCI functions (sysfs); :func:`gpus` and :func:`nvswitches` among them.
- :func:`rdma_devices`: the InfiniBand/RoCE adapters (``/sys/class/infiniband``); :func:`loaded_modules`.
- :func:`plan`: what the node gets, from those and the driver's mode (hvd_nvidia_driver: ``kernel`` on a machine,
  ``image`` for a golden image built without a device, ``user-space`` in a container, ``skipped`` without a GPU).
- :func:`state`: what the node has of each piece it gets (a unit enabled at boot, a module loaded at boot, the
  Fabric Manager package at the driver's exact version): the reader `check` uses (``driver.persistence``,
  ``driver.peermem``, ``driver.fabricmanager``), "ok" or what is wrong, in one line.

Every reader takes ``root``, the prefix the node's files are read under ("/" on a node; a fake root in tests).
Standard library only and Python 3.9 compatible (it runs on the nodes).
"""

from __future__ import annotations

import glob
import os
import re

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_defaults import NVIDIA_PCI_VENDOR
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import read_text, under

GPU_CLASSES = ("0x0300", "0x0302")  # VGA and 3D controllers; an NVIDIA audio function (0x0403) is no GPU
NVSWITCH_CLASS = "0x068000"  # PCI bridge, other: how an NVSwitch shows on the bus
PIECES = ("persistence", "peermem", "fabricmanager")
PERSISTENCED_UNIT = "nvidia-persistenced.service"
FABRICMANAGER_UNIT = "nvidia-fabricmanager.service"
PEERMEM_CONF = "/etc/modules-load.d/hvd-nvidia-peermem.conf"
_UNIT_DIRS = ("/etc/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system")
_FM_PACKAGE = re.compile(r"^nvidia-fabricmanager(?:-\d+)?$")
OK = "ok"


def nvidia_pci(root: str = "/") -> list[dict[str, str]]:
    """The NVIDIA PCI functions: address, class (0x030200 a GPU, 0x068000 an NVSwitch) and device id."""
    found = []
    for folder in sorted(glob.glob(os.path.join(glob.escape(under(root, "/sys/bus/pci/devices")), "*"))):
        if (read_text(os.path.join(folder, "vendor")) or "").strip().lower() != NVIDIA_PCI_VENDOR:
            continue
        found.append({"address": os.path.basename(folder),
                      "class": (read_text(os.path.join(folder, "class")) or "").strip().lower(),
                      "device": (read_text(os.path.join(folder, "device")) or "").strip().lower()})
    return found


def loaded_modules(root: str = "/") -> list[str] | None:
    """The names of the loaded kernel modules (/proc/modules), None when it cannot be read."""
    text = read_text(under(root, "/proc/modules"))
    if text is None:
        return None
    return [line.split()[0] for line in text.splitlines() if line.split()]


def gpus(pci: list[dict[str, str]]) -> list[str]:
    return [dev["address"] for dev in pci if str(dev.get("class", "")).startswith(GPU_CLASSES)]


def nvswitches(pci: list[dict[str, str]]) -> list[str]:
    return [dev["address"] for dev in pci if dev.get("class") == NVSWITCH_CLASS]


def rdma_devices(root: str = "/") -> list[str]:
    """The RDMA adapters the kernel knows (InfiniBand and RoCE alike): the names under /sys/class/infiniband."""
    folder = glob.escape(under(root, "/sys/class/infiniband"))
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(folder, "*")))


def _wanted(setting: object, found: bool, mode: str, absent: str, image: str) -> tuple[bool, str]:
    """One piece: ``setting`` "auto" (where ``found``), true or false; only where the driver has kernel modules."""
    word = str(setting).strip().lower()
    if mode not in ("kernel", "image"):
        return False, {"skipped": "no NVIDIA device", "user-space": "a container: the host runs it",
                       "host": "the driver is given from outside: whoever gives it runs it"}.get(
            mode, f"driver mode {mode}")
    if word in ("false", "no", "off", "0"):
        return False, "turned off"
    if word in ("true", "yes", "on", "1"):
        return True, "asked for"
    if mode == "image":
        return False, image
    return (True, "") if found else (False, absent)


def plan(pci: list[dict[str, str]], rdma: list[str], mode: str, persistence: object = "auto",
         peermem: object = "auto", fabricmanager: object = "auto") -> dict[str, dict[str, object]]:
    """What the node gets: ``{piece: {"wanted": bool, "why": str}}`` (``why``: the reason it is not wanted, or what
    asked for it). Persistence mode on every node with an NVIDIA GPU (and in a golden image: it costs nothing where
    the GPU is absent); nvidia-peermem where GPUs and RDMA adapters are both present (GPUDirect RDMA); Fabric Manager
    where NVSwitches are (without it CUDA cannot start there: error 802)."""
    has_gpu, has_rdma, has_switch = bool(gpus(pci)), bool(rdma), bool(nvswitches(pci))
    out = {}
    for piece, setting, found, absent, image in (
            ("persistence", persistence, has_gpu, "no NVIDIA GPU on the PCI bus", ""),
            ("peermem", peermem, has_gpu and has_rdma,
             "no InfiniBand/RoCE adapter (/sys/class/infiniband)" if has_gpu else "no NVIDIA GPU on the PCI bus",
             "an image cannot tell whether its machines have InfiniBand: hvd_nvidia_driver_peermem: true to add it"),
            ("fabricmanager", fabricmanager, has_switch, "no NVSwitch on the PCI bus (class 0x068000)",
             "an image cannot tell whether its machines have NVSwitches: hvd_nvidia_driver_fabricmanager: true")):
        wanted, why = _wanted(setting, found, mode, absent, image)
        if piece == "persistence" and mode == "image" and str(setting).strip().lower() == "auto":
            wanted, why = True, "a golden image for GPU machines"
        out[piece] = {"wanted": wanted, "why": why or ("found: " + {
            "persistence": "NVIDIA GPUs", "peermem": "NVIDIA GPUs and RDMA adapters",
            "fabricmanager": "NVSwitches"}[piece])}
    return out


def unit_enabled(root: str, unit: str) -> bool:
    """Whether systemd starts ``unit`` at boot: a link to it in some ``*.wants`` folder of /etc/systemd/system."""
    return bool(glob.glob(os.path.join(glob.escape(under(root, "/etc/systemd/system")), "*.wants", unit)))


def unit_known(root: str, unit: str) -> bool:
    return any(os.path.exists(os.path.join(under(root, d), unit)) for d in _UNIT_DIRS)


def fabricmanager_packages(status: list[tuple[str, str, str, bool, bool]]) -> dict[str, str]:
    """The installed Fabric Manager packages (name -> version) of dpkg's status rows (package, arch, version,
    installed, held)."""
    return {name: version for name, _arch, version, installed, _held in status if installed and _FM_PACKAGE.match(name)}


def state(root: str, wanted: dict[str, bool], driver: str, status: list[tuple[str, str, str, bool, bool]],
          modules: list[str] | None) -> dict[str, str]:
    """``driver.<piece>`` for each piece the node gets: "ok", or what is wrong in one line. ``driver``: the installed
    driver's version (Fabric Manager must be the same, to the last digit); ``status``: dpkg's rows; ``modules``: the
    loaded modules (None in an image: nothing is loaded there)."""
    out = {}
    if wanted.get("persistence"):
        out["driver.persistence"] = OK if unit_enabled(root, PERSISTENCED_UNIT) else (
            f"{PERSISTENCED_UNIT} not enabled at boot" if unit_known(root, PERSISTENCED_UNIT)
            else "nvidia-persistenced not installed")
    if wanted.get("peermem"):
        conf = read_text(under(root, PEERMEM_CONF)) or ""
        lines = [line.strip() for line in conf.splitlines() if line.strip() and not line.lstrip().startswith("#")]
        problems = [] if "nvidia-peermem" in lines else [f"not loaded at boot ({PEERMEM_CONF})"]
        if modules is not None and "nvidia_peermem" not in modules:
            problems.append("not loaded")
        out["driver.peermem"] = "; ".join(problems) or OK
    if wanted.get("fabricmanager"):
        found = fabricmanager_packages(status)
        versions = sorted({v.split("-", 1)[0] for v in found.values()})
        if not found:
            out["driver.fabricmanager"] = "Fabric Manager not installed"
        elif versions != [driver]:
            out["driver.fabricmanager"] = f"Fabric Manager {', '.join(versions)} with driver {driver or 'none'} " \
                                          "(they must match exactly)"
        elif not unit_enabled(root, FABRICMANAGER_UNIT):
            out["driver.fabricmanager"] = f"{FABRICMANAGER_UNIT} not enabled at boot"
        else:
            out["driver.fabricmanager"] = OK
    return out
