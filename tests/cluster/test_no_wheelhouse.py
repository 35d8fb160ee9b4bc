"""The user's default path, whole: no wheelhouse, a non-root sudo user, an empty controller cache, every role of
site.yml. Every package of the env comes from a package index, and so does Horovod's sdist, built on a node; the
post-flight's allreduce proves the cluster.

Here the index is a plain PEP 503 folder served over HTTP from this machine to the lab's own Docker network (the
nodes can reach nothing else that holds a CPU build of PyTorch), named in hosts.yaml as `network.pip_index`, the way
a company mirror is. Then the env is built again from another empty cache: its files are byte-identical to the first
build's (reproducible envs: the nodes of a cluster built at different times hold the same bytes).

This is also where the full tier runs molecule/horovod's converge (the whole site.yml on two CPU nodes from an empty
controller cache), through `up` as users run it; tests/molecule/test_molecule.py only reads that scenario.
"""

from __future__ import annotations

import functools
import http.server
import json
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.cluster.conftest import (SUDO_USER, Cli, assert_facts_once_and_builders_read_their_cpus, share_the_cores,
                                    task_outcomes)
from tests.lab.cluster import Lab
from tests.lab.images import docker
from tests.lab.stacks import BASE_PACKAGES

pytestmark = pytest.mark.containers

PACKAGES = BASE_PACKAGES
HOROVOD = "horovod==0.28.1"  # its sdist: hvd_horovod downloads it from the index and builds it on a node


def _project(filename: str) -> str:
    name = re.split(r"-\d", filename, maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PEP 503 index of what the stack needs: PyPI's files as this machine's pip finds them (its own
    wheelhouse for the CPU build of PyTorch), laid out as `simple/<project>/index.html`."""
    root = tmp_path_factory.mktemp("index")
    files = root / "files"
    pip = [sys.executable, "-m", "pip", "download", "-q", "--progress-bar", "off", "-d", str(files)]
    subprocess.run([*pip, "--only-binary", ":all:", *PACKAGES], check=True, capture_output=True, text=True)
    subprocess.run([*pip, "--no-deps", "--no-binary", ":all:", HOROVOD], check=True, capture_output=True, text=True)
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
    lab = Lab("nw", 2, tmp_path_factory.mktemp("nw"), user=SUDO_USER, wheelhouse=False)
    lab.up()
    share_the_cores(lab)
    # The index listens on this machine's address on the lab's own network, and nowhere else.
    gateway = docker("network", "inspect", lab.docker_network, "-f", "{{(index .IPAM.Config 0).Gateway}}")
    server = http.server.ThreadingHTTPServer((gateway, 0), functools.partial(_QuietHandler, directory=str(index_dir)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    lab.network = {"pip_index": f"http://{gateway}:{server.server_address[1]}/simple/"}
    lab.write_hosts_yaml()
    yield lab
    server.shutdown()
    lab.down()


@pytest.fixture(scope="module")
def cli(installed: Path, lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Cli:
    return Cli(installed, lab.workdir, cache=tmp_path_factory.mktemp("nw-cache"))  # empty: everything built here


ENV_LAYERS = "hvd_preflight,hvd_base,hvd_ssh_mesh,hvd_pyenv"


def test_up_with_no_wheelhouse_converges_every_role_from_the_index_and_proves_the_cluster(cli: Cli, lab: Lab) -> None:
    hosts = lab.hosts_yaml.read_text()
    assert f"user: {SUDO_USER}" in hosts and "wheelhouse" not in hosts and "pip_index" in hosts
    rc, doc, err = cli.up_json()
    assert rc == 0, err[-6000:]
    assert set(doc["hosts"]) == {"node1", "node2"} and doc["not_repaired"] == []
    # the facts without the hardware: Horovod's builder read its CPUs for its make -j, just before its build
    assert assert_facts_once_and_builders_read_their_cpus(doc["log"], lab)
    outcomes = task_outcomes(doc["log"])
    for task in ("Download the Horovod sdist", "Build the wheel against the environment (a few minutes)",
                 "Allreduce over every slot of every node", "Check every rank's sum"):
        assert outcomes.get(task) == {"ok"}, (task, outcomes.get(task))
    for i in (1, 2):
        check = lab.exec(i, "/opt/hvd/env/bin/horovodrun", "--check-build", user=SUDO_USER)
        assert all(f"[X] {part}" in check.stdout for part in ("PyTorch", "MPI", "Gloo")), check.stdout + check.stderr
    # the env came from the index, locked with every file's sha256, identical on both nodes
    locks = [lab.exec(i, "cat", "/opt/hvd/env/hvd-requirements.lock").stdout for i in (1, 2)]
    assert locks[0] == locks[1] and re.search(r"^torch==2\.13\.0\+cpu --hash=sha256:[0-9a-f]{64}$", locks[0], re.M)
    assert lab.network["pip_index"] in lab.exec(1, "cat", "/etc/pip.conf").stdout
    for i in (1, 2):
        torch = lab.exec(i, "/opt/hvd/env/bin/python", "-I", "-c", "import torch; print(torch.__version__)",
                         user=SUDO_USER)
        assert torch.stdout.strip() == "2.13.0+cpu", torch.stderr


def test_a_state_folder_made_by_someone_else_is_refused_by_name(cli: Cli, lab: Lab, tmp_path: Path) -> None:
    """A /var/lib/hvdcluster that is not root's 0700 (here: opened up to everyone) is never used. The builder is the
    node that works in it (the others get their artifacts from their peers): node1 needs the env again and the
    controller cache is empty, so node1 builds."""
    cache = {"HVDCLUSTER_CACHE": str(tmp_path / "empty-cache")}
    opened = "mkdir -p /var/lib/hvdcluster && chmod 0777 /var/lib/hvdcluster"  # made now if no build made it yet
    assert lab.exec(1, "sh", "-c", opened).returncode == 0
    assert lab.exec(1, "rm", "-f", "/opt/hvd/env/.hvd-env-key").returncode == 0  # node1 needs the env again
    try:
        rc, doc, err = cli.up_json("--tags", ENV_LAYERS, env=cache)
        assert rc == 1
        failure = " ".join(str(f) for f in doc.get("failures", [])) + err
        assert "/var/lib/hvdcluster has mode 0777, not 0700" in failure, failure[-4000:]
        assert doc["hosts"]["node1"]["failed"] >= 1
    finally:
        assert lab.exec(1, "chmod", "0700", "/var/lib/hvdcluster").returncode == 0
    rc, doc, err = cli.up_json("--tags", ENV_LAYERS, env=cache)
    assert rc == 0, err[-4000:]
    assert lab.exec(1, "cat", "/opt/hvd/env/.hvd-env-key").returncode == 0
    # node1's env was built again, from the index into an empty cache; node2's is the first build's: the same bytes
    built = task_outcomes(doc["log"]).get("Resolve the packages (pip's report of what it would install)")
    assert built == {"ok"}, built
    assert _files(lab, 1) == _files(lab, 2)


def _files(lab: Lab, index: int) -> dict[str, tuple[int, str]]:
    """Every file of the env as its manifest records it when installed: (size, sha256) by path."""
    manifest = json.loads(lab.exec(index, "cat", "/opt/hvd/env/.hvd-manifest").stdout)
    files = {rel: (entry[0], entry[2]) for rel, entry in manifest.items() if entry[0] != "link"}
    assert len(files) > 1000, len(files)
    return files
