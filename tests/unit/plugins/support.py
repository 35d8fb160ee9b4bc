"""What the collection's own unit tests (tests/unit/plugins) share: where the collection is, a module run as Ansible
runs it, a packed tree for hvd_tree, fake node roots, and the GPU tool outputs the parsers are fed.

Imported by its collection name, ``from ansible_collections.hvd.cluster.tests.unit.plugins.support import ...``: in the
checkout that name resolves through collections/ansible_collections/hvd/cluster (a link to the checkout, on pytest's
pythonpath), under ``ansible-test units`` through its collection loader in the installed copy of the collection
(tests/ansible_test_run.py copies tests/unit/plugins there). Nothing here imports hvdcluster or tests/conftest.py:
neither is there under ansible-test.
"""

from __future__ import annotations

import functools
import hashlib
import json
import locale
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

_AS_IMPORTED = Path(__file__)  # <folder>/ansible_collections/hvd/cluster/tests/unit/plugins/support.py
if _AS_IMPORTED.parents[5].name != "ansible_collections":
    raise ImportError(f"{__name__}: import it as ansible_collections.hvd.cluster.tests.unit.plugins.support, "
                      "so that one copy of it serves every test")

# The collection's root: the checkout, or the installed copy ansible-test units runs in (the link resolved).
ROOT = _AS_IMPORTED.resolve().parents[3]
# The folder holding the ansible_collections tree these tests import the collection from: the checkout's
# collections/, or the folder ansible-test installed the collection in.
COLLECTIONS = _AS_IMPORTED.parents[6]

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="the modules run as root (become) on nodes")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------------------------- a play on the controller itself


def run_play(tmp_path: Path, tasks: list, *extra: str, discover: bool = False,
             env: dict | None = None) -> tuple[list, str]:
    """``tasks`` in one play on localhost (the local connection, this Python) under ``ansible-playbook -vvv``: each
    task's registered result, in order, and the output (an action plugin's own work names no module file in it).
    ``discover``: no interpreter given, Ansible discovers the host's at its first module run; ``env``: more of the
    environment ansible-playbook runs in."""
    book = tmp_path / "book.yml"
    book.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {**task, "register": f"r{i}"} for i, task in enumerate(tasks)] + [
        {"ansible.builtin.copy": {"dest": str(tmp_path / "results.json"), "mode": "0600",
                                  "content": "{{ [" + ", ".join(f"r{i}" for i in range(len(tasks))) + "] | to_json }}"},
         "check_mode": False}]}]))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), **(env or {})}
    interpreter = [] if discover else ["-e", f"ansible_python_interpreter={sys.executable}"]
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-vvv", "-i", "localhost,", "-c", "local", *interpreter, *extra, str(book)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((tmp_path / "results.json").read_text()), proc.stdout


# ------------------------------------------------------------------------------------------ a module as Ansible runs it


# ``python -c BOOT <collections> <module file>``: the module run as a script with the collection's folder on the import
# path, as Ansible's module packaging puts it.
BOOT = ("import sys, runpy; sys.path.insert(0, sys.argv[1]); "
        "sys.argv = sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')")


def run_module(name: str, args: dict, check: bool = False, env: dict | None = None) -> dict:
    """Run a module the way Ansible does: its file with the arguments as JSON on stdin (``env``: its environment)."""
    payload = {"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": check}}
    module = ROOT / "plugins" / "modules" / f"{name}.py"
    proc = subprocess.run([sys.executable, "-c", BOOT, str(COLLECTIONS), str(module)],
                          input=json.dumps(payload), capture_output=True, text=True, env=env)
    return json.loads(proc.stdout)


# ansible-playbook: the one beside this Python (the checkout's venv), else the one on PATH (ansible-test's, which runs
# it with the whole of Ansible in the controller's context; modules/ and module_utils/ get none of it there).
ANSIBLE_PLAYBOOK = (str(Path(sys.executable).parent / "ansible-playbook")
                    if (Path(sys.executable).parent / "ansible-playbook").exists()
                    else shutil.which("ansible-playbook") or "ansible-playbook")


# ------------------------------------------------------------------------------------------ hvd_tree's archives


def make_archive(tmp_path: Path, files: dict[str, str]) -> tuple[Path, str]:
    src = tmp_path / "src-tree"
    for name, text in files.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
    archive = tmp_path / "env.tar.zst"
    subprocess.run(["tar", "-C", str(src), "--zstd", "-cf", str(archive), "."], check=True)
    return archive, sha(archive.read_bytes())


@functools.cache
def _ansible_module():
    """A real AnsibleModule (no options, no syslog line), made once in this process for its run_command."""
    from ansible.module_utils.basic import AnsibleModule
    from ansible.module_utils.testing import patch_module_args

    saved = locale.setlocale(locale.LC_ALL)  # AnsibleModule sets the process's locale from the environment
    try:
        with patch_module_args({}):
            return AnsibleModule(argument_spec={}, no_log=True)
    finally:
        locale.setlocale(locale.LC_ALL, saved)


def run_command(*args, **kwargs):
    """AnsibleModule.run_command, which hvd_tree's main() hands to unpack (tar and check_argv run through it)."""
    return _ansible_module().run_command(*args, **kwargs)


UNPACK = {"marker": ".hvd-env-key", "owner_marker": ".hvdcluster", "check_argv": [], "run_command": run_command}


# ------------------------------------------------------------------------------------------ fake node roots


def write(root: Path, path: str, text: str | bytes = "", mode: int = 0o644) -> Path:
    """``path`` (absolute, as on the node) under the fake root ``root``, with ``text`` and ``mode``."""
    full = root / path.lstrip("/")
    full.parent.mkdir(parents=True, exist_ok=True)
    full.write_bytes(text.encode() if isinstance(text, str) else text)
    full.chmod(mode)
    return full


def link(root: Path, path: str, target: str) -> None:
    full = root / path.lstrip("/")
    full.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, full)


# ------------------------------------------------------------------------------------------ GPU tool outputs
# GPU and fabric tool outputs (no GPU is reachable here), in two layers:
# - OWN_GPU_FIXTURES, tests/unit/plugins/fixtures/gpu: the project's own, written by us in each tool's documented
#   format (its README.md says what each stands for). Every parser and rule path is proven on these, in any checkout
#   and in the copy ansible-test units runs in.
# - GPU_FIXTURES, ../shared/fixtures-gpu next to the checkout: real recorded outputs, read in place and never copied
#   into this repository (its SOURCES.md names where each came from). An extra layer: where the folder is absent (a
#   plain clone, or the installed collection ansible-test units runs in) the tests that read it are skipped, with the
#   reason; where it is there (this machine, CI) they run.
OWN_GPU_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "gpu"
GPU_FIXTURES = (ROOT / ".." / "shared" / "fixtures-gpu").resolve()
NO_SHARED = ("../shared/fixtures-gpu is not next to this checkout: the real recorded outputs are an extra layer; "
             "our own fixtures under tests/unit/plugins/fixtures/gpu cover every parser")


def gpu_fixture(name: str) -> Path:
    """A real recorded output's path. Without ../shared/fixtures-gpu the test is skipped (NO_SHARED); a file missing
    from a folder that is there fails it."""
    if not GPU_FIXTURES.is_dir():
        pytest.skip(NO_SHARED)
    path = GPU_FIXTURES / name
    if not path.is_file():
        pytest.fail(f"{path} is missing: these tests read ../shared/fixtures-gpu next to the checkout, in place")
    return path


def own_gpu_fixture(name: str) -> Path:
    """One of the project's own GPU tool outputs (tests/unit/plugins/fixtures/gpu); a missing one fails the test."""
    path = OWN_GPU_FIXTURES / name
    if not path.is_file():
        pytest.fail(f"{path} is missing: tests/unit/plugins/fixtures/gpu is part of the repository")
    return path
