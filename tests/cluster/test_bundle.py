"""An air-gapped cluster converged from an offline bundle (hvdcluster bundle, up with network.bundle).

The bundle is gathered on a connected node of the same image (its own apt and pip resolve everything, behind this
machine's proxy: the CA bundle and the wheelhouse of hosts.yaml). Then two bare nodes on a Docker network created
`--internal` (no route out), reached only through a bastion, converge from the bundle alone to a passing allreduce
(hvd_verify's post-flight), with an empty controller cache: apt reads the bundle's local repository only, pip runs
with --no-index. The bundle is signed (`bundle --sign`) and hosts.yaml names its signer (network.bundle_signers).
A bundle with one file removed fails at once naming that file and its role; an unpinned bundle, one whose packed
env has a byte changed (its .sha256 made again), and one holding files its manifest does not list (a wheel, an sdist
whose build backend would run as root, a conda package) are refused before any node or the controller cache is
touched; `bundle --verify` catches a flipped byte; a listed file changed after the controller's check is refused by
the node that would build from it (hvd_pyenv's offer, run by hand).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hvdcluster import inventory
from tests.cluster.conftest import Cli, run_events, share_the_cores, task_outcomes
from tests.conftest import BIN, ROOT
from tests.lab.cluster import Lab
from tests.lab.gapped import Gapped
from tests.lab.images import docker
from tests.lab.stacks import cpu_stack

pytestmark = pytest.mark.containers

NAME = "gap"
INTERNAL = f"hvdc-{NAME}-internal"
NODES = [f"hvdc-{NAME}-node{i}" for i in (1, 2)]
STACK = cpu_stack()
REMOTE_FETCH = re.compile(r"\b(?:Get|Hit|Ign|Err):\d+ (?:https?|ftp)://")  # apt's fetch lines from a remote source


def in_node(container: str, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", "exec", container, "sh", "-c", script], capture_output=True, text=True)


@pytest.fixture(scope="module")
def made(installed: Path, node_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """The bundle, gathered on a connected node of the node image (converged first), signed by its builder's key."""
    lab = Lab("gapsrc", 1, tmp_path_factory.mktemp("gapsrc"), stack=STACK)
    lab.up()
    out = lab.workdir / "bundle"
    key = lab.workdir / "bundle_signer"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "builder@lab", "-f", str(key)], check=True)
    proc = Cli(installed, lab.workdir)("bundle", "hosts.yaml", str(out), "--json", "--sign", str(key))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    yield {"lab": lab, "dir": out, "first": json.loads(proc.stdout), "cli": Cli(installed, lab.workdir), "key": key}
    lab.down()


@pytest.fixture(scope="module")
def gapped(installed: Path, made: dict, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Two bare nodes with no route out, a bastion, and a hosts.yaml whose only source is the bundle, trusted through
    its signer (allowed_signers); hosts-unpinned.yaml names neither a pin nor a signer."""
    site = Gapped(NAME, 2, tmp_path_factory.mktemp(NAME))
    site.up()
    share_the_cores(site)
    assert site.containers == NODES and site.internal == INTERNAL
    signer = " ".join(made["key"].with_suffix(".pub").read_text().split()[:2])
    (site.workdir / "allowed_signers").write_text(f"builder@lab {signer}\n")
    site.hosts_yaml("hosts.yaml", STACK, {"bundle": str(made["dir"]), "bundle_signers": "allowed_signers"})
    site.hosts_yaml("hosts-unpinned.yaml", STACK, {"bundle": str(made["dir"])})
    yield site.workdir
    site.down()


def test_the_bundle_lists_every_file_with_its_sha256_size_and_why(made: dict) -> None:
    doc, folder = made["first"], made["dir"]
    manifest = (folder / "manifest.yaml").read_text()
    assert doc["files"] == manifest.count("\n- path: ") > 50
    assert set(doc["by_folder"]) >= {"apt", "pypi", "wheelhouse", "cache"}, doc["by_folder"]
    assert doc["fetched"], "a first bundle fetches its files from the resolver"
    # the packages the roles install, resolved with their dependencies by the node's own apt
    for package in ("openmpi-bin", "python3-venv", "zstd", "libc6"):
        assert re.search(rf"path: apt/{re.escape(package)}_\S+\.deb", manifest), package
    assert "path: apt/Packages" in manifest
    assert re.search(r"path: cache/envs/env-[0-9a-f]{16}\.tar\.zst\n", manifest)
    assert re.search(r"path: cache/horovod/[0-9a-f]{16}/horovod-0\.28\.1-\S+\.whl\n", manifest)
    assert re.search(r"path: pypi/horovod-0\.28\.1\.tar\.gz\n", manifest)
    assert doc["manifest_sha256"] == hashlib.sha256((folder / "manifest.yaml").read_bytes()).hexdigest()
    assert doc["signature"] == str(folder / "manifest.yaml.sig") and (folder / "manifest.yaml.sig").is_file()
    verify = made["cli"]("bundle", "--verify", str(folder))
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_a_second_bundle_run_fetches_nothing_that_did_not_change(made: dict) -> None:
    proc = made["cli"]("bundle", "hosts.yaml", str(made["dir"]), "--json")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    doc = json.loads(proc.stdout)
    assert doc["fetched"] == [] and doc["removed"] == [], doc
    assert doc["files"] == made["first"]["files"]
    # nothing changed: the manifest is kept as it was, so its pin and its signature still hold
    assert doc["manifest_sha256"] == made["first"]["manifest_sha256"]
    assert (made["dir"] / "manifest.yaml.sig").is_file()


def test_bundle_verify_catches_a_flipped_byte(made: dict, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-al", str(made["dir"]), str(copy)], check=True)  # hard links: no 1 GB copy
    target = sorted((copy / "pypi").glob("*.whl"))[0]
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01
    target.unlink()  # break the hard link before writing: the original stays intact
    target.write_bytes(bytes(data))
    proc = made["cli"]("bundle", "--verify", str(copy))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"{target}: sha256 " in proc.stdout and "hvd_pyenv" in proc.stdout, proc.stdout
    assert made["cli"]("bundle", "--verify", str(made["dir"])).returncode == 0


def test_a_bundle_with_one_file_removed_fails_at_once_naming_it_and_touches_no_node(installed: Path, made: dict,
                                                                                   gapped: Path, tmp_path: Path) -> None:
    copy = tmp_path / "short"
    subprocess.run(["cp", "-al", str(made["dir"]), str(copy)], check=True)
    gone = sorted((copy / "apt").glob("openmpi-bin_*.deb"))[0]
    gone.unlink()
    proc = Cli(installed, gapped)("up", "hosts.yaml", "--bundle", str(copy))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{gone}: missing from the bundle (needed by hvd_base" in proc.stderr, proc.stderr
    assert not (gapped / "inventories").exists()  # the check comes before any node is contacted
    for node in NODES:
        assert in_node(node, "test -e /etc/apt/apt.conf.d/01hvdcluster-bundle").returncode == 1


def test_an_unpinned_or_poisoned_bundle_is_refused_before_any_node_is_contacted(
        installed: Path, made: dict, gapped: Path, tmp_path: Path) -> None:
    cli, cache = Cli(installed, gapped), tmp_path / "cache"
    proc = cli("up", "hosts-unpinned.yaml", env={"HVDCLUSTER_CACHE": str(cache)})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "is not pinned: set network.bundle_sha256" in proc.stderr
    # the packed env with one byte changed and its .sha256 made again (sizes kept; the signed manifest untouched)
    copy = tmp_path / "poisoned"
    subprocess.run(["cp", "-al", str(made["dir"]), str(copy)], check=True)
    [env] = sorted((copy / "cache" / "envs").glob("env-*.tar.zst"))
    data = bytearray(env.read_bytes())
    data[len(data) // 2] ^= 0x01
    for path, content in ((env, bytes(data)), (env.with_name(env.name + ".sha256"),
                                               f"{hashlib.sha256(data).hexdigest()}  {env.name}\n".encode())):
        path.unlink()  # break the hard link before writing: the original stays intact
        path.write_bytes(content)
    proc = cli("up", "hosts.yaml", "--bundle", str(copy), env={"HVDCLUSTER_CACHE": str(cache)})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert f"{env}: sha256 {hashlib.sha256(data).hexdigest()}, the manifest says" in proc.stderr, proc.stderr
    assert "(needed by hvd_pyenv" in proc.stderr, proc.stderr
    assert not cache.exists() or not any(cache.iterdir()), sorted(cache.rglob("*"))
    assert not (gapped / "inventories").exists()  # the check comes before any node is contacted
    for node in NODES:
        assert in_node(node, "test -e /etc/apt/apt.conf.d/01hvdcluster-bundle").returncode == 1


SENTINEL = "/tmp/hvd-unlisted-backend-ran"  # what the planted sdist's build backend writes wherever it runs


def evil_sdist() -> bytes:
    """An sdist whose in-tree PEP 517 backend writes SENTINEL as soon as pip imports it (to resolve or build it)."""
    members = {
        "evil-1.0/PKG-INFO": "Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n",
        "evil-1.0/pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n',
        "evil-1.0/backend.py": f"import pathlib\npathlib.Path({SENTINEL!r}).write_text('ran')\n",
    }
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, text in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    return out.getvalue()


def test_files_the_manifest_does_not_list_stop_up_naming_each_before_any_node_is_contacted(
        installed: Path, made: dict, gapped: Path, tmp_path: Path) -> None:
    """A signed bundle with files added beside its manifest's: a wheel, an sdist whose build backend would run as root
    on the builder, a conda package. `up` names each and stops before the inventory or any node; nothing ran."""
    copy, cache = tmp_path / "planted", tmp_path / "cache"
    subprocess.run(["cp", "-al", str(made["dir"]), str(copy)], check=True)  # the signed manifest kept as it is
    planted = {"pypi/evil-1.0-py3-none-any.whl": b"PK\x05\x06" + bytes(18), "pypi/evil-1.0.tar.gz": evil_sdist(),
               "conda/noarch/evil-1.0-0.conda": b"PK\x05\x06" + bytes(18)}
    for rel, data in planted.items():
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        (copy / rel).write_bytes(data)
    proc = Cli(installed, gapped)("up", "hosts.yaml", "--bundle", str(copy), env={"HVDCLUSTER_CACHE": str(cache)})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert f"{copy}: holds 3 file(s) its manifest does not list" in proc.stderr, proc.stderr
    assert all(rel in proc.stderr for rel in planted), proc.stderr
    assert not (gapped / "inventories").exists()  # no inventory, no run folder, no log: no node was contacted
    assert not cache.exists() or not any(cache.iterdir()), sorted(cache.rglob("*"))
    assert not Path(SENTINEL).exists()
    for node in NODES:
        assert in_node(node, "test -e /etc/apt/apt.conf.d/01hvdcluster-bundle").returncode == 1
        assert in_node(node, f"test -e {SENTINEL}").returncode == 1
    verify = made["cli"]("bundle", "--verify", str(copy))
    assert verify.returncode == 1 and all(f"{copy / rel}: not in the manifest" in verify.stdout for rel in planted)


def test_a_listed_file_changed_after_the_controllers_check_is_refused_by_the_node_before_use(
        installed: Path, made: dict, gapped: Path, tmp_path: Path) -> None:
    """hvd_pyenv's offer run by hand on node1, as the builder runs it: the inventory `hvdcluster inventory` rendered
    from the checked bundle hands it the manifest's files, then one of them is changed on the controller: node1 hashes
    what it received and refuses it, naming it; the same file restored passes."""
    copy = tmp_path / "swapped"
    subprocess.run(["cp", "-al", str(made["dir"]), str(copy)], check=True)
    hosts = gapped / "hosts-swapped.yaml"
    hosts.write_text((gapped / "hosts.yaml").read_text().replace(json.dumps(str(made["dir"])), json.dumps(str(copy))))
    assert json.dumps(str(copy)) in hosts.read_text()
    out = tmp_path / "inv"
    proc = Cli(installed, gapped)("inventory", hosts.name, "-o", str(out), env={"HVDCLUSTER_CACHE": str(tmp_path / "c")})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    listed = inventory.read(out / NAME).vars["hvd_pyenv_bundle_files"]
    assert {f["path"].split("/")[0] for f in listed} >= {"pypi", "wheelhouse"}, listed
    [small] = sorted((f for f in listed if f["path"].startswith("pypi/")), key=lambda f: (copy / f["path"]).stat().st_size)[:1]
    victim = copy / small["path"]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01
    victim.unlink()  # break the hard link before writing: the original stays intact
    victim.write_bytes(bytes(data))
    (tmp_path / "files.json").write_text(json.dumps({"hvd_pyenv_bundle_files": [small]}))
    book = tmp_path / "offer.yml"
    book.write_text(json.dumps([{"hosts": "node1", "gather_facts": False, "tasks": [
        {"name": "Make a private work folder for this check", "register": "__hvd_pyenv_work",
         "hvd.cluster.hvd_workdir": {"name": "offer-check", "clean": True}},
        {"block": [{"ansible.builtin.include_role": {"name": "hvd.cluster.hvd_pyenv", "tasks_from": "offer"}}],
         "always": [{"ansible.builtin.file": {"path": "{{ __hvd_pyenv_work.path }}", "state": "absent"}}]}]}]))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"}  # a failure's message on one line
    argv = [str(BIN / "ansible-playbook"), "-i", str(out / NAME), str(book), "-e", f"@{tmp_path / 'files.json'}"]
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    name = small["path"].split("/", 1)[1]
    assert proc.returncode != 0, proc.stdout[-4000:]
    assert f"/wheels/{name}: sha256 {hashlib.sha256(data).hexdigest()}, expected {small['sha256']}" in proc.stdout, \
        proc.stdout[-4000:]
    victim.unlink()
    os.link(made["dir"] / small["path"], victim)  # the listed bytes again: accepted
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert in_node(NODES[0], "test -e /var/lib/hvdcluster/offer-check").returncode == 1


@pytest.fixture(scope="module")
def gap_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty controller cache: the env and the wheel must come from the bundle, not from this machine's cache."""
    return tmp_path_factory.mktemp("gap-cache")


@pytest.fixture(scope="module")
def converged(installed: Path, gapped: Path, gap_cache: Path) -> dict:
    rc, doc, err = Cli(installed, gapped).up_json(env={"HVDCLUSTER_CACHE": str(gap_cache)})
    assert rc == 0, err[-8000:]
    return doc


def test_nodes_with_no_route_out_converge_from_the_bundle_to_a_passing_allreduce(converged: dict,
                                                                                  gapped: Path) -> None:
    assert json.loads(docker("network", "inspect", INTERNAL))[0]["Internal"] is True
    assert set(converged["converged"]) == {"node1", "node2"}
    # The first converge installs the packages before the SSH mesh exists: the repository comes from the controller.
    repo = [c for c in converged["transfers"]["copies"] if c["artifact"] == "apt-repository"]
    assert sorted((c["from"], c["to"], c["ok"]) for c in repo) == [("controller", "node1", True),
                                                                    ("controller", "node2", True)], repo
    # the allreduce ran and every rank's sum was right (a skipped allreduce, or the note saying why, proves nothing)
    tasks = task_outcomes(converged["log"])
    assert tasks.get("Allreduce over every slot of every node") == {"ok"}, tasks
    assert tasks.get("Check every rank's sum") == {"ok"}, tasks
    for node in NODES:
        proc = in_node(node, "/opt/hvd/env/bin/python -c 'import horovod.torch as hvd, torch; print(torch.__version__)'")
        assert proc.returncode == 0 and proc.stdout.startswith("2.13.0"), proc.stderr[-2000:]


def test_no_remote_source_was_configured_or_used(converged: dict, gapped: Path) -> None:
    for node in NODES:
        targets = in_node(node, "apt-get indextargets --format '$(URI)'")
        uris = set(targets.stdout.split())
        assert uris and all(uri.startswith("file:/var/cache/hvdcluster/apt") for uri in uris), uris
        pip = in_node(node, "cat /etc/pip.conf")
        assert "no-index = true" in pip.stdout and "index-url" not in pip.stdout, pip.stdout
        logs = in_node(node, "cat /var/log/apt/history.log /var/log/apt/term.log 2>/dev/null")
        assert not REMOTE_FETCH.search(logs.stdout), REMOTE_FETCH.search(logs.stdout)
        # apt is pointed at the bundle's sources only (the node's own files are left as the image had them)
        dump = in_node(node, "apt-config dump").stdout
        assert re.search(r'^Dir::Etc::sourcelist "/var/cache/hvdcluster/sources.list";$', dump, re.M | re.I), dump
        assert re.search(r'^Dir::Etc::sourceparts "/var/cache/hvdcluster/sources.list.d";$', dump, re.M | re.I), dump
    log = Path(converged["log"]).read_text()
    assert not REMOTE_FETCH.search(log), REMOTE_FETCH.search(log)


def test_a_second_full_up_from_the_bundle_changes_nothing(installed: Path, converged: dict, gapped: Path,
                                                          gap_cache: Path) -> None:
    rc, doc, err = Cli(installed, gapped).up_json("--full", env={"HVDCLUSTER_CACHE": str(gap_cache)})
    assert rc == 0, err[-6000:]
    assert {h: s["changed"] for h, s in doc["hosts"].items()} == {"node1": 0, "node2": 0}, doc["hosts"]


def test_run_launches_through_the_bastion(installed: Path, converged: dict, gapped: Path) -> None:
    """`run`'s own ssh (no connection master) checks every node against the inventory's known_hosts: both keys must
    have been recorded by the converge. (It once failed for node1: the by-hand playbook above had opened a master to
    node1 through another inventory, and Ansible used it for `up`, so node1's key was never met nor recorded.)"""
    code = "import horovod.torch as hvd; hvd.init(); print(f'rank={hvd.rank()} size={hvd.size()}')"
    proc = Cli(installed, gapped)("run", "hosts.yaml", "-np", "2", "--", "python", "-c", code)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    assert sorted(re.findall(r"rank=\d size=2", proc.stdout)) == ["rank=0 size=2", "rank=1 size=2"], proc.stdout


@pytest.mark.heavy
def test_an_env_rebuilt_offline_installs_the_bundles_locked_files_with_no_index(installed: Path, converged: dict,
                                                                                 made: dict, gapped: Path,
                                                                                 tmp_path: Path) -> None:
    """A bundle without the packed env, an empty controller cache, and node1's env damaged: node1 must build the env
    again, from the bundle's wheelhouse and pypi/ only (pip --no-index, every file by its locked sha256)."""
    from ansible_collections.hvd.cluster.plugins.module_utils import hvd_bundle as lib
    from hvdcluster.bundle import sign

    copy = tmp_path / "no-env"
    subprocess.run(["cp", "-al", str(made["dir"]), str(copy)], check=True)
    manifest = lib.load(str(copy))
    kept = [e for e in manifest["entries"] if not e["path"].startswith("cache/envs/")]
    for entry in manifest["entries"]:
        if entry["path"].startswith("cache/envs/"):
            (copy / entry["path"]).unlink()
    (copy / "manifest.yaml").unlink()  # a hard link to the original's: replaced, not rewritten
    (copy / "manifest.yaml").write_text(lib.dump(kept, manifest["made"]))
    sign(copy, str(made["key"]))  # a new manifest: signed again by the key allowed_signers names
    assert in_node(NODES[0], "rm /opt/hvd/env/lib/python3.11/site-packages/typing_extensions.py").returncode == 0
    # node2 loses its repository and its kept archive: now that the mesh exists, it gets the archive from node1.
    assert in_node(NODES[1], "rm /var/cache/hvdcluster/apt/.hvd-repo /root/.cache/hvdcluster/artifacts/apt-*.tar"
                   ).returncode == 0
    cache = tmp_path / "empty-cache"
    rc, doc, err = Cli(installed, gapped).up_json("--bundle", str(copy), env={"HVDCLUSTER_CACHE": str(cache)})
    assert rc == 0, err[-8000:]
    outcomes = {}
    for event in run_events(doc["log"]):
        data = event.get("event_data") or {}
        if event.get("event") in ("runner_on_ok", "runner_on_failed") and data.get("host") == "node1":
            outcomes.setdefault(data.get("task"), set()).add(event["event"])
    assert outcomes.get("Install exactly the locked files (hashes required)") == {"runner_on_ok"}, sorted(outcomes)
    assert list((cache / "envs").glob("env-*.tar.zst")), "the rebuilt env is published in the controller cache"
    repo = [c for c in doc["transfers"]["copies"] if c["artifact"] == "apt-repository"]
    assert [(c["from"], c["to"], c["ok"]) for c in repo] == [("node1", "node2", True)], doc["transfers"]
    proc = in_node(NODES[1], "/opt/hvd/env/bin/python -c 'import torch, horovod.torch; print(torch.__version__)'")
    assert proc.returncode == 0 and proc.stdout.startswith("2.13.0"), proc.stderr[-2000:]
