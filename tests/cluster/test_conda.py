"""`manager: conda` for real: two nodes, a non-root sudo user, an environment.yml whose conda packages come from a
local channel (built offline from Debian's CPython source tarball by tests/conda_channel.py, named in hosts.yaml as
`network.conda_channel`, the way a site's mirror is) and whose `pip:` section installs PyTorch from the wheelhouse.

`up` solves and locks the env with rattler on one node, adds the pip packages, checks it with conda-pack, packs it,
fans it out, builds Horovod against the conda Python and proves the allreduce; the envs are byte-identical, `run`
starts every rank in the env (CONDA_PREFIX), and a conda package taken out of one node is named by `check` and put
back by `up`. Last, the cluster's bundle (less its packed env) converges a bare node with no route out: the env is
solved again there from the bundle's own conda channel, the only one it has.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from tests.cluster.conftest import SUDO_USER, Cli, share_the_cores, task_outcomes
from tests.conda_channel import build as build_channel
from tests.lab.cluster import Lab
from tests.lab.gapped import Gapped

pytestmark = pytest.mark.containers

PREFIX = "/opt/hvd/env"
ENVIRONMENT = """\
name: hvd
channels: [conda-forge]  # replaced by network.conda_channel
dependencies:
  - python=3.11
  - pip
  - hvd-probe
  - pip:
      - torch==2.13.0
"""
STACK = {"python": {"manager": "conda", "environment_file": "environment.yml"}, "horovod": {"frameworks": ["pytorch"]}}


@pytest.fixture(scope="module")
def lab(packaged_image: str, tmp_path_factory: pytest.TempPathFactory) -> Lab:
    channel = build_channel()
    work = tmp_path_factory.mktemp("cda")
    (work / "environment.yml").write_text(ENVIRONMENT)
    lab = Lab("cda", 2, work, slots=2, stack=STACK, user=SUDO_USER, network={"conda_channel": str(channel)},
              image=packaged_image)
    lab.up()
    share_the_cores(lab)
    yield lab
    lab.down()


@pytest.fixture(scope="module")
def converged(installed: Path, lab: Lab) -> Cli:
    """The first up (the env built on one node, or taken from the shared controller cache where an earlier run built
    the same key: the heavy test below builds it from an empty cache, offline)."""
    cli = Cli(installed, lab.workdir)
    rc, doc, err = cli.up_json()
    assert rc == 0, err[-6000:]
    assert doc["converged"] == ["node1", "node2"] and doc["not_repaired"] == [], doc
    # the post-flight's allreduce ran over every slot, each rank's sum checked
    outcomes = task_outcomes(doc["log"])
    for task in ("Allreduce over every slot of every node", "Check every rank's sum"):
        assert outcomes.get(task) == {"ok"}, (task, outcomes.get(task))
    return cli


def tree(lab: Lab, i: int) -> list[str]:
    """Every file's path and sha256 and every link's target under the prefix (the env and what Horovod added), but
    the per-node stamps: the manifest's modification times and the check-build's stamp (.hvd-horovod-checked holds
    the node's own RECORD time)."""
    script = (f"cd {PREFIX} && find . -type f ! -name .hvd-manifest ! -name .hvd-horovod-checked -print0 | sort -z "
              "| xargs -0 sha256sum && "
              "find . -type l -printf '%p -> %l\\n' | sort")
    proc = lab.exec(i, "sh", "-c", script)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_the_conda_env_is_byte_identical_on_both_nodes_and_locked(converged: Cli, lab: Lab) -> None:
    one, two = tree(lab, 1), tree(lab, 2)
    assert len(one) > 1000 and one == two, sorted(set(one) ^ set(two))[:20]
    lock = lab.exec(1, "cat", f"{PREFIX}/hvd-conda.lock").stdout.splitlines()
    assert lock[1] == "@EXPLICIT"
    names = sorted(re.sub(r"-[^-]+-[^-]+\.conda#.*$", "", line.rsplit("/", 1)[1]) for line in lock[2:])
    assert names == ["hvd-probe", "pip", "python"], lock
    assert all(re.search(r"\.conda#[0-9a-f]{64}$", line) for line in lock[2:]), lock
    pip_lock = lab.exec(1, "cat", f"{PREFIX}/hvd-requirements.lock").stdout
    assert re.search(r"^torch==2\.13\.0\+cpu --hash=sha256:[0-9a-f]{64}$", pip_lock, re.M), pip_lock
    # the interpreter is the conda package's (the node's own python3 is another build, at /usr/bin)
    who = lab.exec(2, f"{PREFIX}/bin/python", "-I", "-c",
                   "import sys, sysconfig; print(sys.prefix, sys.version.split()[0], sysconfig.get_config_var('prefix'))",
                   user=SUDO_USER)
    assert who.stdout.split() == [PREFIX, "3.11.2", PREFIX], who.stdout + who.stderr


def test_horovod_is_built_against_the_conda_python_and_run_starts_every_rank_in_the_env(converged: Cli,
                                                                                      lab: Lab) -> None:
    check = lab.exec(1, f"{PREFIX}/bin/horovodrun", "--check-build", user=SUDO_USER)
    assert check.returncode == 0 and re.search(r"\[X\] PyTorch", check.stdout), check.stdout + check.stderr
    ext = lab.exec(1, "sh", "-c", f"ls {PREFIX}/lib/python3.11/site-packages/horovod/torch/mpi_lib_v2*.so")
    assert ext.returncode == 0 and "cpython-311" in ext.stdout, ext.stdout + ext.stderr
    code = ("import os, socket, sys, horovod.torch as hvd; hvd.init(); "
            "print(f'rank={hvd.rank()} host={socket.gethostname()} conda={os.environ.get(\"CONDA_PREFIX\")} "
            "py={sys.prefix} probe={os.path.exists(sys.prefix + \"/bin/hvd-probe\")}')")
    proc = converged("run", "-np", "4", "--", "python", "-c", code)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    seen = re.findall(r"rank=(\d) host=(\S+) conda=(\S+) py=(\S+) probe=(\S+)", proc.stdout)
    assert sorted(int(s[0]) for s in seen) == [0, 1, 2, 3], proc.stdout
    assert Counter(s[1] for s in seen) == {"node1": 2, "node2": 2}, proc.stdout
    assert {s[2:] for s in seen} == {(PREFIX, PREFIX, "True")}, proc.stdout


def test_a_conda_package_taken_out_of_one_node_is_named_by_check_and_put_back_by_up(converged: Cli,
                                                                                 lab: Lab) -> None:
    removed = lab.exec(2, "sh", "-c", f"cd {PREFIX} && rm -f conda-meta/hvd-probe-*.json bin/hvd-probe "
                                      "share/hvd-probe/VERSION && rmdir share/hvd-probe")
    assert removed.returncode == 0, removed.stderr
    proc = converged("check", "hosts.yaml", "--json")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1 and list(doc["drifted"]) == ["node2"], doc
    named = {d["item"]: d for d in doc["drifted"]["node2"]}
    assert "env.conda.hvd-probe" in named and named["env.conda.hvd-probe"]["role"] == "hvd_pyenv", named
    assert "missing: bin/hvd-probe" in named["env.files"]["found"], named["env.files"]
    rc, up, err = converged.up_json()
    assert rc == 0 and up["converged"] == ["node2"] and up["not_repaired"] == [], err[-4000:]
    assert up["hosts"]["node1"]["changed"] == 0
    assert lab.exec(2, f"{PREFIX}/bin/hvd-probe").stdout.strip() == "hvd-probe 1.0.0"
    proc = converged("check", "hosts.yaml", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["drifted"] == {}, proc.stdout[-3000:]
    assert tree(lab, 1) == tree(lab, 2)


def test_a_second_up_changes_nothing(converged: Cli) -> None:
    rc, doc, err = converged.up_json()
    assert rc == 0, err[-4000:]
    assert all(host["changed"] == 0 for host in doc["hosts"].values()), doc["hosts"]


def conda_records(run) -> list[str]:
    """The env's conda packages as their records name them (name-version-build)."""
    proc = run(f"ls {PREFIX}/conda-meta")
    assert proc.returncode == 0, proc.stderr
    return sorted(name.removesuffix(".json") for name in proc.stdout.split() if name.endswith(".json"))


@pytest.mark.heavy
def test_the_bundle_less_its_packed_env_converges_a_node_with_no_route_out_from_its_own_conda_channel(
        installed: Path, converged: Cli, lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> None:
    """`bundle` gathers the lock's packages into conda/ (an indexed channel). The packed env is taken out of the
    bundle (its manifest written again and pinned), so a bare node on an --internal network, with an empty controller
    cache, must solve and install the env again from that channel alone, and pip from the bundle's pypi/."""
    from ansible_collections.hvd.cluster.plugins.module_utils import hvd_bundle as lib

    out = lab.workdir / "bundle"
    made = converged("bundle", "hosts.yaml", str(out), "--json")
    assert made.returncode == 0, (made.stdout + made.stderr)[-6000:]
    manifest = lib.load(str(out))
    channel = sorted(e["path"] for e in manifest["entries"] if e["path"].startswith("conda/"))
    names = sorted(re.sub(r"-[^-]+-[^-]+\.conda$", "", p.rsplit("/", 1)[1]) for p in channel if p.endswith(".conda"))
    assert names == ["hvd-probe", "pip", "python"], channel  # the lock's three, no more
    assert sum(p.endswith("/repodata.json") for p in channel) >= 1, channel
    for entry in manifest["entries"]:
        if entry["path"].startswith("cache/envs/"):
            (out / entry["path"]).unlink()
    (out / "manifest.yaml").write_text(lib.dump([e for e in manifest["entries"]
                                                 if not e["path"].startswith("cache/envs/")], manifest["made"]))
    pin = hashlib.sha256((out / "manifest.yaml").read_bytes()).hexdigest()

    site = Gapped("cdagap", 1, tmp_path_factory.mktemp("cdagap"))
    site.up()
    share_the_cores(site)
    try:
        (site.workdir / "environment.yml").write_text(ENVIRONMENT)
        site.hosts_yaml("hosts.yaml", STACK, {"bundle": str(out), "bundle_sha256": pin}, slots=2)
        cache = site.workdir / "empty-cache"
        rc, doc, err = Cli(installed, site.workdir).up_json(env={"HVDCLUSTER_CACHE": str(cache)})
        assert rc == 0, err[-8000:]
        assert doc["converged"] == ["node1"], doc
        tasks = task_outcomes(doc["log"])
        assert tasks.get("Solve, lock and install the conda packages with rattler") == {"ok"}, sorted(tasks)
        assert tasks.get("Check every rank's sum") == {"ok"}, tasks
        lock = site.sh(1, f"cat {PREFIX}/hvd-conda.lock").stdout.splitlines()
        assert lock[1] == "@EXPLICIT" and len(lock) == 5, lock
        assert all(line.startswith("file:///") and str(build_channel()) not in line for line in lock[2:]), lock
        assert conda_records(lambda script: site.sh(1, script)) == \
            conda_records(lambda script: lab.exec(1, "sh", "-c", script))
        check = Cli(installed, site.workdir)("check", "hosts.yaml", "--json", env={"HVDCLUSTER_CACHE": str(cache)})
        assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    finally:
        site.down()
