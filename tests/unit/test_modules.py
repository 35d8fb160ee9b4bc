"""hvdcluster's own Ansible modules (plugins/modules/), tested through their functions and as Ansible runs them.

These run as root (as the modules do on a node: become) against real folders and real tar/zstd.
"""

from __future__ import annotations

import ast
import errno
import functools
import hashlib
import json
import locale
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

from ansible_collections.hvd.cluster.plugins.modules import hvd_artifact
from ansible_collections.hvd.cluster.plugins.modules import hvd_dist_record
from ansible_collections.hvd.cluster.plugins.modules import hvd_tree
from ansible_collections.hvd.cluster.plugins.modules import hvd_workdir

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="the modules run as root (become) on nodes")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------------------------------ hvd_workdir


@root_only
def test_workdir_is_made_root_owned_0700_and_a_second_call_changes_nothing(tmp_path: Path) -> None:
    state = tmp_path / "state"
    path, changed = hvd_workdir.workdir(str(state), "pyenv", clean=False)
    assert changed and path == str(state / "pyenv")
    for folder in (state, state / "pyenv"):
        info = folder.stat()
        assert info.st_uid == 0 and oct(info.st_mode & 0o777) == "0o700"
    assert hvd_workdir.workdir(str(state), "pyenv", clean=False) == (path, False)


@root_only
@pytest.mark.parametrize("mode, owner", [(0o755, 0), (0o700, 1000), (0o1777, 0)])
def test_workdir_made_by_someone_else_or_too_open_is_refused(tmp_path: Path, mode: int, owner: int) -> None:
    state = tmp_path / "state"
    state.mkdir()
    os.chown(state, owner, owner)
    os.chmod(state, mode)
    with pytest.raises(ValueError, match="refusing to use it"):
        hvd_workdir.workdir(str(state), "pyenv", clean=False)


@root_only
def test_workdir_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / "state").symlink_to(elsewhere)
    with pytest.raises(ValueError, match="symlink"):
        hvd_workdir.workdir(str(tmp_path / "state"), "pyenv", clean=False)


@root_only
def test_clean_workdir_starts_empty(tmp_path: Path) -> None:
    path, _ = hvd_workdir.workdir(str(tmp_path / "state"), "openmpi-4.1.6", clean=False)
    (Path(path) / "Makefile").write_text("all:\n\ttouch /tmp/pwned\n")
    path, changed = hvd_workdir.workdir(str(tmp_path / "state"), "openmpi-4.1.6", clean=True)
    assert changed and os.listdir(path) == []


def test_workdir_names_are_plain() -> None:
    with pytest.raises(ValueError, match="invalid work folder name"):
        hvd_workdir.workdir("/var/lib/hvdcluster", "../etc", clean=False)


# ------------------------------------------------------------------------------------------ hvd_artifact


def test_published_artifact_gets_its_sha256_beside_it_and_verifies(tmp_path: Path) -> None:
    part = tmp_path / "env.tar.zst.part-1"
    part.write_bytes(b"archive" * 1000)
    final = tmp_path / "env.tar.zst"
    hvd_artifact.publish(str(part), str(final), sha(b"archive" * 1000))
    assert not part.exists() and final.read_bytes() == b"archive" * 1000
    assert (tmp_path / "env.tar.zst.sha256").read_text().split()[0] == sha(b"archive" * 1000)
    assert hvd_artifact.verify(str(final), None)["valid"]


def test_a_corrupt_download_is_never_published(tmp_path: Path) -> None:
    part = tmp_path / "w.whl.part-1"
    part.write_bytes(b"truncat")
    with pytest.raises(ValueError, match="corrupt or truncated"):
        hvd_artifact.publish(str(part), str(tmp_path / "w.whl"), sha(b"truncated"))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("damage", ["truncate", "flip", "no-sha256-file"])
def test_a_damaged_cache_entry_is_found_and_named(tmp_path: Path, damage: str) -> None:
    part, final = tmp_path / "a.part", tmp_path / "a"
    part.write_bytes(bytes(range(256)) * 64)
    hvd_artifact.publish(str(part), str(final), sha(bytes(range(256)) * 64))
    if damage == "truncate":
        final.write_bytes(final.read_bytes()[:1000])
    elif damage == "flip":
        data = bytearray(final.read_bytes())
        data[5000] ^= 1
        final.write_bytes(bytes(data))
    else:
        (tmp_path / "a.sha256").unlink()
    result = hvd_artifact.verify(str(final), None)
    assert not result["valid"] and str(final) in result["reason"]


def run_module(name: str, args: dict, check: bool = False, env: dict | None = None) -> dict:
    """Run a module the way Ansible does: its file with the arguments as JSON on stdin (``env``: its environment)."""
    payload = {"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": check}}
    # the collection's folder on the import path, as Ansible's module packaging puts it
    boot = ("import sys, runpy; sys.path.insert(0, sys.argv[1]); "
            "sys.argv = sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", boot, str(ROOT / "collections"), str(ROOT / "plugins" / "modules" / f"{name}.py")],
                          input=json.dumps(payload), capture_output=True, text=True, env=env)
    return json.loads(proc.stdout)


def test_artifact_module_removes_an_invalid_file_unless_in_check_mode(tmp_path: Path) -> None:
    target = tmp_path / "env.tar.zst"
    target.write_bytes(b"x")
    (tmp_path / "env.tar.zst.sha256").write_text(sha(b"y") + "  env.tar.zst\n")
    looked = run_module("hvd_artifact", {"path": str(target)}, check=True)
    assert looked["valid"] is False and looked["changed"] and looked["removed"] and target.exists()
    result = run_module("hvd_artifact", {"path": str(target)})
    assert result["valid"] is False and result["removed"] and "corrupt or truncated" in result["reason"]
    assert run_module("hvd_artifact", {"path": str(target)})["removed"] is False  # missing: nothing to remove
    assert not target.exists() and not (tmp_path / "env.tar.zst.sha256").exists()
    failed = run_module("hvd_artifact", {"path": str(target), "sha256": sha(b"y"), "fail_invalid": True})
    assert failed["failed"] and "missing" in failed["msg"]


def offered_folder(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A work folder holding exactly what an offline bundle offers a build, and its list (path -> sha256)."""
    work = tmp_path / "work"
    files = {"wheels/six-1.16.0-py2.py3-none-any.whl": b"six", "channel/noarch/repodata.json": b"{}",
             "channel/linux-64/python-3.11.9-h0_0.conda": b"python"}
    for rel, data in files.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_bytes(data)
    return work, {rel: sha(data) for rel, data in files.items()}


def test_listed_passes_a_folder_holding_exactly_its_files_in_check_mode_too(tmp_path: Path) -> None:
    work, files = offered_folder(tmp_path)
    assert hvd_artifact.listed(str(work), files) == []
    for check in (False, True):
        result = run_module("hvd_artifact", {"state": "listed", "path": str(work), "files": files}, check=check)
        assert not result.get("failed") and result["changed"] is False, result


def test_listed_names_an_extra_file_a_changed_file_a_missing_file_and_symlinks(tmp_path: Path) -> None:
    work, files = offered_folder(tmp_path)
    (work / "wheels" / "evil-1.0.tar.gz").write_bytes(b"sdist")  # an extra file
    (work / "wheels" / "six-1.16.0-py2.py3-none-any.whl").write_bytes(b"SIX")  # changed, same size
    (work / "channel" / "noarch" / "repodata.json").unlink()
    (work / "channel" / "noarch" / "repodata.json").symlink_to(tmp_path / "elsewhere.json")  # a link at a listed name
    (tmp_path / "elsewhere.json").write_bytes(b"{}")  # with the listed bytes: a link is never followed
    (work / "channel" / "linux-64" / "python-3.11.9-h0_0.conda").unlink()
    (work / "channel" / "osx-64").symlink_to(tmp_path)  # a symlinked folder
    result = run_module("hvd_artifact", {"state": "listed", "path": str(work), "files": files})
    assert result["failed"] and result["msg"].startswith(f"{work}: not exactly the listed files"), result
    assert sorted(result["problems"]) == sorted([
        f"{work}/wheels/evil-1.0.tar.gz: not listed",
        f"{work}/wheels/six-1.16.0-py2.py3-none-any.whl: sha256 {sha(b'SIX')}, expected {sha(b'six')}",
        f"{work}/channel/noarch/repodata.json: a symlink (not followed)",
        f"{work}/channel/linux-64/python-3.11.9-h0_0.conda: missing",
        f"{work}/channel/osx-64: a symlink (not followed)",
    ]), result["problems"]


def test_listed_refuses_a_listed_path_that_leaves_the_folder(tmp_path: Path) -> None:
    work, files = offered_folder(tmp_path)
    problems = hvd_artifact.listed(str(work), {**files, "../outside": sha(b"x"), "wheels/./six": "0" * 64})
    assert "'../outside': not a plain relative path below" in problems[0] and "'wheels/./six'" in problems[1]


def offer(tmp_path: Path, bundle_files: list[dict], between: list | None = None) -> subprocess.CompletedProcess:
    """hvd_pyenv's offer tasks (roles/hvd_pyenv/tasks/offer.yml) run here, as the builder runs them, into a work
    folder of tmp_path; ``between``: tasks run first (a file changed after the controller's check)."""
    book = tmp_path / "offer.yml"
    book.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": [
        *(between or []),
        {"ansible.builtin.include_role": {"name": "hvd.cluster.hvd_pyenv", "tasks_from": "offer"},
         "vars": {"hvd_pyenv_bundle_files": bundle_files, "__hvd_pyenv_work": {"path": str(tmp_path / "work")}}},
    ]}]))
    (tmp_path / "work").mkdir()
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"}  # a failure's message on one line
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}", str(book)],
                          cwd=ROOT, env=env, capture_output=True, text=True)


def bundle_files(tmp_path: Path) -> list[dict]:
    folder = tmp_path / "bundle"
    files = {"pypi/six-1.16.0-py2.py3-none-any.whl": b"six", "wheelhouse/torch-2.13.0-cp311-none-any.whl": b"torch",
             "conda/noarch/repodata.json": b"{}", "conda/linux-64/python-3.11.9-h0_0.conda": b"python"}
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    (folder / "pypi" / "evil-1.0.tar.gz").write_bytes(b"unlisted: never offered")
    return [{"src": str(folder / rel), "path": rel, "sha256": sha(data)} for rel, data in files.items()]


def test_the_builder_is_offered_exactly_the_bundles_listed_files_hashed_again_there(tmp_path: Path) -> None:
    listed = bundle_files(tmp_path)
    proc = offer(tmp_path, listed)
    assert proc.returncode == 0, proc.stdout[-4000:]
    work = tmp_path / "work"
    assert sorted(str(p.relative_to(work)) for p in work.rglob("*") if p.is_file()) == [
        "allowed-sha256.txt", "channel/linux-64/python-3.11.9-h0_0.conda", "channel/noarch/repodata.json", "lock.py",
        "wheels/six-1.16.0-py2.py3-none-any.whl", "wheels/torch-2.13.0-cp311-none-any.whl"]
    assert (work / "allowed-sha256.txt").read_text().split() == sorted(f["sha256"] for f in listed)


def test_a_listed_file_changed_after_the_controllers_check_is_refused_on_the_builder(tmp_path: Path) -> None:
    listed = bundle_files(tmp_path)
    wheel = Path(listed[0]["src"])
    swap = {"ansible.builtin.copy": {"dest": str(wheel), "content": "SIX", "mode": "0644"}}  # same size
    proc = offer(tmp_path, listed, between=[swap])
    assert proc.returncode != 0
    assert f"{tmp_path}/work/wheels/six-1.16.0-py2.py3-none-any.whl: sha256 {sha(b'SIX')}, expected {sha(b'six')}" \
        in proc.stdout, proc.stdout[-4000:]
    assert not (tmp_path / "work" / "lock.py").exists()  # nothing after the check ran


def test_the_env_keys_wheels_from_a_bundles_list_are_those_its_wheelhouse_folder_gave(tmp_path: Path) -> None:
    """An env cached from a bundle made with a wheelhouse keeps its key: the key's `wheels` (hvd_pyenv's main.yml)
    from hvd_pyenv_bundle_files' wheelhouse/ entries equals what listing that folder gave (the expression before)."""
    import yaml

    tasks = yaml.safe_load((ROOT / "roles" / "hvd_pyenv" / "tasks" / "main.yml").read_text())
    [key] = [t for t in tasks if t["name"] == "Compute the environment key from everything that affects it"]
    wheels = key["vars"]["__hvd_pyenv_inputs"]["wheels"]
    before = "{{ (__hvd_pyenv_wheels.files | default([])) | map(attribute='path') | map('basename') | sort }}"
    names = ["torch-2.13.0-cp311-cp311-linux_x86_64.whl", "apex-0.1.tar.gz", "z-1.0.zip"]
    found = {"files": [{"path": f"/srv/bundle/wheelhouse/{n}"} for n in names]}
    listed = [{"src": f"/srv/bundle/{top}/{n}", "path": f"{top}/{n}", "sha256": "0" * 64}
              for top in ("wheelhouse", "pypi") for n in names[:2]] + [
        {"src": "/srv/bundle/wheelhouse/z-1.0.zip", "path": "wheelhouse/z-1.0.zip", "sha256": "1" * 64},
        {"src": "/srv/bundle/conda/noarch/x.conda", "path": "conda/noarch/x.conda", "sha256": "2" * 64}]
    cases = {"before": (before, found, []), "folder": (wheels, found, []), "bundle": (wheels, {"skipped": True}, listed),
             "none": (wheels, {"skipped": True}, [])}
    book = tmp_path / "key.yml"
    book.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"ansible.builtin.debug": {"msg": "KEY " + name + " {{ __w | to_json }}"},
         "vars": {"__w": expr, "__hvd_pyenv_wheels": wheelhouse, "hvd_pyenv_bundle_files": files}}
        for name, (expr, wheelhouse, files) in cases.items()]}]))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}", str(book)],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:]
    said = dict(line.split("KEY ", 1)[1].rstrip('"').split(" ", 1) for line in proc.stdout.splitlines() if "KEY " in line)
    assert said["before"] == said["folder"] == said["bundle"] == json.dumps(sorted(names)), said
    assert said["none"] == "[]"


# ------------------------------------------------------------------------------------------ hvd_tree


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


def test_unpack_installs_the_tree_with_its_marker_written_last(tmp_path: Path) -> None:
    archive, digest = make_archive(tmp_path, {"bin/tool": "v1", "lib/x.py": "x"})
    prefix = tmp_path / "opt" / "env"
    assert hvd_tree.unpack(str(archive), digest, str(prefix), marker_content="k1", **UNPACK) == ""
    assert (prefix / "bin" / "tool").read_text() == "v1" and (prefix / ".hvd-env-key").read_text() == "k1\n"
    assert (prefix / ".hvdcluster").is_file()
    assert sorted(os.listdir(prefix.parent)) == ["env"]  # no sibling left behind


def test_unpack_stages_in_a_private_folder_and_keeps_no_owner_or_setuid_bit_of_the_archive(tmp_path: Path) -> None:
    """An archive whose files claim another owner and setuid/setgid bits: while tar runs, the staging folder is
    0700 (no other user reaches a file before the digest is checked); installed, every file is root's (the test runs
    as root, as the module does) and no special bit is left."""
    src = tmp_path / "hostile"
    (src / "bin").mkdir(parents=True)
    (src / "bin" / "tool").write_text("#!/bin/sh\n")
    (src / "bin" / "tool").chmod(0o6755)
    (src / "shared").mkdir(mode=0o777)
    (src / "shared").chmod(0o3777)
    archive = tmp_path / "env.tar"
    subprocess.run(["tar", "-C", str(src), "--owner=4242", "--group=4242", "-cf", str(archive), "."], check=True)
    seen = []

    def watching(argv, **kwargs):
        if argv[0] == "tar":
            staging = argv[argv.index("-C") + 1]
            seen.append(stat.S_IMODE(os.stat(staging).st_mode))
        return run_command(argv, **kwargs)

    prefix = tmp_path / "env"
    hvd_tree.unpack(str(archive), sha(archive.read_bytes()), str(prefix), marker_content="k1",
                    **{**UNPACK, "run_command": watching})
    assert seen == [0o700]
    for path in (prefix / "bin" / "tool", prefix / "shared", prefix):
        info = path.lstat()
        assert info.st_uid == os.geteuid() and not info.st_mode & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX), path
    assert stat.S_IMODE((prefix / "bin" / "tool").stat().st_mode) == 0o755
    assert stat.S_IMODE(prefix.stat().st_mode) == 0o755


def test_unpack_replaces_the_old_tree_only_once_the_new_one_is_good(tmp_path: Path) -> None:
    good, good_sha = make_archive(tmp_path, {"bin/tool": "v1"})
    prefix = tmp_path / "env"
    hvd_tree.unpack(str(good), good_sha, str(prefix), marker_content="k1", **UNPACK)
    # A new archive that fails its check leaves the old tree in place, untouched.
    (tmp_path / "src-tree" / "bin" / "tool").write_text("v2")
    bad, bad_sha = make_archive(tmp_path, {})
    with pytest.raises(ValueError, match="fails its check"):
        hvd_tree.unpack(str(bad), bad_sha, str(prefix), marker_content="k2", **{**UNPACK, "check_argv": ["false"]})
    assert (prefix / "bin" / "tool").read_text() == "v1" and (prefix / ".hvd-env-key").read_text() == "k1\n"
    # A truncated archive is refused by its sha256, before anything is unpacked.
    data = bad.read_bytes()
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="corrupt or truncated"):
        hvd_tree.unpack(str(bad), bad_sha, str(prefix), marker_content="k2", **UNPACK)
    assert (prefix / ".hvd-env-key").read_text() == "k1\n"
    # A good one replaces it.
    newer, newer_sha = make_archive(tmp_path, {"bin/tool": "v2"})
    assert hvd_tree.unpack(str(newer), newer_sha, str(prefix), marker_content="k2", **UNPACK) == "k1"
    assert (prefix / "bin" / "tool").read_text() == "v2" and (prefix / ".hvd-env-key").read_text() == "k2\n"
    assert sorted(os.listdir(tmp_path)) == sorted(["env", "env.tar.zst", "src-tree"])


def test_unpack_replaces_a_tree_that_overlayfs_will_not_rename(tmp_path: Path) -> None:
    """A node that is a container started from an image holding the env: the env's folder lies in a lower layer of
    an overlayfs, which refuses to rename it (EXDEV) where unpack would move the old tree aside. A real overlayfs
    mount here (root only): the new tree still replaces the old one, its marker last, nothing left beside it, and a
    second replacement works the same way."""
    if os.geteuid() != 0:
        pytest.skip("mounting an overlayfs needs root (CI runs as root)")
    lower, upper, work, merged = (tmp_path / name for name in ("lower", "upper", "work", "merged"))
    for folder in (upper, work, merged):
        folder.mkdir()
    (tmp_path / "a").mkdir()
    first, first_sha = make_archive(tmp_path / "a", {"bin/tool": "v1", "lib/old.py": "old"})
    hvd_tree.unpack(str(first), first_sha, str(lower / "env"), marker_content="k1", **UNPACK)
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", f"lowerdir={lower},upperdir={upper},workdir={work}",
                    str(merged)], check=True)
    try:
        prefix = merged / "env"
        with pytest.raises(OSError) as refused:
            os.rename(prefix, merged / ".env.aside")
        assert refused.value.errno == errno.EXDEV
        (tmp_path / "b").mkdir()
        newer, newer_sha = make_archive(tmp_path / "b", {"bin/tool": "v2", "lib/new.py": "new"})
        assert hvd_tree.unpack(str(newer), newer_sha, str(prefix), marker_content="k2", **UNPACK) == "k1"
        assert (prefix / "bin" / "tool").read_text() == "v2" and not (prefix / "lib" / "old.py").exists()
        assert (prefix / ".hvd-env-key").read_text() == "k2\n" and (prefix / ".hvdcluster").is_file()
        assert hvd_tree.verify(str(prefix), {".hvdcluster", ".hvd-env-key"}, deep=True, exact=True) == []
        assert sorted(os.listdir(merged)) == ["env"]
        assert hvd_tree.unpack(str(first), first_sha, str(prefix), marker_content="k1", **UNPACK) == "k2"
        assert (prefix / "lib" / "old.py").read_text() == "old" and not (prefix / "lib" / "new.py").exists()
        assert hvd_tree.verify(str(prefix), {".hvdcluster", ".hvd-env-key"}, deep=True, exact=True) == []
    finally:
        subprocess.run(["umount", str(merged)], check=True)


def test_leftovers_of_an_interrupted_unpack_are_cleared_and_never_count(tmp_path: Path) -> None:
    archive, digest = make_archive(tmp_path, {"bin/tool": "v1"})
    half = tmp_path / ".env.hvd-new-deadbeef"
    (half / "bin").mkdir(parents=True)
    (half / ".hvd-env-key").write_text("k1\n")
    hvd_tree.unpack(str(archive), digest, str(tmp_path / "env"), marker_content="k1", **UNPACK)
    assert not half.exists()


@pytest.mark.parametrize("state", ["absent", "owned", "unpacked"])
def test_a_prefix_not_made_by_hvdcluster_is_never_deleted_or_replaced(tmp_path: Path, state: str) -> None:
    foreign = tmp_path / "usr"
    (foreign / "bin").mkdir(parents=True)
    (foreign / "bin" / "ls").write_text("precious")
    archive, digest = make_archive(tmp_path, {"bin/tool": "v1"})
    args = {"path": str(foreign), "state": state, "marker": ".hvd-env-key"}
    if state == "unpacked":
        args |= {"src": str(archive), "sha256": digest, "marker_content": "k1"}
    result = run_module("hvd_tree", args)
    assert result.get("failed") and "was not made by hvdcluster" in result["msg"]
    assert (foreign / "bin" / "ls").read_text() == "precious"


def test_owned_then_absent_removes_only_our_tree(tmp_path: Path) -> None:
    prefix = tmp_path / "env"
    assert run_module("hvd_tree", {"path": str(prefix), "state": "owned"})["changed"]
    assert not run_module("hvd_tree", {"path": str(prefix), "state": "owned"})["changed"]
    (prefix / "bin").mkdir()
    assert run_module("hvd_tree", {"path": str(prefix), "state": "absent"})["changed"]
    assert not prefix.exists()


def test_the_module_unpacks_through_run_command_and_a_second_run_changes_nothing(tmp_path: Path) -> None:
    """As Ansible runs it: tar reads the archive from the pipe AnsibleModule.run_command hands it (pass_fds)."""
    archive, digest = make_archive(tmp_path, {"bin/tool": "v1", "lib/x.py": "x"})
    args = {"path": str(tmp_path / "env"), "src": str(archive), "sha256": digest, "marker": ".hvd-env-key",
            "marker_content": "k1", "check_argv": ["test", "-f", "{root}/bin/tool"]}
    result = run_module("hvd_tree", args)
    assert (result.get("failed"), result["changed"], result["previous"]) == (None, True, "")
    assert (tmp_path / "env" / "bin" / "tool").read_text() == "v1"
    assert run_module("hvd_tree", args)["changed"] is False
    failed = run_module("hvd_tree", {**args, "marker_content": "k2", "check_argv": ["test", "-f", "{root}/nothing"]})
    assert failed["failed"] and "fails its check" in failed["msg"]
    assert (tmp_path / "env" / ".hvd-env-key").read_text() == "k1\n"


def test_an_uncompressed_archive_of_several_blocks_unpacks_from_the_pipe(tmp_path: Path) -> None:
    """A plain .tar read from a pipe in short reads (--read-full-records, as tar does for stdin)."""
    payload = os.urandom(5 << 20)
    (tmp_path / "src" / "lib").mkdir(parents=True)
    (tmp_path / "src" / "lib" / "blob").write_bytes(payload)
    archive = tmp_path / "env.tar"
    subprocess.run(["tar", "-C", str(tmp_path / "src"), "-cf", str(archive), "."], check=True)
    result = run_module("hvd_tree", {"path": str(tmp_path / "env"), "src": str(archive), "marker": ".hvd-env-key",
                                     "sha256": sha(archive.read_bytes()), "marker_content": "k1"})
    assert result["changed"] and not result.get("failed")
    assert (tmp_path / "env" / "lib" / "blob").read_bytes() == payload


def test_an_archive_tar_cannot_read_fails_with_tars_words_and_leaves_nothing(tmp_path: Path) -> None:
    """tar (zstd) stops at the first bytes: the rest is still hashed (a broken pipe), the digest matches, tar's
    message is the error, and no tree or sibling is left."""
    archive = tmp_path / "env.tar.zst"
    archive.write_bytes(os.urandom(3 << 20))
    with pytest.raises(ValueError, match=r"unpacking .* failed: .*\S"):
        hvd_tree.unpack(str(archive), sha(archive.read_bytes()), str(tmp_path / "env"), marker_content="k1",
                        **UNPACK)
    assert archive.exists() and sorted(os.listdir(tmp_path)) == ["env.tar.zst"]


# ------------------------------------------------------------------------------------------ hvd_lease

import signal  # noqa: E402
import socket  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

from ansible_collections.hvd.cluster.plugins.modules import hvd_lease

ME = {"pid": os.getpid(), "start": hvd_lease.process(os.getpid())["start"]}  # a live holder: this test process


def _reaped() -> dict:
    """A holder whose process has ended (and been reaped): its pid is gone."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return {"pid": proc.pid, "start": None}


def test_lease_is_created_0600_naming_the_run_and_released_by_it(tmp_path: Path) -> None:
    entry = tmp_path / "envs" / "env-k.tar.zst"
    taken = hvd_lease.acquire(str(entry), "run-a", owner=ME)
    lease = tmp_path / "envs" / "env-k.tar.zst.lease"
    assert taken["acquired"] and not taken["waited"] and not taken["entry_ready"] and taken["took_over"] is None
    assert oct(lease.stat().st_mode & 0o777) == "0o600"
    holder = json.loads(lease.read_text())
    assert (holder["run_id"], holder["pid"], holder["host"]) == ("run-a", os.getpid(), socket.gethostname())
    assert holder["started"] and holder["pid_start"] == ME["start"]
    again = hvd_lease.acquire(str(entry), "run-a", owner=ME)  # the same run asking again holds it already
    assert again["acquired"] and not again["changed"]
    assert hvd_lease.release(str(entry), "run-a")["released"] and not lease.exists()
    assert not hvd_lease.release(str(entry), "run-a")["changed"]  # nothing left to release


def test_a_lease_of_another_run_is_not_released_and_its_holder_is_named(tmp_path: Path) -> None:
    entry = tmp_path / "env.tar.zst"
    hvd_lease.acquire(str(entry), "run-a", owner=ME)
    refused = hvd_lease.release(str(entry), "run-b")
    assert not refused["released"] and not refused["changed"] and "run run-a" in refused["msg"]
    assert json.loads((tmp_path / "env.tar.zst.lease").read_text())["run_id"] == "run-a"


def test_a_second_run_waits_for_the_lease_and_is_told_the_entry_was_published(tmp_path: Path) -> None:
    entry = tmp_path / "env.tar.zst"
    hvd_lease.acquire(str(entry), "builder", owner=ME)
    seen = hvd_lease.acquire(str(entry), "waiter", wait=False, owner=ME)
    assert not seen["acquired"] and seen["holder"]["run_id"] == "builder"

    def build_and_publish() -> None:
        time.sleep(0.5)
        part = tmp_path / "env.tar.zst.part-builder"
        part.write_bytes(b"env")
        hvd_artifact.publish(str(part), str(entry), sha(b"env"))
        hvd_lease.release(str(entry), "builder")

    builder = threading.Thread(target=build_and_publish)
    builder.start()
    try:
        taken = hvd_lease.acquire(str(entry), "waiter", timeout=30, poll_interval=0.05, owner=ME)
    finally:
        builder.join()
    assert taken["acquired"] and taken["waited"] and taken["entry_ready"] and taken["took_over"] is None
    assert json.loads((tmp_path / "env.tar.zst.lease").read_text())["run_id"] == "waiter"


def test_a_second_run_whose_builder_failed_takes_the_lease_and_builds(tmp_path: Path) -> None:
    entry = tmp_path / "env.tar.zst"
    hvd_lease.acquire(str(entry), "builder", owner=ME)
    threading.Timer(0.3, hvd_lease.release, (str(entry), "builder")).start()  # released without publishing
    taken = hvd_lease.acquire(str(entry), "waiter", timeout=30, poll_interval=0.05, owner=ME)
    assert taken["acquired"] and taken["waited"] and not taken["entry_ready"]


def test_a_lease_whose_pid_is_gone_is_taken_over_and_named(tmp_path: Path) -> None:
    entry = tmp_path / "env.tar.zst"
    hvd_lease.acquire(str(entry), "killed-run", owner=_reaped())
    taken = hvd_lease.acquire(str(entry), "next-run", timeout=0, owner=ME)
    assert taken["acquired"] and not taken["waited"]
    assert taken["took_over"]["run_id"] == "killed-run" and "is gone" in taken["stale_reason"]
    assert json.loads((tmp_path / "env.tar.zst.lease").read_text())["run_id"] == "next-run"


def test_a_lease_whose_pid_is_another_process_now_is_taken_over(tmp_path: Path) -> None:
    entry = tmp_path / "env.tar.zst"
    hvd_lease.acquire(str(entry), "old-run", owner={"pid": os.getpid(), "start": "1"})  # pid reused since
    taken = hvd_lease.acquire(str(entry), "next-run", timeout=0, owner=ME)
    assert taken["took_over"]["run_id"] == "old-run" and "another process" in taken["stale_reason"]


class Clock:
    """hvd_lease's clock in a test: ``sleep`` only moves ``monotonic`` on, and is recorded."""

    def __init__(self) -> None:
        self.now, self.sleeps = 1000.0, []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    time = staticmethod(time.time)  # the age of a lease from another host: not used here


def test_a_lease_held_by_a_live_run_times_out_with_a_message_naming_the_holder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = tmp_path / "env.tar.zst"
    holder = hvd_lease.acquire(str(entry), "run-a", owner=ME)["holder"]
    clock = Clock()
    monkeypatch.setattr(hvd_lease, "time", clock)
    with pytest.raises(hvd_lease.LeaseTimeout) as failure:
        hvd_lease.acquire(str(entry), "run-b", timeout=1, poll_interval=0.25, owner=ME)
    assert clock.sleeps == [0.25] * 4  # it polled every poll_interval until the timeout, then gave up
    for part in ("run run-a", f"pid {os.getpid()}", socket.gethostname(), holder["started"], str(entry) + ".lease"):
        assert part in str(failure.value)


def test_a_lease_from_another_host_is_stale_only_after_stale_after(tmp_path: Path) -> None:
    entry = tmp_path / "env.tar.zst"
    lease = tmp_path / "env.tar.zst.lease"
    record = {"run_id": "elsewhere", "pid": 1, "host": "other-controller", "started": "then",
              "started_epoch": time.time() - 120}
    lease.write_text(json.dumps(record))
    assert not hvd_lease.acquire(str(entry), "here", wait=False, stale_after=3600, owner=ME)["acquired"]
    taken = hvd_lease.acquire(str(entry), "here", wait=False, stale_after=60, owner=ME)
    assert taken["acquired"] and taken["took_over"]["host"] == "other-controller"


def test_an_empty_lease_is_being_written_until_it_is_old(tmp_path: Path) -> None:
    entry = tmp_path / "env.tar.zst"
    lease = tmp_path / "env.tar.zst.lease"
    lease.touch()
    assert not hvd_lease.acquire(str(entry), "here", wait=False, owner=ME)["acquired"]
    os.utime(lease, (time.time() - 3600, time.time() - 3600))
    assert hvd_lease.acquire(str(entry), "here", wait=False, owner=ME)["acquired"]


def test_a_folder_entry_is_ready_once_it_holds_a_published_file(tmp_path: Path) -> None:
    entry = tmp_path / "horovod" / "k"
    entry.mkdir(parents=True)
    (entry / "horovod-0.28.1-cp311-linux_x86_64.whl.part-1").write_bytes(b"half")
    assert not hvd_lease.entry_ready(str(entry))
    part = entry / "horovod-0.28.1-cp311-linux_x86_64.whl.part-2"
    part.write_bytes(b"wheel")
    hvd_artifact.publish(str(part), str(entry / "horovod-0.28.1-cp311-linux_x86_64.whl"), sha(b"wheel"))
    assert hvd_lease.entry_ready(str(entry))
    assert hvd_lease.acquire(str(entry), "r", owner=ME)["lease"] == str(tmp_path / "horovod" / "k.lease")


def _become(uid: int) -> None:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


@root_only
def test_a_stale_lease_of_another_user_is_never_reported_acquired_and_fails_naming_its_owner(tmp_path: Path) -> None:
    """A cache two accounts share (a sticky 1777 folder): the lease of uid 12346 cannot be opened by uid 12345, so it
    can be neither read nor replaced. Young, it is held (not acquired); stale, the run fails naming the lease, its
    owner and how to remove it; released by another run, it stays. The lease is the same file at the end."""
    import multiprocessing
    import shutil
    import tempfile

    shared = Path(tempfile.mkdtemp(dir="/tmp"))  # tmp_path's parents are root's 0700: uid 12345 could not pass
    try:
        shared.chmod(0o1777)
        entry, lease = shared / "env.tar.zst", shared / "env.tar.zst.lease"
        lease.write_text(json.dumps({"run_id": "theirs", "pid": 1, "host": "elsewhere", "started_epoch": time.time()}))
        lease.chmod(0o600)
        os.chown(lease, 12346, 12346)
        before = lease.stat()
        with multiprocessing.get_context("fork").Pool(1, initializer=_become, initargs=(12345,)) as pool:
            young = pool.apply(hvd_lease.acquire, (str(entry), "mine"), {"wait": False, "owner": ME})
            assert not young["acquired"] and not young["changed"], young
            os.utime(lease, (time.time() - 7200, time.time() - 7200))
            with pytest.raises(hvd_lease.LeaseError) as failure:
                pool.apply(hvd_lease.acquire, (str(entry), "mine"), {"stale_after": 60, "owner": ME})
            released = pool.apply(hvd_lease.release, (str(entry), "mine"))
        message = str(failure.value)
        for part in (str(lease), "stale build lease of another user (uid 12346", "remove it as uid 12346 or root",
                     f"rm {lease}"):
            assert part in message, message
        assert not released["released"] and "another user (uid 12346) holds it" in released["msg"], released
        after = lease.stat()
        assert (after.st_ino, after.st_uid) == (before.st_ino, 12346)
    finally:
        shutil.rmtree(shared)


def _take(args: tuple[str, str, dict]) -> bool:
    return hvd_lease.acquire(args[0], args[1], wait=False, owner=args[2])["acquired"]


@pytest.mark.parametrize("start", ["free", "stale"])
def test_of_runs_racing_for_a_free_or_stale_lease_exactly_one_gets_it(tmp_path: Path, start: str) -> None:
    import multiprocessing

    entry = str(tmp_path / "env.tar.zst")
    if start == "stale":
        hvd_lease.acquire(entry, "killed-run", owner=_reaped())
    with multiprocessing.get_context("fork").Pool(8) as pool:
        won = pool.map(_take, [(entry, f"run-{i}", ME) for i in range(16)])
    assert won.count(True) == 1


def test_lease_module_names_the_holder_and_changes_nothing_in_check_mode(tmp_path: Path) -> None:
    entry = str(tmp_path / "env.tar.zst")
    looked = run_module("hvd_lease", {"path": entry, "run_id": "run-a"}, check=True)
    assert looked["acquired"] and looked["changed"] and not (tmp_path / "env.tar.zst.lease").exists()
    taken = run_module("hvd_lease", {"path": entry, "run_id": "run-a"})
    assert taken["acquired"] and taken["holder"]["run_id"] == "run-a"
    busy = run_module("hvd_lease", {"path": entry, "run_id": "run-b", "wait": False})
    assert not busy["acquired"] and busy["holder"]["run_id"] == "run-a"
    late = run_module("hvd_lease", {"path": entry, "run_id": "run-b", "timeout": 0})
    assert late["failed"] and "being built by run run-a" in late["msg"]
    refused = run_module("hvd_lease", {"path": entry, "run_id": "run-b", "state": "released"})
    assert not refused["changed"] and not refused["released"] and "run run-a" in refused["msg"]
    assert run_module("hvd_lease", {"path": entry, "run_id": "run-a", "state": "released"}, check=True)["changed"]
    assert (tmp_path / "env.tar.zst.lease").exists()
    assert run_module("hvd_lease", {"path": entry, "run_id": "run-a", "state": "released"})["released"]
    assert not (tmp_path / "env.tar.zst.lease").exists()


def playbook(tmp_path: Path, name: str, tasks: list) -> Path:
    path = tmp_path / f"{name}.yml"
    path.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    return path


def ansible_playbook(book: Path, **popen) -> subprocess.Popen:
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
            "-e", f"ansible_python_interpreter={sys.executable}", str(book)]
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            **popen)


def kill_every_process_of(book: Path) -> None:
    """SIGKILL every process running ``book``: Ansible starts each task's worker in a session of its own, which a
    kill of the run's process group does not reach (left alone, it outlives the test)."""
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(book).encode() in (proc / "cmdline").read_bytes().split(b"\0"):
                os.kill(int(proc.name), signal.SIGKILL)
        except OSError:
            pass  # gone meanwhile


def test_a_run_holds_the_lease_by_its_ansible_playbook_pid_and_when_killed_the_next_run_takes_it_over(
        tmp_path: Path) -> None:
    entry = str(tmp_path / "cache" / "envs" / "env-k.tar.zst")
    later = tmp_path / "later-task-ran"
    book = playbook(tmp_path, "killed", [
        {"hvd.cluster.hvd_lease": {"path": entry, "run_id": "killed-run"}},
        {"ansible.builtin.file": {"path": str(later), "state": "touch", "mode": "0644"}},
        {"ansible.builtin.pause": {"seconds": 120}},
    ])
    killed = ansible_playbook(book, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not later.exists() and killed.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert later.exists(), killed.communicate()[0] if killed.poll() is not None else "no later task"
        holder = json.loads(Path(entry + ".lease").read_text())
        # The pid of the run's ansible-playbook, still alive at a later task (not the worker of the task that took it).
        assert holder["pid"] == killed.pid and holder["run_id"] == "killed-run"
        os.kill(holder["pid"], 0)
    finally:
        os.killpg(killed.pid, signal.SIGKILL)
        kill_every_process_of(book)
        killed.communicate()
    with pytest.raises(ProcessLookupError):
        os.kill(holder["pid"], 0)
    assert Path(entry + ".lease").exists()  # a killed run releases nothing...
    nxt = ansible_playbook(playbook(tmp_path, "next", [
        {"hvd.cluster.hvd_lease": {"path": entry, "run_id": "next-run", "timeout": 5}, "register": "lease"},
        {"ansible.builtin.assert": {"that": [
            "lease.acquired", "not lease.waited", "lease.took_over.run_id == 'killed-run'",
            "lease.stale_reason is search('is gone')"]}},
        {"hvd.cluster.hvd_lease": {"path": entry, "run_id": "next-run", "state": "released"}},
    ]))
    out = nxt.communicate(timeout=300)[0]
    assert nxt.returncode == 0, out  # ...and does not block the next one
    assert not Path(entry + ".lease").exists()


# ------------------------------------------------------------------------------------------ hvd_dist_record


def install_dist(prefix: Path, folder: str, record: bytes = b"horovod/__init__.py,sha256=abc,10\n") -> Path:
    """A distribution as pip leaves it: <prefix>/lib/python3.11/site-packages/<folder>/RECORD."""
    info = prefix / "lib" / "python3.11" / "site-packages" / folder
    info.mkdir(parents=True, exist_ok=True)
    (info / "RECORD").write_bytes(record)
    return info / "RECORD"


def test_dist_record_fingerprint_is_the_records_mtime_and_content(tmp_path: Path) -> None:
    record = install_dist(tmp_path / "env", "horovod-0.28.1.dist-info")
    install_dist(tmp_path / "env", "horovod_extras-1.0.dist-info")  # another distribution whose name starts alike
    found = hvd_dist_record.fingerprint(str(tmp_path / "env"), "horovod")
    assert found["record"] == str(record)
    assert found["sha256"] == sha(b"%d " % record.stat().st_mtime_ns + record.read_bytes())
    assert "files_sha256" not in found


@pytest.mark.parametrize("folder", ["Horovod-0.28.1.dist-info", "horovod-0.28.1.dist-info"])
def test_dist_record_is_found_by_the_name_packaging_normalises(tmp_path: Path, folder: str) -> None:
    install_dist(tmp_path / "env", folder)
    assert hvd_dist_record.fingerprint(str(tmp_path / "env"), "Horovod")["sha256"] != "none"
    install_dist(tmp_path / "env", "nvidia_nccl_cu12-2.21.5.dist-info")
    assert hvd_dist_record.fingerprint(str(tmp_path / "env"), "nvidia-nccl.cu12")["sha256"] != "none"


def test_any_reinstall_changes_the_fingerprint_even_of_the_same_wheel(tmp_path: Path) -> None:
    record = install_dist(tmp_path / "env", "horovod-0.28.1.dist-info")
    before = hvd_dist_record.fingerprint(str(tmp_path / "env"), "horovod")["sha256"]
    stat = record.stat()
    os.utime(record, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # pip rewrote it, same bytes
    assert hvd_dist_record.fingerprint(str(tmp_path / "env"), "horovod")["sha256"] != before


def test_a_distribution_not_installed_fingerprints_as_none(tmp_path: Path) -> None:
    install_dist(tmp_path / "env", "torch-2.3.1.dist-info")
    assert hvd_dist_record.fingerprint(str(tmp_path / "env"), "horovod") == {"record": "", "sha256": "none"}
    assert hvd_dist_record.fingerprint(str(tmp_path / "missing"), "horovod")["sha256"] == "none"


def stamped(path: Path) -> bytes:
    """What the verify fingerprint feeds for one file: path, mtime_ns, content; a missing file as path and '-'."""
    if not path.exists():
        return os.fsencode(path) + b" -\0"
    return b"%s %d\0" % (os.fsencode(path), path.stat().st_mtime_ns) + path.read_bytes() + b"\0"


def test_files_digest_covers_each_file_then_the_record_and_counts_missing_files(tmp_path: Path) -> None:
    hosts, gone = tmp_path / "hosts", tmp_path / "hvd_cuda.fact"
    hosts.write_text("10.0.0.1 gpu01\n")
    record = install_dist(tmp_path / "env", "horovod-0.28.1.dist-info")
    files = [str(hosts), str(gone)]
    found = hvd_dist_record.fingerprint(str(tmp_path / "env"), "horovod", files)
    assert found["files_sha256"] == sha(stamped(hosts) + stamped(gone) + stamped(record))
    record.unlink()
    assert hvd_dist_record.fingerprint(str(tmp_path / "env"), "horovod", files)["files_sha256"] == sha(
        stamped(hosts) + stamped(gone) + b"no horovod")


def test_files_digest_changes_when_a_file_is_rewritten_with_the_same_bytes(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("10.0.0.1 gpu01\n")
    before = hvd_dist_record.fingerprint(str(tmp_path / "env"), "horovod", [str(hosts)])["files_sha256"]
    stat = hosts.stat()
    os.utime(hosts, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert hvd_dist_record.fingerprint(str(tmp_path / "env"), "horovod", [str(hosts)])["files_sha256"] != before


def test_dist_record_module_only_reads_and_runs_in_check_mode(tmp_path: Path) -> None:
    record = install_dist(tmp_path / "env", "horovod-0.28.1.dist-info")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    result = run_module("hvd_dist_record", {"prefix": str(tmp_path / "env"), "files": [str(record)]}, check=True)
    assert result["changed"] is False and not result.get("failed")
    assert result["record"] == str(record) and result["sha256"] == hvd_dist_record.fingerprint(
        str(tmp_path / "env"), "horovod")["sha256"]
    assert len(result["files_sha256"]) == 64
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


# ------------------------------------------------------------------------------------------ root uses what it verified


def big_archive(tmp_path: Path, name: str, payload: bytes) -> tuple[Path, str]:
    """An archive of several MiB (incompressible), so it is read in more than one block."""
    src = tmp_path / f"tree-{name}"
    (src / "lib").mkdir(parents=True)
    (src / "lib" / "blob").write_bytes(payload)
    archive = tmp_path / f"{name}.tar.zst"
    subprocess.run(["tar", "-C", str(src), "--zstd", "-cf", str(archive), "."], check=True)
    return archive, sha(archive.read_bytes())


def test_an_archive_swapped_after_its_check_cannot_change_what_root_unpacks(tmp_path: Path, monkeypatch) -> None:
    """The login user's copy is replaced (rename) while root reads it: root installs the bytes it hashed."""
    good_bytes, evil_bytes = os.urandom(3 << 20), os.urandom(3 << 20)
    good, digest = big_archive(tmp_path, "good", good_bytes)
    evil, _ = big_archive(tmp_path, "evil", evil_bytes)
    swapped = []
    real = hvd_tree._extract
    monkeypatch.setattr(hvd_tree, "_extract", lambda src, new, want, run: real(
        src, new, want, run, between=lambda: swapped or swapped.append(os.replace(evil, good))))
    hvd_tree.unpack(str(good), digest, str(tmp_path / "env"), marker_content="k1", **UNPACK)
    assert swapped and (tmp_path / "env" / "lib" / "blob").read_bytes() == good_bytes


def test_an_archive_rewritten_in_place_while_root_reads_it_is_refused(tmp_path: Path, monkeypatch) -> None:
    good, digest = big_archive(tmp_path, "good", os.urandom(3 << 20))

    def rewrite() -> None:
        with open(good, "r+b") as handle:
            handle.seek(2 << 20)
            handle.write(b"\0" * 4096)

    real = hvd_tree._extract
    monkeypatch.setattr(hvd_tree, "_extract", lambda src, new, want, run: real(src, new, want, run, between=rewrite))
    with pytest.raises(ValueError, match="corrupt or truncated"):
        hvd_tree.unpack(str(good), digest, str(tmp_path / "env"), marker_content="k1", **UNPACK)
    assert not (tmp_path / "env").exists() and [p.name for p in tmp_path.iterdir() if "hvd-new" in p.name] == []


def test_a_wheel_swapped_between_the_check_and_the_install_is_copied_as_verified(tmp_path: Path) -> None:
    """hvd_artifact state=copied: root copies the login user's wheel into its own folder hashing what it writes;
    the wheel swapped mid-copy changes nothing, a wheel rewritten in place is refused and leaves no file."""
    from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import copy_verified

    good_bytes = os.urandom(3 << 20)
    wheel = tmp_path / "horovod-0.28.1-cp311-linux_x86_64.whl"
    wheel.write_bytes(good_bytes)
    (tmp_path / "evil.whl").write_bytes(os.urandom(3 << 20))
    root_dir = tmp_path / "root"
    root_dir.mkdir(mode=0o700)
    swapped: list = []
    copy_verified(str(wheel), str(root_dir / wheel.name), sha(good_bytes),
                  between=lambda: swapped or swapped.append(os.replace(tmp_path / "evil.whl", wheel)))
    assert swapped and (root_dir / wheel.name).read_bytes() == good_bytes
    assert oct((root_dir / wheel.name).stat().st_mode & 0o777) == "0o600"
    wheel.write_bytes(good_bytes)

    def rewrite() -> None:
        with open(wheel, "r+b") as handle:
            handle.seek(2 << 20)
            handle.write(b"\0" * 4096)

    (root_dir / wheel.name).unlink()
    with pytest.raises(ValueError, match="not the verified file"):
        copy_verified(str(wheel), str(root_dir / wheel.name), sha(good_bytes), between=rewrite)
    assert list(root_dir.iterdir()) == []
    result = run_module("hvd_artifact", {"state": "copied", "src": str(wheel),
                                         "path": str(root_dir / "w.whl"), "sha256": sha(good_bytes)})
    assert result["failed"] and "not the verified file" in result["msg"] and list(root_dir.iterdir()) == []


# ------------------------------------------------------------------------------------------ hvd_kernel_guard


def test_kernel_guard_names_the_next_boot_kernel_and_why_its_modules_are_missing(tmp_path: Path) -> None:
    """A node tree (no GPU is needed to read one): two kernel images, no GRUB config, so the newest boots next. Its
    modules are missing while its headers are; once built, the guard is ok; the older kernel is judged when asked."""
    root = tmp_path / "node"
    for kernel in ("6.1.0-25-amd64", "6.1.0-27-amd64"):
        (root / "boot").mkdir(parents=True, exist_ok=True)
        (root / "boot" / f"vmlinuz-{kernel}").write_bytes(b"MZ")
    old = root / "lib/modules/6.1.0-25-amd64/updates/dkms"
    old.mkdir(parents=True)
    for name in ("nvidia", "nvidia-modeset", "nvidia-uvm"):
        (old / f"{name}.ko").write_bytes(b"\x7fELF")
    missing = run_module("hvd_kernel_guard", {"root": str(root)}, check=True)
    assert missing["changed"] is False and missing["ok"] is False, missing
    assert missing["kernel"] == "6.1.0-27-amd64" and missing["cause"] == "headers missing", missing
    assert missing["missing"] == ["nvidia", "nvidia-modeset", "nvidia-uvm"]
    assert "install linux-headers-6.1.0-27-amd64" in missing["message"], missing["message"]
    assert run_module("hvd_kernel_guard", {"root": str(root), "kernel": "6.1.0-25-amd64"})["ok"] is True
    (root / "usr/src/linux-headers-6.1.0-27-amd64").mkdir(parents=True)
    assert run_module("hvd_kernel_guard", {"root": str(root)})["cause"] == "not built"
    built = root / "lib/modules/6.1.0-27-amd64/updates/dkms"
    built.mkdir(parents=True)
    for name in ("nvidia", "nvidia-modeset", "nvidia-uvm"):
        (built / f"{name}.ko.xz").write_bytes(b"\x7fELF")
    done = run_module("hvd_kernel_guard", {"root": str(root)})
    assert done["ok"] is True and done["cause"] is None and done["message"].startswith("ok: "), done


# ------------------------------------------------------------------------------------------ hvd_bundle_collect
def test_bundle_collect_in_check_mode_names_what_the_bundle_lacks_and_downloads_nothing(tmp_path: Path) -> None:
    """Read against this machine's own dpkg and apt index (read-only): in check mode every installed package the
    bundle lacks, the locked distribution not in it and Horovod's sdist are named; the work folder stays empty."""
    prefix, work = tmp_path / "env", tmp_path / "work"
    prefix.mkdir()
    work.mkdir()
    held, lacking = "a" * 64, "b" * 64
    (prefix / "hvd-requirements.lock").write_text(f"six==1.16.0 --hash=sha256:{held}\n"
                                                  f"filelock==3.13.1 --hash=sha256:{lacking}\n")
    args = {"have": {"pypi/six-1.16.0-py2.py3-none-any.whl": held}, "prefix": str(prefix), "horovod": "0.28.1",
            "work": str(work), "out": str(work / "new.tar")}
    result = run_module("hvd_bundle_collect", args, check=True)
    assert not result.get("failed"), result
    assert result["changed"] and "filelock==3.13.1" in result["pending"] and "horovod==0.28.1 (sdist)" in result["pending"]
    assert "six==1.16.0" not in result["pending"]
    assert any(entry.startswith("dpkg=") for entry in result["pending"])  # this machine's own packages
    assert list(work.iterdir()) == []


# ------------------------------------------------------------------------------------------ documentation (ansible-doc)
MODULES = sorted(path.stem for path in (ROOT / "plugins" / "modules").glob("hvd_*.py"))


@pytest.mark.parametrize("name", MODULES)
def test_every_modules_examples_call_it_by_its_fqcn(name: str) -> None:
    """The project's own rule for the docs (ansible-doc shows them to operators): EXAMPLES call the module as
    hvd.cluster.<name>, never by its short name. The rest of the docs (they parse, come before the imports, match the
    argument_spec, describe every option and return value) is validate-modules' work, in
    tests/test_static.py::test_ansible_test_sanity_passes_on_the_built_collection."""
    import yaml

    tree = ast.parse((ROOT / "plugins" / "modules" / f"{name}.py").read_text())
    [tasks] = [yaml.safe_load(node.value.value) for node in tree.body if isinstance(node, ast.Assign)
               and getattr(node.targets[0], "id", "") == "EXAMPLES"]
    assert tasks and any(f"hvd.cluster.{name}" in task for task in tasks)
    assert not any(key in MODULES for task in tasks for key in task)  # never the short name


def test_bundle_module_without_pyyaml_fails_naming_the_library(tmp_path: Path) -> None:
    """The controller's Python without PyYAML: the module loads (the import sanity test) and fails naming it."""
    (tmp_path / "yaml").mkdir()
    (tmp_path / "yaml" / "__init__.py").write_text("raise ImportError('No module named yaml (this test)')\n")
    result = run_module("hvd_bundle", {"path": str(tmp_path), "cache_dir": str(tmp_path / "cache")},
                        env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert result["failed"] and "Failed to import the required Python library (PyYAML)" in result["msg"]
