# Copyright: hvdcluster developers
# Apache-2.0 (see galaxy.yml)
"""How an hvd.cluster module meets Ansible: `AnsibleModule` is Ansible's own, except in a light run.

Ansible runs a module through its AnsiballZ payload, whose loader imports ``ansible.module_utils.basic`` from the zip it
sends, compiled anew on every run: on the project's 2-core lab about 0.2 s of the node's CPU a module run, more than
most of these modules' own work (bench/README, "Our modules without AnsiballZ"). The modules whose action runs them
light (plugins/plugin_utils/hvd_light.py) are sent with only their own code and the collection's module_utils they
import, and this file's :class:`LightModule` stands in for AnsibleModule there: the arguments come validated by the
controller (Ansible's own ArgumentSpecValidator, with the same spec), and the module uses the few parts it always did
(``params``, ``check_mode``, ``_diff``, ``exit_json``, ``fail_json``, ``warn``, ``run_command``), which behave as
AnsibleModule's do. Standard library only: this file runs on the nodes."""

from __future__ import annotations

import grp
import json
import os
import pwd
import shlex
import stat
import subprocess
import sys
import traceback

# Set by run_light() (the light run's bootstrap): the validated arguments, check and diff mode.
LIGHT: dict | None = None


def AnsibleModule(argument_spec: dict, supports_check_mode: bool = False, **kwargs):  # noqa: N802 - AnsibleModule's name
    """Ansible's AnsibleModule, or in a light run the stand-in with the same arguments and behaviour."""
    if LIGHT is None:
        from ansible.module_utils.basic import AnsibleModule as Ansible  # noqa: PLC0415 - only outside a light run

        return Ansible(argument_spec=argument_spec, supports_check_mode=supports_check_mode, **kwargs)
    # the controller checked the arguments against argument_spec and these (the module's ARGUMENT_CHECKS)
    return LightModule(argument_spec, supports_check_mode, **LIGHT)


def _paths(spec: dict, params: dict) -> None:
    """Expand ``~`` and ``$VAR`` in the values of ``type: path`` options (elements and suboptions too), on the node, as
    AnsibleModule does: the controller validated them as plain strings, so that its own home is never used."""
    for name, option in spec.items():
        value = params.get(name)
        if value is None:
            continue
        kind, elements, sub = option.get("type"), option.get("elements"), option.get("options")
        if kind == "path" and isinstance(value, str):
            params[name] = os.path.expanduser(os.path.expandvars(value))
        elif kind == "list" and isinstance(value, list):
            if elements == "path":
                params[name] = [os.path.expanduser(os.path.expandvars(v)) if isinstance(v, str) else v for v in value]
            elif sub:
                for item in value:
                    if isinstance(item, dict):
                        _paths(sub, item)
        elif sub and isinstance(value, dict):
            _paths(sub, value)


def _jsonable(value):
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


class LightModule:
    """AnsibleModule's stand-in in a light run (see the module docstring)."""

    def __init__(self, argument_spec: dict, supports_check_mode: bool, params: dict, check_mode: bool = False,
                 diff: bool = False, name: str = "") -> None:
        self.argument_spec = argument_spec
        self.params = params
        self.check_mode = check_mode
        self._diff = diff
        self._name = name
        self._warnings: list[str] = []
        _paths(argument_spec, params)
        if check_mode and not supports_check_mode:
            self.exit_json(skipped=True, msg=f"remote module ({name}) does not support check mode")

    def warn(self, warning: str) -> None:
        self._warnings.append(str(warning))

    def _emit(self, result: dict, code: int):
        result.setdefault("invocation", {"module_args": self.params})
        _path_info(result)
        if self._warnings:
            result["warnings"] = self._warnings
        sys.stdout.write("\n" + json.dumps(result, default=_jsonable) + "\n")
        sys.stdout.flush()
        sys.exit(code)  # pylint: disable=ansible-bad-function  # this is exit_json and fail_json

    def exit_json(self, **kwargs):
        kwargs.setdefault("changed", False)
        self._emit(kwargs, 0)

    def fail_json(self, msg: str, **kwargs):
        kwargs.pop("exception", None)
        kwargs.update(failed=True, msg=str(msg))
        self._emit(kwargs, 1)

    def run_command(self, args, check_rc: bool = False, data: str | bytes | None = None, binary_data: bool = False,
                    environ_update: dict | None = None, cwd: str | None = None, expand_user_and_vars: bool = True,
                    pass_fds=(), handle_exceptions: bool = True, **unused):
        """AnsibleModule.run_command's behaviour for an argv or a string split as one (no shell): (rc, stdout,
        stderr) as text; ``data`` is written to its stdin (a newline added unless ``binary_data``); a program that
        cannot be started fails the module (``handle_exceptions``), as there."""
        argv = shlex.split(args) if isinstance(args, str) else [str(arg) for arg in args]
        if expand_user_and_vars:
            argv = [os.path.expanduser(os.path.expandvars(arg)) for arg in argv]
        env = dict(os.environ, **{key: str(value) for key, value in (environ_update or {}).items()})
        stdin = None
        if data is not None:
            stdin = data if isinstance(data, bytes) else data.encode("utf-8", "surrogateescape")
            if not binary_data:
                stdin += b"\n"
        try:
            proc = subprocess.run(argv, input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL,
                                  capture_output=True, env=env, cwd=cwd, pass_fds=tuple(pass_fds or ()), check=False)
        except OSError as error:
            if not handle_exceptions:
                raise
            self.fail_json(msg=str(error), rc=error.errno or 2, cmd=shlex.join(argv), stdout="", stderr="")
        out = proc.stdout.decode("utf-8", "surrogateescape")
        err = proc.stderr.decode("utf-8", "surrogateescape")
        if check_rc and proc.returncode != 0:
            self.fail_json(msg=err.rstrip() or out.rstrip(), rc=proc.returncode, cmd=shlex.join(argv), stdout=out,
                           stderr=err)
        return proc.returncode, out, err


def _path_info(result: dict) -> None:
    """AnsibleModule's add_path_info: a result whose ``path`` (else ``dest``) exists gets its owner, mode, kind and
    size, read the same way."""
    path = result.get("path", result.get("dest"))
    if not isinstance(path, str) or not os.path.exists(path):
        return
    info = os.lstat(os.path.expanduser(os.path.expandvars(path)))
    try:
        owner = pwd.getpwuid(info.st_uid).pw_name
    except KeyError:
        owner = str(info.st_uid)
    try:
        group = grp.getgrgid(info.st_gid).gr_name
    except KeyError:
        group = str(info.st_gid)
    kind = ("link" if os.path.islink(path) else "directory" if os.path.isdir(path)
            else "hard" if os.stat(path).st_nlink > 1 else "file")
    result.update(uid=info.st_uid, gid=info.st_gid, owner=owner, group=group,
                  mode="0%03o" % stat.S_IMODE(os.lstat(path).st_mode), state=kind, size=os.lstat(path).st_size)


def run_light(payload: dict) -> None:
    """The light run's entry on the node: the module ``payload["module"]`` run as a script with the arguments, check
    and diff mode given; an exception it does not handle is a failed result with its traceback, as AnsiballZ makes it."""
    global LIGHT  # noqa: PLW0603 - the one switch a light run sets before the module runs
    import runpy  # noqa: PLC0415 - node side only

    LIGHT = {"params": payload["params"], "check_mode": bool(payload.get("check_mode")),
             "diff": bool(payload.get("diff")), "name": payload["module"].rsplit(".", 1)[-1]}
    try:
        runpy.run_module(payload["module"], run_name="__main__", alter_sys=True)
    except SystemExit:
        raise
    except BaseException as error:  # noqa: BLE001 - reported as the module's failure, as AnsiballZ does
        sys.stdout.write("\n" + json.dumps({"failed": True, "msg": f"{type(error).__name__}: {error}",
                                            "exception": traceback.format_exc()}) + "\n")
        sys.exit(1)  # pylint: disable=ansible-bad-function  # the module is not running: nothing else reports
    sys.stdout.write("\n" + json.dumps({"failed": True, "msg": "the module did not report its result"}) + "\n")
    sys.exit(1)  # pylint: disable=ansible-bad-function  # the module is not running: nothing else reports
