"""The user's world, not the lab's: a converge from the defaults a new user starts from.

- No wheelhouse (the default): every package comes from a package index. Here the index is a plain PEP 503
  folder served over HTTP from this machine to the lab's own Docker network (nodes can reach nothing else that
  holds a CPU build of PyTorch), named in hosts.yaml as `network.pip_index`, the way a company mirror is.
- The login user is not root: a user with passwordless sudo, as README's own example (`user: ubuntu`).
- Another local user on every node has planted traps, before the first `up`, in every folder name hvdcluster
  used to take in world-writable folders: a Makefile, a configure script and Python modules (torch.py beside
  allreduce.py ...) that leave a flag when anything runs them. None may run.
"""

from __future__ import annotations

import functools
import http.server
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.cluster.conftest import Cli, changed_tasks
from tests.lab import Lab, docker

pytestmark = pytest.mark.containers

USER = "hvdadmin"
FLAGS = "/var/tmp/trap-flags"  # the attacker's own folder, world-writable: any trap that fires leaves a file here
# Every folder name hvdcluster took in world-writable folders before it had a private one, and a few it might.
TRAP_DIRS = ["/var/tmp/hvd-pyenv", "/var/tmp/hvd-verify", "/var/tmp/hvd-horovod", "/var/tmp/hvd-openmpi-",
             "/var/tmp/hvd-wheels", "/tmp/hvd-pyenv", "/tmp/hvd-verify", "/tmp/hvd-horovod", "/dev/shm/hvd-verify"]
TRAP_MODULES = ["torch", "horovod", "sitecustomize", "usercustomize", "numpy", "setuptools", "pip", "encodings",
                "json", "socket", "allreduce", "lock"]
PACKAGES = ["torch==2.13.0", "wheel", "setuptools", "cloudpickle", "psutil", "pyyaml", "packaging"]


def _project(filename: str) -> str:
    name = re.split(r"-\d", filename, maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PEP 503 index of what the stack needs: PyPI's files as this machine's pip finds them (its own
    wheelhouse for the CPU build of PyTorch), the Horovod sdist, laid out as `simple/<project>/index.html`."""
    root = tmp_path_factory.mktemp("index")
    files = root / "files"
    pip = [sys.executable, "-m", "pip", "download", "-q", "--progress-bar", "off", "-d", str(files)]
    subprocess.run([*pip, "--only-binary", ":all:", *PACKAGES], check=True, capture_output=True, text=True)
    subprocess.run([*pip, "--no-deps", "--no-binary", ":all:", "horovod==0.28.1"], check=True, capture_output=True)
    projects: dict[str, list[str]] = {}
    for path in sorted(files.iterdir()):
        projects.setdefault(_project(path.name), []).append(path.name)
    for project, names in projects.items():
        page = root / "simple" / project
        page.mkdir(parents=True)
        links = "".join(f'<a href="../../files/{name}">{name}</a>\n' for name in names)
        (page / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
    return root


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def lab(node_image: str, index_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Lab:
    lab = Lab("uw", 2, tmp_path_factory.mktemp("uw"), user=USER, wheelhouse=False)
    lab.up()
    # The index listens on this machine's address on the lab's own network, and nowhere else.
    gateway = docker("network", "inspect", lab.docker_network, "-f", "{{(index .IPAM.Config 0).Gateway}}")
    server = http.server.ThreadingHTTPServer((gateway, 0), functools.partial(_QuietHandler, directory=str(index_dir)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    lab.network = {"pip_index": f"http://{gateway}:{server.server_address[1]}/simple/"}
    lab.write_hosts_yaml()
    for i in range(1, lab.nodes + 1):
        plant_traps(lab, i)
    yield lab
    server.shutdown()
    lab.down()


def plant_traps(lab: Lab, index: int) -> None:
    """As an unprivileged local user: every folder name, each holding code that flags when it runs."""
    flag = f"open('{FLAGS}/' + __name__ + '-' + __file__.replace('/', '_'), 'w').close()\n"
    make = f"all install:\n\ttouch {FLAGS}/make-$$(pwd | tr / _)\n"
    script = [f"mkdir -p {FLAGS} && chmod 1777 {FLAGS}"]
    for folder in TRAP_DIRS:
        script.append(f"mkdir -p {folder} && chmod 0777 {folder}")
        script.append(f"printf '%s' '{make}' > {folder}/Makefile")
        script.append(f"printf '#!/bin/sh\\ntouch {FLAGS}/configure\\n' > {folder}/configure && chmod +x {folder}/configure")
        for module in TRAP_MODULES:
            script.append(f"printf '%s' \"{flag}\" > {folder}/{module}.py")
    setup = lab.exec(index, "sh", "-c", "id mallory >/dev/null 2>&1 || useradd -m -s /bin/sh mallory")
    assert setup.returncode == 0, setup.stderr
    proc = lab.exec(index, "su", "mallory", "-c", " && ".join(script))
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def cli(installed: Path, lab: Lab) -> Cli:
    return Cli(installed, lab.workdir)


def test_up_as_a_sudo_user_with_no_wheelhouse_converges(cli: Cli, lab: Lab) -> None:
    hosts = lab.hosts_yaml.read_text()
    assert f"user: {USER}" in hosts and "wheelhouse" not in hosts and "pip_index" in hosts
    rc, doc, err = cli.up_json()
    assert rc == 0, err[-6000:]
    assert set(doc["hosts"]) == {"node1", "node2"}
    # the env came from the index, locked with every file's sha256, identical on both nodes
    locks = [lab.exec(i, "cat", "/opt/hvd/env/hvd-requirements.lock").stdout for i in (1, 2)]
    assert locks[0] == locks[1] and re.search(r"^torch==2\.13\.0\+cpu --hash=sha256:[0-9a-f]{64}$", locks[0], re.M)
    assert "horovod" not in (lab.workdir / "inventories").as_posix()  # sanity: a fresh inventory
    pip_conf = lab.exec(1, "cat", "/etc/pip.conf").stdout
    assert lab.network["pip_index"] in pip_conf


def test_our_work_folder_is_private_and_no_trap_fired(cli: Cli, lab: Lab) -> None:
    for i in (1, 2):
        info = lab.exec(i, "stat", "-c", "%U %a %F", "/var/lib/hvdcluster")
        assert info.stdout.split() == ["root", "700", "directory"], info.stdout + info.stderr
        fired = lab.exec(i, "ls", "-A", FLAGS)
        assert fired.returncode == 0 and fired.stdout.strip() == "", f"node{i}: traps fired: {fired.stdout}"
        # and nothing of ours was left in the attacker's folders
        for folder in TRAP_DIRS:
            owners = lab.exec(i, "find", folder, "-not", "-user", "mallory")
            assert owners.stdout.strip() == "", owners.stdout


def test_run_as_the_sudo_user_on_every_rank(cli: Cli, lab: Lab) -> None:
    code = ("import getpass, socket, horovod.torch as hvd, torch; hvd.init(); "
            "s = hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum).item(); "
            "print(f'rank={hvd.rank()} user={getpass.getuser()} host={socket.gethostname()} sum={s:g}')")
    proc = cli("run", "-np", "2", "--", "python", "-c", code)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    lines = sorted(re.findall(r"rank=\d user=\S+ host=\S+ sum=\S+", proc.stdout))
    assert lines == [f"rank=0 user={USER} host=node1 sum=2", f"rank=1 user={USER} host=node2 sum=2"], proc.stdout


def test_second_up_as_the_sudo_user_changes_nothing(cli: Cli, lab: Lab) -> None:
    rc, doc, err = cli.up_json()
    assert rc == 0, err[-4000:]
    changed = {name: changed_tasks(doc["log"], name) for name in doc["hosts"]}
    assert all(h["changed"] == 0 for h in doc["hosts"].values()), changed


def test_a_state_folder_made_by_someone_else_is_refused_by_name(cli: Cli, lab: Lab) -> None:
    """A /var/lib/hvdcluster that is not root's 0700 (here: opened up to everyone) is never used."""
    assert lab.exec(2, "chmod", "0777", "/var/lib/hvdcluster").returncode == 0
    assert lab.exec(2, "rm", "-f", "/opt/hvd/env/.hvd-env-key").returncode == 0  # node2 needs the env again
    try:
        rc, doc, err = cli.up_json()
        assert rc == 1
        failure = " ".join(str(f) for f in doc.get("failures", [])) + err
        assert "/var/lib/hvdcluster has mode 0777, not 0700" in failure, failure[-4000:]
        assert doc["hosts"]["node2"]["failed"] >= 1
    finally:
        assert lab.exec(2, "chmod", "0700", "/var/lib/hvdcluster").returncode == 0
    rc, doc, err = cli.up_json()
    assert rc == 0, err[-4000:]
