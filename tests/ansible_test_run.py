"""ansible-test on the hvd.cluster collection as it ships: built by ansible-galaxy and installed into a temporary
``ansible_collections`` tree, the only place ansible-test runs (the checkout's own ``collections/`` link is not a
collection root to it, and its link test would refuse the link).

ansible-test makes a virtual environment per test and bootstraps pip into it with a get-pip script it downloads from
its own CI file host, which this machine cannot reach. Its documented way around that is a script saved at
``~/.ansible/test/cache/get_pip_<version>.py``: :func:`seed_pip_bootstrap` saves one there (once; an existing one,
e.g. a real download, is kept) that installs pip from PyPI's pip wheel, fetched through the package index pip is
configured with on this machine. Everything the tests themselves need comes from that index too.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import BIN, ROOT, tool

CACHE = Path.home() / ".ansible" / "test" / "cache"
BOOTSTRAP = '''"""pip's bootstrap for ansible-test, written by hvdcluster's tests (tests/ansible_test_run.py): pip from a
pip wheel on this machine rather than the get-pip script ansible-test downloads, with get-pip's own switches."""
import sys

sys.path.insert(0, {wheel!r})
from pip._internal.cli.main import main  # noqa: E402

# --no-setuptools / --no-wheel: get-pip's "leave them out", which a plain `pip install` does anyway
sys.exit(main(["install", *(arg for arg in sys.argv[1:] if arg not in ("--no-setuptools", "--no-wheel"))]))
'''


def pip_version() -> str:
    """The pip release ansible-test bootstraps into its environments (its own pin)."""
    import ansible_test  # noqa: PLC0415 - only here

    source = (Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py").read_text()
    found = re.search(r"\bpip='(\d+(?:\.\d+)+)'", source)
    if not found:
        raise RuntimeError("cannot find ansible-test's pip pin in ansible_test/_internal/python_requirements.py")
    return found.group(1)


def seed_pip_bootstrap() -> Path:
    version = pip_version()
    script = CACHE / f"get_pip_{version.replace('.', '_')}.py"
    if script.is_file():
        return script
    wheels = CACHE / "hvd-pip"
    wheel = wheels / f"pip-{version}-py3-none-any.whl"
    if not wheel.is_file():
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--disable-pip-version-check",
                        "-d", str(wheels), f"pip=={version}"], check=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = script.with_suffix(".partial")
    partial.write_text(BOOTSTRAP.format(wheel=str(wheel)))
    partial.replace(script)
    return script


def installed_collection(tmp: Path) -> Path:
    """Build the collection from the checkout and install it under ``tmp``; its root."""
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(tmp / "none")}  # never "already installed" via the link
    subprocess.run([tool("ansible-galaxy"), "collection", "build", "--force", "--output-path", str(tmp), str(ROOT)],
                   cwd=tmp, env=env, check=True, capture_output=True, text=True)
    artifact = next(tmp.glob("hvd-cluster-*.tar.gz"))
    subprocess.run([tool("ansible-galaxy"), "collection", "install", "--force", "-p", str(tmp / "c"), str(artifact)],
                   cwd=tmp, env=env, check=True, capture_output=True, text=True)
    return tmp / "c" / "ansible_collections" / "hvd" / "cluster"


def with_unit_tests(root: Path) -> Path:
    """The installed collection plus the checkout's collection-only unit tests (tests/unit/plugins), which
    ``ansible-test units`` runs there: they import the collection as Ansible does, nothing of the command."""
    shutil.copytree(ROOT / "tests" / "unit" / "plugins", root / "tests" / "unit" / "plugins",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return root


def run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``ansible-test ARGS --python X.Y`` (this interpreter's version) in the installed collection."""
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run([tool("ansible-test"), *args, "--python", python, "--color", "no"], cwd=root, env=env,
                          capture_output=True, text=True)
