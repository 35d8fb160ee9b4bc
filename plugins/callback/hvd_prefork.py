# Copyright: hvdcluster developers
# Apache-2.0 (see galaxy.yml)
from __future__ import annotations

DOCUMENTATION = r"""
name: hvd_prefork
author: hvdcluster developers (@hvdcluster)
type: aggregate
short_description: Load hvd.cluster's controller-side plugins and compiled templates once, before Ansible forks its workers
description:
  - Ansible runs every task of every host in a worker process forked from ansible-playbook, and a worker's imports
    end with it. A collection's Python is compiled from source by Ansible's collection loader, which keeps no byte
    cache, so without this every worker compiled the action, filter and lookup plugins its task touched, and a light
    run's action the module it checks the arguments against, anew.
  - At the start of a playbook this imports those once in ansible-playbook itself, so every worker forked after it
    has them. It changes no result, prints nothing and reads no variable; a file that cannot be imported is left to
    the task that needs it, which reports the error as before.
  - It also installs the byte cache of compiled templates (plugins/plugin_utils/hvd_jinja_cache.py). Ansible compiles
    a template every time a worker renders it; the cache keeps the compiled code in the controller cache
    (E(HVDCLUSTER_CACHE), else C(~/.cache/hvdcluster)), loaded here once for every worker. E(HVDCLUSTER_JINJA_CACHE=off)
    turns it off.
  - Enabled by the collection's ansible.cfg (callbacks_enabled); a run without it is only slower.
requirements:
  - enabled in the callbacks_enabled setting
"""

import importlib
from pathlib import Path

from ansible.plugins.callback import CallbackBase

PACKAGE = "ansible_collections.hvd.cluster.plugins"
PLUGINS = Path(__file__).resolve().parent.parent
# Controller-side plugin kinds: the workers import each file of these they use. Modules are imported only where a
# light action checks its arguments against their ARGUMENT_SPEC on the controller (plugins/plugin_utils/hvd_light.py).
KINDS = ("plugin_utils", "action", "filter", "lookup")


def _import(name: str):
    try:
        return importlib.import_module(name)
    except Exception:  # noqa: BLE001 - the task that uses it reports the error, as without this plugin
        return None


def warm() -> list[str]:
    """Import the collection's controller-side plugins into this process; the dotted names imported."""
    done = []
    for kind in KINDS:
        for path in sorted((PLUGINS / kind).glob("hvd_*.py")):
            if _import(f"{PACKAGE}.{kind}.{path.stem}") is not None:
                done.append(f"{kind}.{path.stem}")
    light = _import(f"{PACKAGE}.plugin_utils.hvd_light")
    if light is None:
        return done
    for path in sorted((PLUGINS / "action").glob("hvd_*.py")):
        action = _import(f"{PACKAGE}.action.{path.stem}")
        plugin = getattr(action, "ActionModule", None)
        if (isinstance(plugin, type) and issubclass(plugin, light.LightRunner)
                and (PLUGINS / "modules" / path.name).is_file()):
            if _import(f"{PACKAGE}.modules.{path.stem}") is not None:
                light.sources(path.stem)  # the sources a light run sends, read once here too
                done.append(f"modules.{path.stem}")
    return done


class CallbackModule(CallbackBase):
    """Imports once in ansible-playbook what each forked worker would compile again."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "hvd.cluster.hvd_prefork"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook):
        cache = _import(f"{PACKAGE}.plugin_utils.hvd_jinja_cache")
        defaults = _import(f"{PACKAGE}.module_utils.hvd_defaults")
        if cache is not None and defaults is not None:
            folder = cache.install(defaults.controller_cache())
            self._display.vvv(f"hvd_prefork: compiled templates {'from ' + str(folder) if folder else 'not cached'}")
        warm()
