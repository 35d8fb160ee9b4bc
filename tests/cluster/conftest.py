"""A real cluster: sshd containers driven by `hvdcluster` installed from the built wheel into a fresh venv,
run from a folder outside the checkout."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.lab.cluster import Lab
from tests.lab.gapped import Gapped


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`hvdcluster` from the wheel, in a venv of its own: returns the venv's bin folder.

    Built once per test run: the pytest-xdist workers share it (their temp folders have one parent), the first one
    builds it under a lock and the others find it made."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    work = root / "installed-wheel"
    with (root / "installed-wheel.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (work / "venv" / "done").exists():
            shutil.rmtree(work, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(work / "dist"), str(ROOT)],
                           check=True, capture_output=True)
            [wheel] = (work / "dist").glob("hvdcluster-*.whl")
            subprocess.run([sys.executable, "-m", "venv", str(work / "venv")], check=True)
            subprocess.run([str(work / "venv" / "bin" / "pip"), "install", "-q", "-c",
                            str(ROOT / "tests" / "constraints.txt"), str(wheel)], check=True)
            (work / "venv" / "done").touch()
    return work / "venv" / "bin"


@dataclass
class Cli:
    bin: Path
    cwd: Path
    cache: Path | None = None  # a controller cache of the suite's own (HVDCLUSTER_CACHE); None: the shared one

    def __call__(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        own = {"HVDCLUSTER_CACHE": str(self.cache)} if self.cache else {}
        return subprocess.run([str(self.bin / "hvdcluster"), *args], cwd=self.cwd, capture_output=True, text=True,
                              env={**os.environ, **own, **(env or {})})

    def up_json(self, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict, str]:
        proc = self("up", "hosts.yaml", "--json", *args, env=env)
        try:
            doc = json.loads(proc.stdout)
        except json.JSONDecodeError:
            pytest.fail(f"no JSON from up (rc {proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-4000:]}")
        return proc.returncode, doc, proc.stderr

    def check_json(self, *args: str) -> tuple[int, dict]:
        proc = self("check", "hosts.yaml", "--json", *args)
        try:
            return proc.returncode, json.loads(proc.stdout)
        except json.JSONDecodeError:
            pytest.fail(f"no JSON from check (rc {proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-3000:]}")


# The login user of the shared clusters is not root (README's own example): passwordless sudo.
SUDO_USER = "hvdadmin"

# Another local user's traps: folders under every name hvdcluster took in world-writable folders before it had a
# private one (and a few it might), each holding a Makefile, a configure script and Python modules that leave a
# flag in FLAGS when anything runs them.
FLAGS = "/var/tmp/trap-flags"
TRAP_DIRS = ["/var/tmp/hvd-pyenv", "/var/tmp/hvd-verify", "/var/tmp/hvd-horovod", "/var/tmp/hvd-openmpi-",
             "/var/tmp/hvd-wheels", "/tmp/hvd-pyenv", "/tmp/hvd-verify", "/tmp/hvd-horovod", "/dev/shm/hvd-verify"]
TRAP_MODULES = ["torch", "horovod", "sitecustomize", "usercustomize", "numpy", "setuptools", "pip", "encodings",
                "json", "socket", "allreduce", "lock"]


def plant_traps(lab: Lab) -> None:
    """On every node, as an unprivileged local user (mallory): every trap folder, each holding code that flags."""
    flag = f"open('{FLAGS}/' + __name__ + '-' + __file__.replace('/', '_'), 'w').close()\n"
    make = f"all install:\n\ttouch {FLAGS}/make-$$(pwd | tr / _)\n"
    script = [f"mkdir -p {FLAGS} && chmod 1777 {FLAGS}"]
    for folder in TRAP_DIRS:
        script.append(f"mkdir -p {folder} && chmod 0777 {folder}")
        script.append(f"printf '%s' '{make}' > {folder}/Makefile")
        script.append(f"printf '#!/bin/sh\\ntouch {FLAGS}/configure\\n' > {folder}/configure && chmod +x {folder}/configure")
        script += [f"printf '%s' \"{flag}\" > {folder}/{module}.py" for module in TRAP_MODULES]
    for i in range(1, lab.nodes + 1):
        made = lab.exec(i, "sh", "-c", "id mallory >/dev/null 2>&1 || useradd -m -s /bin/sh mallory")
        assert made.returncode == 0, made.stderr
        planted = lab.exec(i, "su", "mallory", "-c", " && ".join(script))
        assert planted.returncode == 0, planted.stderr


def assert_no_trap_fired(lab: Lab) -> None:
    """No trap ran, nothing of ours went into the trap folders; our own work folder, where a node has one (a builder
    does; the others get their artifacts from peers), is root's, 0700; the folder each node keeps its artifacts in
    is the login user's, 0700."""
    for i in range(1, lab.nodes + 1):
        fired = lab.exec(i, "ls", "-A", FLAGS)
        assert fired.returncode == 0 and fired.stdout.strip() == "", f"node{i}: traps fired: {fired.stdout}"
        for folder in TRAP_DIRS:
            ours = lab.exec(i, "find", folder, "-not", "-user", "mallory")
            assert ours.stdout.strip() == "", f"node{i}: {ours.stdout}"
        info = lab.exec(i, "sh", "-c", "test ! -e /var/lib/hvdcluster || stat -c '%U %a %F' /var/lib/hvdcluster")
        assert info.stdout.split() in ([], ["root", "700", "directory"]), info.stdout + info.stderr
        kept = lab.exec(i, "sh", "-c", f"stat -c '%U %a %F' ~{lab.user}/.cache/hvdcluster/artifacts")
        assert kept.stdout.split() == [lab.user, "700", "directory"], kept.stdout + kept.stderr


# The lab's nodes are containers that share this machine's 2 cores, so the ranks of every node compete for them: an
# oversubscribed host in Open MPI's terms, where a rank that waits must yield the core instead of polling for a message
# (mpi_yield_when_idle; on a GPU cluster each rank has cores of its own and polling is right). Set in /etc/environment,
# which pam_env reads for every SSH session, so hvdcluster's commands, mpirun, its remote daemons and every rank take
# it; molecule's nodes (docker exec, no PAM), the golden image's one node and README's demo run without it. Measured
# on 2 nodes x 2 ranks, the post-flight's MPI allreduce: 13.8 -> 10.0 s of CPU (bench/allreduce_cpu.py).
SHARED_CORES = "OMPI_MCA_mpi_yield_when_idle=1"


def share_the_cores(lab: Lab | Gapped) -> None:
    """Tell Open MPI on every node of ``lab`` (a Lab or a Gapped) that it shares the cores (:data:`SHARED_CORES`)."""
    for container in (lab.container(i) for i in range(1, lab.nodes + 1)):
        done = subprocess.run(["docker", "exec", container, "sh", "-c", f"grep -qx '{SHARED_CORES}' /etc/environment "
                               f"|| echo '{SHARED_CORES}' >> /etc/environment"], capture_output=True, text=True)
        assert done.returncode == 0, f"{container}: {done.stderr}"


@pytest.fixture(scope="module")
def lab3(node_image: str, tmp_path_factory: pytest.TempPathFactory) -> Lab:
    lab = Lab("ct3", 3, tmp_path_factory.mktemp("ct3"), user=SUDO_USER)
    lab.up()
    share_the_cores(lab)
    plant_traps(lab)
    yield lab
    lab.down()


@pytest.fixture(scope="module")
def hvd(installed: Path, lab3: Lab) -> Cli:
    return Cli(installed, lab3.workdir)



def run_events(log: str | Path) -> list[dict]:
    """The ansible-runner events of the run whose `log` an `up --json` names (its artifacts folder)."""
    return [json.loads(path.read_text()) for path in (Path(log).parent / "job_events").glob("*.json")]


BUILD_ROLES = ("hvd_openmpi", "hvd_horovod", "hvd_pyxis", "hvd_nccl_tests")


def assert_facts_once_and_builders_read_their_cpus(log: str | Path, lab: Lab) -> set[str]:
    """The run whose `log` an `up --json` names gathered each node's facts once (the pre-flight's gather: no later play
    gathers them again), without the hardware; only a builder (a host where a build of BUILD_ROLES started: the work
    folder every build starts from) read its CPUs (its make -j), once, and read what the node has. The builders."""
    done = [e["event_data"] for e in run_events(log) if e.get("event") == "runner_on_ok"]
    gathers = [e for e in done if e.get("task_action", "").rsplit(".", 1)[-1] == "gather_facts"]
    assert Counter(e["host"] for e in gathers) == {f"node{i}": 1 for i in range(1, lab.nodes + 1)}, gathers
    assert not any("ansible_processor_vcpus" in e["res"].get("ansible_facts", {}) for e in gathers)
    reads = [e for e in done if e.get("task_action", "").rsplit(".", 1)[-1] == "setup"]
    builders = {e["host"] for e in done if e.get("task") == "Start from a clean private work folder"
                and e.get("role", "").rsplit(".", 1)[-1] in BUILD_ROLES}
    assert sorted(e["host"] for e in reads) == sorted(builders), ([e["host"] for e in reads], builders)
    for e in reads:
        cpus = lab.exec(int(e["host"].removeprefix("node")), "grep", "-c", "^processor", "/proc/cpuinfo").stdout
        assert e["task"].startswith("Count the builder's CPUs"), e["task"]
        assert e["res"]["ansible_facts"]["ansible_processor_vcpus"] == int(cpus), e["res"]
    return builders


def task_outcomes(log: str | Path) -> dict[str, set[str]]:
    """Per task name, how it ended on the hosts ({'ok', 'skipped', 'failed', ...})."""
    out: dict[str, set[str]] = {}
    for event in run_events(log):
        kind = event.get("event", "")
        if kind.startswith("runner_on_") and kind != "runner_on_start":
            out.setdefault(event["event_data"]["task"], set()).add(kind.removeprefix("runner_on_"))
    return out


def changed_tasks(log: str | Path, host: str) -> set[str]:
    """The names of the tasks that reported a change on `host`."""
    out: set[str] = set()
    for event in run_events(log):
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and data.get("host") == host and data.get("res", {}).get("changed"):
            out.add(data["task"])
    return out


# The section names of an ELF file, read by the node's own Python (binutils is only on the builder).
_ELF_SECTIONS = """
import struct, sys
data = open(sys.argv[1], "rb").read()
assert data[:4] == b"\\x7fELF" and data[4] == 2, "not a 64-bit ELF file"
shoff, = struct.unpack_from("<Q", data, 0x28)
entsize, count, names_index = struct.unpack_from("<HHH", data, 0x3A)
def header(i):
    return struct.unpack_from("<IIQQQQ", data, shoff + i * entsize)
base = header(names_index)[4]
for i in range(count):
    start = base + header(i)[0]
    print(data[start:data.index(b"\\0", start)].decode())
"""


def horovod_library_sections(lab: Lab | Gapped, index: int, env: str) -> tuple[str, set[str]]:
    """The path of Horovod's PyTorch library in a node's env and the names of its ELF sections."""
    found = lab.exec(index, "sh", "-c", f"ls {env}/lib/python3*/site-packages/horovod/torch/mpi_lib_v2*.so")
    assert found.returncode == 0 and len(found.stdout.split()) == 1, found.stdout + found.stderr
    path = found.stdout.strip()
    read = lab.exec(index, "python3", "-c", _ELF_SECTIONS, path)
    assert read.returncode == 0, read.stderr
    return path, set(read.stdout.split())
