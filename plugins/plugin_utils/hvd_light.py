# Copyright: hvdcluster developers
# Apache-2.0 (see galaxy.yml)
"""Light runs of hvd.cluster's own modules: the module's code and the collection's module_utils it imports, sent to
the node's Python in one pipelined command, without Ansible's AnsiballZ payload.

Why: AnsiballZ's loader imports ``ansible.module_utils.basic`` from the zip it sends, compiled anew on every run (no
byte cache can be kept in a zip): about 0.2 s of the node's CPU a module run on the project's 2-core lab, most of what
a converged node's module runs cost (bench/README, "Our modules without AnsiballZ"). These modules need nothing of
Ansible's on the node but what plugins/module_utils/hvd_module.py stands in with.

What stays Ansible's: the arguments are checked on the controller by Ansible's ArgumentSpecValidator with the module's
own ARGUMENT_SPEC (a `type: path` value expanded on the node, as AnsibleModule does, never with the controller's home);
the interpreter is the one Ansible chose for the host (its configuration or discovery); the command is built,
become-wrapped and run as a pipelined module's is, with the task's environment; the result is parsed, cleaned and
its no_log values masked as a module's. Anything else runs the module as Ansible does: arguments the check refuses
(so the message is AnsibleModule's own), async tasks, delegation, pipelining off, an interpreter not yet discovered
(the first module run of a host discovers it), or ``hvd_light_modules: false`` in the host's variables."""

from __future__ import annotations

import base64
import importlib
import json
import re
import zlib
from pathlib import Path

from ansible.errors import AnsibleError
from ansible.executor.interpreter_discovery import InterpreterDiscoveryRequiredError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.parameters import remove_values
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible.vars.clean import remove_internal_keys

display = Display()

PACKAGE = "ansible_collections.hvd.cluster.plugins"
PLUGINS = Path(__file__).resolve().parent.parent
_FROM = re.compile(r"^[ \t]*from[ \t]+ansible_collections\.hvd\.cluster\.plugins\.module_utils(\.\w+)?[ \t]+import"
                   r"[ \t]+(?:\(([^)]*)\)|([\w, \t]+))", re.M)

# The node's side, before anything of the collection is imported: the sources served from memory to the import system.
BOOT = """\
import base64, importlib.abc, importlib.util, json, sys, zlib
_P = json.loads(zlib.decompress(base64.b64decode(_PAYLOAD)))
class _Sources(importlib.abc.MetaPathFinder, importlib.abc.InspectLoader):
    def __init__(self, sources):
        self.sources = sources
        self.packages = {n.rsplit(".", k)[0] for n in sources for k in range(1, n.count(".") + 1)}
    def find_spec(self, name, path=None, target=None):
        if name in self.sources or name in self.packages:
            return importlib.util.spec_from_loader(name, self, origin="hvd-light:" + name,
                                                   is_package=name in self.packages)
        return None
    def is_package(self, name):
        return name in self.packages
    def get_source(self, name):
        return self.sources.get(name, "")
    def get_code(self, name):
        return compile(self.get_source(name), "<hvd-light>/" + name.replace(".", "/") + ".py", "exec",
                       dont_inherit=True)
sys.meta_path.insert(0, _Sources(_P["sources"]))
from ansible_collections.hvd.cluster.plugins.module_utils import hvd_module
hvd_module.run_light(_P)
"""

_SOURCES: dict[str, dict[str, str]] = {}


def sources(module: str) -> dict[str, str]:
    """The module's source and every module_utils of the collection it imports, transitively, by dotted name (read
    once per process)."""
    if module not in _SOURCES:
        found: dict[str, str] = {}
        todo = [f"{PACKAGE}.modules.{module}"]
        while todo:
            name = todo.pop()
            if name in found:
                continue
            text = (PLUGINS / Path(*name[len(PACKAGE) + 1:].split("."))).with_suffix(".py").read_text(encoding="utf-8")
            found[name] = text
            for sub, grouped, names in _FROM.findall(text):
                names = grouped or names
                if sub:
                    todo.append(f"{PACKAGE}.module_utils{sub}")
                else:
                    todo.extend(f"{PACKAGE}.module_utils.{part.split()[0]}" for part in names.split(",")
                                if part.strip() and part.split()[0] != "as")
        found.setdefault(f"{PACKAGE}.module_utils.hvd_module",
                         (PLUGINS / "module_utils" / "hvd_module.py").read_text(encoding="utf-8"))
        _SOURCES[module] = found
    return _SOURCES[module]


def _as_text(spec: dict) -> dict:
    """``spec`` with every ``path`` type (and list element) made ``str``: the controller checks the value, the node
    expands it (hvd_module.LightModule)."""
    out = {}
    for name, option in spec.items():
        option = dict(option)
        if option.get("type") == "path":
            option["type"] = "str"
        if option.get("elements") == "path":
            option["elements"] = "str"
        if isinstance(option.get("options"), dict):
            option["options"] = _as_text(option["options"])
        out[name] = option
    return out


class LightRunner(ActionBase):
    """What an action needs to run its task's module light (see the module docstring): the module is the task's,
    checked against the ``ARGUMENT_SPEC`` (and ``ARGUMENT_CHECKS``: required_if and the like) its AnsibleModule takes.
    An action with work of its own (hvd_run, hvd_artifact) builds on this and calls :meth:`light_or_module`."""

    TRANSFERS_FILES = False

    def light_or_module(self, task_vars: dict) -> dict:
        """The task's module run light where it can be, else as Ansible runs it: its result."""
        light = self.run_light(task_vars)
        if light is not None:
            return light
        # a copy: Ansible adds its _ansible_* keys to the arguments it is given, and a loop's items share them
        return self._execute_module(module_name=f"hvd.cluster.{self.module_name}", module_args=dict(self._task.args),
                                    task_vars=task_vars)

    @property
    def module_name(self) -> str:
        return str(self._task.resolved_action or self._task.action).rsplit(".", 1)[-1]

    def _interpreter(self, task_vars: dict) -> str | None:
        """The host's Python as Ansible would run the module with it, or None where Ansible must discover it first
        (or its internals are not what this version of the collection knows)."""
        try:
            from ansible.executor.module_common import _get_shebang  # noqa: PLC0415 - Ansible's own choice of it

            shebang, dummy = _get_shebang("/usr/bin/python", task_vars, self._templar,
                                          remote_is_local=bool(getattr(self._connection, "_remote_is_local", False)))
        except InterpreterDiscoveryRequiredError as error:
            display.vvv(f"hvd_light: {self.module_name} run as a module: its run discovers the host's Python ({error})",
                        host=self._play_context.remote_addr)
            return None
        except (AnsibleError, ImportError, TypeError, ValueError, AttributeError, KeyError) as error:
            display.vvv(f"hvd_light: {self.module_name} run as a module: no interpreter from Ansible ({error!r})",
                        host=self._play_context.remote_addr)
            return None
        return shebang or None

    def run_light(self, task_vars: dict) -> dict | None:
        """The module's result from a light run, or None where the module is to run as Ansible runs it (at -vvv the
        log says why)."""
        why = self.not_light(task_vars)
        if why:
            display.vvv(f"hvd_light: {self.module_name} run as a module: {why}", host=self._play_context.remote_addr)
            return None
        validation = self.validate_spec()
        if validation is None:
            return None
        params, no_log = validation
        shebang = self._interpreter(task_vars)
        if shebang is None:
            return None
        payload = {"module": f"{PACKAGE}.modules.{self.module_name}", "params": params,
                   "sources": sources(self.module_name), "check_mode": bool(self._task.check_mode),
                   "diff": bool(self._task.diff)}
        packed = base64.b64encode(zlib.compress(json.dumps(payload).encode(), 1)).decode()
        program = f"_PAYLOAD = {packed!r}\n{BOOT}".encode()
        command = self._connection._shell.build_module_command(self._compute_environment_string(), shebang, "")
        self._used_interpreter = shebang
        display.vvv(f"hvd_light: {self.module_name} run light with {shebang[2:]} ({len(program)} bytes)",
                    host=self._play_context.remote_addr)
        done = self._low_level_execute_command(command.strip(), sudoable=True, in_data=program)
        data = self._parse_returned_data(done, "legacy")
        remove_internal_keys(data)
        for warning in data.pop("warnings", None) or []:
            display.warning(str(warning))
        preserved = {key: value for key, value in data.items() if value is None or isinstance(value, bool)}
        data = remove_values(data, no_log)
        data.update(preserved)
        for key in ("stdout", "stderr"):
            if key in data and f"{key}_lines" not in data:
                data[f"{key}_lines"] = (data.get(key) or "").splitlines()
        return data

    def not_light(self, task_vars: dict) -> str:
        """Why this task runs the module as Ansible does ('' where it can run light)."""
        if not boolean(self._templar.template(task_vars.get("hvd_light_modules", True)), strict=False):
            return "hvd_light_modules is off"
        if self._task.async_val:
            return "an async task"
        if self._task.delegate_to:
            return "a delegated task"
        if not self._is_pipelining_enabled("new"):
            return "pipelining is off"
        return ""

    def validate_spec(self) -> tuple[dict, set] | None:
        """The task's arguments checked against the module's spec (paths kept as written, for the node to expand) and
        the values that spec marks no_log; None where the check refuses them (the module's run says why, as always)."""
        module = importlib.import_module(f"{PACKAGE}.modules.{self.module_name}")
        validator = ArgumentSpecValidator(_as_text(module.ARGUMENT_SPEC), **getattr(module, "ARGUMENT_CHECKS", {}))
        checked = validator.validate(dict(self._task.args))
        if checked.error_messages:
            return None
        return checked.validated_parameters, set(checked._no_log_values)  # noqa: SLF001 - the values AnsibleModule hides


class LightAction(LightRunner):
    """The action of a module that is always run light where it can be: each such module's plugins/action/<module>.py
    is this class."""

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        result.update(self.light_or_module(task_vars or {}))
        return result
