#!/usr/bin/python
"""Ansible module: install and hold Debian packages, and run apt only for what dpkg says is missing.

On a converged node the whole step is one read of dpkg's status file: no apt lists opened, no apt-get, no refresh
of the lists. Where a package is missing the lists are refreshed (when older than ``cache_valid_time``), apt-get
installs what is missing, and dpkg's selections hold what must be held; the result is read back with the same
reader ``hvdcluster check`` uses (plugins/module_utils/hvd_dpkg.py) and anything still missing or unheld fails the
task.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: hvd_packages
short_description: Install Debian packages and hold them, running apt only for what dpkg lacks
description:
  - Reads dpkg's status file. Items installed (and held, with I(hold)) are left alone without running apt at all.
  - Missing items are installed with one apt-get run (non-interactive, the configuration files kept as they are,
    waiting up to I(lock_timeout) seconds for another apt or dpkg to finish); before it, with I(update_cache), the
    lists are refreshed when older than I(cache_valid_time) seconds.
  - With I(hold), every item is held (dpkg's selection C(hold)); nothing is ever unheld. With I(guard) too,
    unattended-upgrades is kept off them (it upgrades behind the holds on some releases) - the file
    /etc/apt/apt.conf.d/51hvdcluster-<guard> lists each name in its Package-Blacklist, written (0644) only when
    its text differs, the same text hvd_base's C(unattended) entry point writes.
  - The result is read back from dpkg's status file; an item still missing or unheld fails the task.
  - Supports check mode (reports what it would install and hold).
options:
  name:
    description: The packages, each C(name), C(name:arch) or C(name=version) (an exact installed version). A plain
      name is also met by an installed package that provides it.
    type: list
    elements: str
    required: true
  hold:
    description: Hold every item, so no upgrade moves it.
    type: bool
    default: false
  guard:
    description: With I(hold), the role whose packages these are (it names the guard file); empty - no guard file.
    type: str
    default: ""
  update_cache:
    description: Refresh apt's lists before installing (only when something is missing), and once more when an
      install from lists younger than I(cache_valid_time) fails.
    type: bool
    default: true
  cache_valid_time:
    description: Lists younger than this many seconds are not refreshed (lists older than apt's sources or its
      configuration count as old); 0 refreshes them whenever something is installed.
    type: int
    default: 3600
  install_recommends:
    description: Also install the packages' recommendations.
    type: bool
    default: false
  lock_timeout:
    description: Seconds to wait for another apt or dpkg to release its lock.
    type: int
    default: 60
author: hvdcluster developers (@hvdcluster)
"""

EXAMPLES = r"""
- name: Install the distro's Open MPI and hold it
  hvd.cluster.hvd_packages:
    name: [openmpi-bin, libopenmpi-dev]
    hold: true
    guard: hvd_openmpi
"""

RETURN = r"""
installed:
  description: The items apt-get installed in this run (empty when none was missing).
  type: list
  elements: str
  returned: always
held:
  description: The items held in this run.
  type: list
  elements: str
  returned: always
versions:
  description: Each item -> its installed version as dpkg reads it after the run (several comma-joined).
  type: dict
  returned: always
cache_updated:
  description: Whether apt's lists were refreshed.
  type: bool
  returned: always
guard_written:
  description: Whether the guard file was written (or would be, in check mode).
  type: bool
  returned: always
"""

import os
import stat
import time

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_apt_conf import uu_guard
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_dpkg import parse_name, plan, stanzas
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import mtime, read_text, replace_file
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_module import AnsibleModule

ENV = {"DEBIAN_FRONTEND": "noninteractive", "DEBIAN_PRIORITY": "critical", "LC_ALL": "C"}
LISTS = ("/var/lib/apt/periodic/update-success-stamp", "/var/lib/apt/lists")
SOURCES = ("/etc/apt/sources.list", "/etc/apt/sources.list.d", "/etc/apt/apt.conf.d")


def mtimes(paths) -> list[float]:
    """The modification times of those of ``paths`` that exist (hvd_files.mtime)."""
    return [t for t in map(mtime, paths) if t is not None]


def lists_age() -> float:
    """Seconds since apt's lists were last refreshed (as apt's periodic stamp or the lists folder says); infinite
    when there are none, or when apt's sources or configuration changed after them (a repository added or taken out:
    an offline bundle's, say)."""
    refreshed = max(mtimes(LISTS), default=None)
    if refreshed is None:
        return float("inf")
    sources = list(SOURCES) + [os.path.join(folder, name) for folder in SOURCES[1:] if os.path.isdir(folder)
                               for name in os.listdir(folder)]
    if max(mtimes(sources), default=0) > refreshed:
        return float("inf")
    return time.time() - refreshed


def guard_differs(path: str, text: str) -> bool:
    """``path`` is not a root-owned 0644 regular file holding exactly ``text``."""
    try:
        info = os.lstat(path)
    except OSError:
        return True
    if not stat.S_ISREG(info.st_mode) or stat.S_IMODE(info.st_mode) != 0o644 or info.st_uid != 0:
        return True
    return read_text(path) != text


def last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("E:")]
    return (errors or lines or ["no output"])[-1]


ARGUMENT_SPEC = {
    "name": {"type": "list", "elements": "str", "required": True},
    "hold": {"type": "bool", "default": False},
    "guard": {"type": "str", "default": ""},
    "update_cache": {"type": "bool", "default": True},
    "cache_valid_time": {"type": "int", "default": 3600},
    "install_recommends": {"type": "bool", "default": False},
    "lock_timeout": {"type": "int", "default": 60},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    try:
        todo = plan(stanzas("/"), p["name"], p["hold"])
        guard = uu_guard(p["guard"], [parse_name(item) for item in p["name"]]) if p["hold"] and p["guard"] else None
    except ValueError as error:
        module.fail_json(msg=f"hvd_packages: {error}")
    stale = guard is not None and guard_differs(*guard)
    result = {"installed": todo["install"], "held": todo["hold"], "versions": todo["versions"], "cache_updated": False,
              "guard_written": stale}
    if not todo["install"] and not todo["hold"] and not stale:
        module.exit_json(changed=False, **result)
    if module.check_mode:
        module.exit_json(changed=True, **result)
    if stale:
        try:
            replace_file(*guard)
        except OSError as error:
            module.fail_json(msg=f"hvd_packages: cannot write {guard[0]}: {error}")

    lock = f"DPkg::Lock::Timeout={p['lock_timeout']}"

    def update() -> None:
        rc, out, err = module.run_command(["apt-get", "update", "-q", "-o", lock], environ_update=ENV)
        if rc != 0:
            module.fail_json(msg=f"hvd_packages: apt-get update failed (rc {rc}): {last_line(err or out)}",
                             stdout=out, stderr=err)
        result["cache_updated"] = True

    if todo["install"]:
        if p["update_cache"] and lists_age() >= p["cache_valid_time"]:
            update()
        cmd = ["apt-get", "install", "-y", "-q", "-o", lock,
               "-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold"]
        if not p["install_recommends"]:
            cmd.append("--no-install-recommends")
        rc, out, err = module.run_command(cmd + todo["install"], environ_update=ENV)
        if rc != 0 and p["update_cache"] and not result["cache_updated"]:  # lists young but stale: refresh once
            update()
            rc, out, err = module.run_command(cmd + todo["install"], environ_update=ENV)
        if rc != 0:
            module.fail_json(msg=f"hvd_packages: apt-get install {' '.join(todo['install'])} failed (rc {rc}): "
                                 f"{last_line(err or out)}", stdout=out, stderr=err)
        if p["hold"]:  # what was just installed is held too
            result["held"] = plan(stanzas("/"), p["name"], True)["hold"]
    if result["held"]:
        data = "".join(f"{name} hold\n" for name in result["held"])
        rc, out, err = module.run_command(["dpkg", "--set-selections"], data=data, environ_update=ENV)
        if rc != 0:
            module.fail_json(msg=f"hvd_packages: dpkg --set-selections failed (rc {rc}): {last_line(err or out)}")

    after = plan(stanzas("/"), p["name"], p["hold"])  # read back as check reads it
    left = [f"{item} not installed" for item in after["install"]] + [f"{item} not held" for item in after["hold"]]
    if guard is not None and guard_differs(*guard):
        left.append(f"{guard[0]} not as written")
    if left:
        module.fail_json(msg=f"hvd_packages: after apt-get and dpkg: {', '.join(left)}", **result)
    result["versions"] = after["versions"]
    module.exit_json(changed=True, **result)


if __name__ == "__main__":
    main()
