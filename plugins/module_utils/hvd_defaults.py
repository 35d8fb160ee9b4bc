"""The defaults several parts share, written once: the roles read them through the ``hvd.cluster.hvd_default`` lookup
(plugins/lookup/hvd_default.py), the modules and the ``hvdcluster`` command import them. Standard library only."""

from __future__ import annotations

import os
from collections.abc import Mapping

# The Python environment's prefix: the same absolute path on every node (horovodrun starts its helpers by it).
ENV_PREFIX = "/opt/hvd/env"
# The login user's folder on each node that keeps the copies of artifacts (env, wheel, builds) peers pull from.
ARTIFACT_DIR = "~/.cache/hvdcluster/artifacts"
# On each node: the job leases of `hvdcluster run` and the roll marks of `up --rolling` (tmpfs, mode 1777; hvd_base).
RUN_DIR = "/run/hvdcluster"
# The controller cache (built envs, wheels and Open MPI builds, the bundle's apt archive): $HVDCLUSTER_CACHE, else
# ~/.cache/hvdcluster of the user who runs the converge.
CACHE_VARIABLE = "HVDCLUSTER_CACHE"
# NVIDIA's PCI vendor id, as sysfs writes it (/sys/bus/pci/devices/*/vendor): how every part finds an NVIDIA device
# on the bus (the host look, the fabric plan, hvd_nvidia_driver's look for a GPU).
NVIDIA_PCI_VENDOR = "0x10de"


def controller_cache(environ: Mapping[str, str] | None = None) -> str:
    """The controller cache folder for this environment (``os.environ`` when None)."""
    environ = os.environ if environ is None else environ
    home = environ.get("HOME") or os.path.expanduser("~")
    return environ.get(CACHE_VARIABLE) or os.path.join(home, ".cache", "hvdcluster")


_FIXED = {"env_prefix": ENV_PREFIX, "artifact_dir": ARTIFACT_DIR, "run_dir": RUN_DIR,
          "nvidia_pci_vendor": NVIDIA_PCI_VENDOR}
NAMES = (*_FIXED, "controller_cache")  # what the lookup answers


def value(name: str, environ: Mapping[str, str] | None = None) -> str:
    """One shared default by its name (one of NAMES); KeyError for another name."""
    return controller_cache(environ) if name == "controller_cache" else _FIXED[name]
