"""Open MPI built from source, for real: Debian's unchanged upstream tarball (tests/debsrc.py) fed to hvd_openmpi from
a URL that carries credentials (a user and password, a token in its query; served by this machine on the lab's own
network, refusing any request without both), with its sha256; built once on one node, cached on the controller,
carried node to node and installed on both nodes of a 2-node cluster (a non-root sudo user); Horovod built against it,
a 4-rank allreduce under `horovodrun --mpi`, a second `up` that changes nothing, and a removed `mpirun` link named by
`check` and repaired by `up`. Neither secret appears in anything hvdcluster printed or the controller keeps.

The suite has a controller cache of its own, empty when it starts: Open MPI (and Horovod against it) compile in every
run of the tier, never taken from an earlier run's cache. The cold build time and the up times are written to the
lab's folder (timings.json) and printed (pytest -s).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import sha256_of

from tests.cluster.conftest import SUDO_USER, Cli, changed_tasks, run_events, share_the_cores, task_outcomes
from tests.debsrc import orig_tarball
from tests.lab.cluster import Lab
from tests.lab.images import docker
from tests.lab.stacks import cpu_stack

pytestmark = pytest.mark.containers

NAME = "oms"
VERSION = "4.1.4"
PREFIX = f"/opt/hvd/openmpi-{VERSION}"
COMPILE = "Compile (several minutes)"
UNPACK = "Check its sha256, unpack it beside the prefix, mark it with the build key, then swap it in"
CACHED = "Verify the cached artifact (a corrupt or truncated one is removed and built again)"  # hvd_fanout's
TIMES: dict[str, float] = {}


USER, PASSWORD, TOKEN = "builder", "hunter2-oms", "SECRET-oms-42"
SECRETS = (PASSWORD, TOKEN)


class _Served:
    """The tarball over HTTP on this machine, for the lab's nodes only: Basic authentication with USER/PASSWORD and
    ``token=TOKEN`` in the query, or 401/403. ``hits``: the paths it served."""

    def __init__(self, tarball: Path, address: str) -> None:
        import base64
        import http.server
        import threading

        want = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        self.hits: list[str] = []
        served = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.headers.get("Authorization") != want:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="mirror"')
                    self.end_headers()
                    return
                if not self.path.endswith(f"/{tarball.name}?token={TOKEN}"):
                    self.send_error(403)
                    return
                data = tarball.read_bytes()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                served.hits.append(self.path.split("?", 1)[0])

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer((address, 0), Handler)
        self.url = (f"http://{USER}:{PASSWORD}@{address}:{self.server.server_address[1]}/mirror/{tarball.name}"
                    f"?token={TOKEN}")
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def lab(node_image: str, tmp_path_factory: pytest.TempPathFactory) -> Lab:
    tarball = Path(orig_tarball("openmpi"))
    assert tarball.name == f"openmpi_{VERSION}.orig.tar.xz", tarball
    lab = Lab(NAME, 2, tmp_path_factory.mktemp(NAME), slots=2, user=SUDO_USER)
    lab.up()
    share_the_cores(lab)
    gateway = docker("network", "inspect", lab.docker_network, "-f", "{{(index .IPAM.Config 0).Gateway}}").strip()
    lab.served = _Served(tarball, gateway)  # type: ignore[attr-defined]
    lab.stack = cpu_stack(mpi={"source": "source", "version": VERSION, "url": lab.served.url,  # type: ignore[attr-defined]
                               "sha256": sha256_of(tarball)})
    lab.write_hosts_yaml()
    yield lab
    lab.served.server.shutdown()  # type: ignore[attr-defined]
    (lab.workdir / "timings.json").write_text(json.dumps(TIMES, indent=1) + "\n")
    print(f"\nopenmpi-from-source timings: {json.dumps(TIMES)}")
    lab.down()


def _timed_up(cli: Cli, label: str, *args: str) -> tuple[int, dict, str]:
    start = time.monotonic()
    out = cli.up_json(*args)
    TIMES[label] = round(time.monotonic() - start, 1)
    return out


def _task_seconds(log: str, task: str) -> float:
    """Wall seconds of a task's runs in the run whose log `up --json` names (0 where it did not run)."""
    total = 0.0
    for event in run_events(log):
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and data.get("task") == task and data.get("duration"):
            total += float(data["duration"])
    return total


@pytest.fixture(scope="module")
def converged(installed: Path, lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> tuple[Cli, dict, str]:
    """The first up, from an empty controller cache of the suite's own: (cli, its summary, all it printed)."""
    cli = Cli(installed, lab.workdir, cache=tmp_path_factory.mktemp("oms-cache"))
    rc, doc, err = _timed_up(cli, "first_up_s")
    assert rc == 0, err[-6000:]
    TIMES["compile_s"] = round(_task_seconds(doc["log"], COMPILE), 1)
    return cli, doc, json.dumps(doc) + err


def _hosts_ok(log: str, task: str) -> set[str]:
    return {e["event_data"]["host"] for e in run_events(log)
            if e.get("event") == "runner_on_ok" and e["event_data"].get("task") == task}


def test_open_mpi_is_built_once_from_an_empty_cache_and_installed_from_the_same_archive_on_every_node(
        converged, lab: Lab) -> None:
    _, doc, _ = converged
    log = doc["log"]
    cache_hit = [e["event_data"]["res"].get("valid") for e in run_events(log)
                 if e.get("event") == "runner_on_ok" and e["event_data"].get("task") == CACHED
                 and "/openmpi/" in str(e["event_data"]["res"].get("path"))]
    assert cache_hit == [False], cache_hit  # looked for once, on the controller, in the suite's empty cache
    assert _hosts_ok(log, COMPILE) == {"node1"}  # exactly one node compiled
    assert lab.served.hits == [f"/mirror/openmpi_{VERSION}.orig.tar.xz"]  # type: ignore[attr-defined]  # fetched once
    assert all(UNPACK in changed_tasks(log, node) for node in ("node1", "node2"))


def test_the_urls_secrets_appear_in_nothing_printed_or_kept(converged, lab: Lab) -> None:
    """The user's password and the token: not in what `up` printed (its --json and its stderr), `plan`'s output,
    the inventory, the run logs (runs/, 0700) or the controller cache; the inventory names the URL's environment
    variable instead. The cluster's private key: in its own file only."""
    cli, doc, printed = converged
    plan = cli("plan", "hosts.yaml", "--json")
    assert plan.returncode == 0 and f"{USER}:" not in plan.stdout and "<redacted>" in plan.stdout, plan.stdout
    for text in (printed, plan.stdout, plan.stderr):
        assert not any(secret in text for secret in SECRETS)
    root = lab.workdir / "inventories" / NAME
    assert (root / "runs").stat().st_mode & 0o777 == 0o700
    kept = [path for folder in (lab.workdir, cli.cache) for path in folder.rglob("*")
            if path.is_file() and path.name != "hosts.yaml"]
    assert len(kept) > 50 and any("/runs/" in str(path) for path in kept)
    leaked = [str(path) for path in kept if any(secret.encode() in path.read_bytes() for secret in SECRETS)]
    assert leaked == []
    # The cluster's private key went to every node as a module argument (hvd_ssh_mesh, no_log): in no run log.
    key = root / "ssh" / "id_ed25519"
    # OpenSSH's ed25519 layout: from the fourth base64 line on, the private half (the lines before it are alike in
    # every such key, or carry the public half).
    secret = [line.encode() for line in key.read_text().splitlines() if line and not line.startswith("-----")][3:]
    assert secret and all(len(line) >= 40 for line in secret), secret
    leaked = [str(path) for path in kept if path != key and any(line in path.read_bytes() for line in secret)]
    assert leaked == []
    assert "HVD_OPENMPI_URL" in (root / "group_vars" / "all" / "stack.yml").read_text()


def test_a_non_interactive_ssh_command_finds_the_built_mpirun_on_every_node(converged, lab: Lab) -> None:
    probe = ("command -v mpirun && readlink -f \"$(command -v mpirun)\" && command -v orted && "
             "ompi_info --parsable | grep -E '^(ompi:version:full|path:prefix):'")
    for target in ("node1", "node2"):  # as mpirun reaches its peers: the login user, over the mesh, no login shell
        proc = lab.exec(1, "ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", target, probe,
                        user=SUDO_USER)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        lines = proc.stdout.split()
        assert lines[0] == "/usr/local/bin/mpirun" and lines[1].startswith(f"{PREFIX}/bin/"), lines
        assert f"ompi:version:full:{VERSION}" in lines and f"path:prefix:{PREFIX}" in lines, lines
    # no distro Open MPI underneath
    for i in (1, 2):
        assert lab.exec(i, "sh", "-c", "dpkg -l 'openmpi-bin' 2>/dev/null | grep -q '^ii'").returncode != 0


def test_horovods_check_build_lists_mpi(converged, lab: Lab) -> None:
    for i in (1, 2):
        check = lab.exec(i, "/opt/hvd/env/bin/horovodrun", "--check-build")
        assert check.returncode == 0, check.stdout + check.stderr
        assert re.search(r"\[X\] MPI", check.stdout), check.stdout
        linked = lab.exec(i, "sh", "-c", "ldd /opt/hvd/env/lib/python3.11/site-packages/horovod/torch/mpi_lib_v2*.so "
                                         "| grep libmpi.so")
        assert PREFIX in linked.stdout, linked.stdout + linked.stderr


ALLREDUCE = ("import torch, horovod.torch as hvd; hvd.init(); "
             "s = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum); "
             "print(f'allreduce rank={hvd.rank()} size={hvd.size()} mpi={hvd.mpi_enabled()} sum={s.item():.0f}')")


def test_four_ranks_allreduce_under_horovodrun_mpi(converged, lab: Lab) -> None:
    cli = converged[0]
    proc = cli("run", "hosts.yaml", "--mpi", "-np", "4", "--", "python", "-c", ALLREDUCE)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    printed = cli("run", "hosts.yaml", "--print", "--mpi", "-np", "4", "--", "python", "-c", "pass")
    assert "-np 4 -H node1:2,node2:2 --mpi" in printed.stdout, printed.stdout
    seen = re.findall(r"allreduce rank=(\d) size=(\d) mpi=(\w+) sum=(\d+)", proc.stdout)
    assert sorted(s[0] for s in seen) == ["0", "1", "2", "3"], proc.stdout
    assert {s[1:] for s in seen} == {("4", "True", "10")}, seen


def test_a_second_up_changes_nothing(converged) -> None:
    cli = converged[0]
    rc, doc, err = _timed_up(cli, "second_up_s")
    assert rc == 0, err[-4000:]
    assert all(h["changed"] == 0 for h in doc["hosts"].values()), doc["hosts"]
    rc, doc, err = _timed_up(cli, "second_full_up_s", "--full")
    assert rc == 0, err[-4000:]
    assert all(h["changed"] == 0 for h in doc["hosts"].values()), {
        n: changed_tasks(doc["log"], n) for n in doc["hosts"]}
    assert task_outcomes(doc["log"]).get(COMPILE, {"skipped"}) == {"skipped"}


def test_check_mode_on_the_converged_cluster_changes_nothing(converged) -> None:
    cli = converged[0]
    rc, doc, err = _timed_up(cli, "check_mode_up_s", "--check")
    assert rc == 0, err[-4000:]
    assert all(h["changed"] == 0 for h in doc["hosts"].values()), doc["hosts"]


def test_a_removed_mpirun_link_is_named_by_check_and_repaired_by_up(converged, lab: Lab) -> None:
    cli = converged[0]
    assert lab.exec(2, "rm", "/usr/local/bin/mpirun").returncode == 0
    proc = cli("check", "hosts.yaml", "--json")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1 and list(doc["drifted"]) == ["node2"], doc
    named = {d["item"]: d for d in doc["drifted"]["node2"]}
    assert "mpi.path" in named and named["mpi.path"]["role"] == "hvd_openmpi", doc["drifted"]["node2"]
    rc, up, err = _timed_up(cli, "repair_up_s")
    assert rc == 0, err[-4000:]
    assert up["converged"] == ["node2"] and up["hosts"]["node1"]["changed"] == 0, up.get("fast_path")
    assert lab.exec(2, "test", "-L", "/usr/local/bin/mpirun").returncode == 0
    proc = cli("check", "hosts.yaml", "--json")
    assert proc.returncode == 0, proc.stdout[-3000:]


# ------------------------------------------------------------------------------------------ under Slurm

SRUN_ALLREDUCE = "Allreduce over every slot under Slurm (srun --mpi=pmix on the Slurm controller)"


@pytest.mark.heavy
def test_under_slurm_the_source_build_links_slurms_pmix_and_four_ranks_allreduce_under_srun(
        installed: Path, node_image: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The same tarball on a lab of its own whose hosts.yaml names Slurm the scheduler: hvd_openmpi configures it
    --with-slurm and Debian's PMIx (with the external libevent and hwloc that needs), hvd_slurm installs Slurm, the
    post-flight's allreduce runs under srun --mpi=pmix, and so does `run --slurm`: 4 ranks, the sum on every rank.
    Heavy: Open MPI and Horovod against it compile (another build key than the suite's own lab)."""
    tarball = Path(orig_tarball("openmpi"))
    lab = Lab("omss", 2, tmp_path_factory.mktemp("omss"), slots=2, user=SUDO_USER,
              scheduler={"kind": "slurm", "controller": "node1", "partition": "mpi"})
    lab.up()
    share_the_cores(lab)
    gateway = docker("network", "inspect", lab.docker_network, "-f", "{{(index .IPAM.Config 0).Gateway}}").strip()
    served = _Served(tarball, gateway)
    try:
        lab.stack = cpu_stack(mpi={"source": "source", "version": VERSION, "url": served.url,
                                   "sha256": sha256_of(tarball)})
        lab.write_hosts_yaml()
        cli = Cli(installed, lab.workdir, cache=tmp_path_factory.mktemp("omss-cache"))
        rc, doc, err = cli.up_json()
        assert rc == 0, err[-6000:]
        assert task_outcomes(doc["log"])[SRUN_ALLREDUCE] == {"ok"}
        info = lab.exec(1, f"{PREFIX}/bin/ompi_info")
        assert "--with-pmix=/usr/lib/x86_64-linux-gnu/pmix2" in info.stdout and "--with-slurm" in info.stdout
        assert re.search(r"MCA pmix: ext3x", info.stdout) and re.search(r"MCA ras: slurm", info.stdout), info.stdout
        proc = cli("run", "hosts.yaml", "--slurm", "--", "python", "-c", ALLREDUCE)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
        seen = re.findall(r"allreduce rank=(\d) size=(\d) mpi=(\w+) sum=(\d+)", proc.stdout)
        assert sorted(s[0] for s in seen) == ["0", "1", "2", "3"] and {s[1:] for s in seen} == {("4", "True", "10")}
    finally:
        served.server.shutdown()
        lab.down()
