"""hvd_write: a role's small files kept in one module run (real files; run as Ansible runs it, its file with the
arguments as JSON on stdin, as root, as on a node under become).

Where it stands in for ansible.builtin.blockinfile and lineinfile, the test runs those modules too, on the same
input, and compares the bytes: a node converged before with them is in place for hvd_write (no change reported)."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import stat
import subprocess
import sys
from pathlib import Path

import pytest

# the collection root: the checkout, or the installed copy ansible-test units runs in
MODULE = Path(__file__).resolve().parents[4] / "plugins" / "modules" / "hvd_write.py"
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="the module runs as root (become) on nodes")


def run(module: Path | str, args: dict, check: bool = False, diff: bool = False) -> dict:
    """``module``: a file, or the dotted name of one of Ansible's own (run as a module: its folder on the import path
    would shadow the standard library's tempfile)."""
    payload = {"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": check, "_ansible_diff": diff}}
    argv = ([str(module)] if isinstance(module, Path) else
            ["-c", f"import runpy; runpy.run_module({module!r}, run_name='__main__')"])
    # hvd_write imports the collection's module_utils: the test's own import path finds them (the checkout, or the
    # copy ansible-test units runs in)
    proc = subprocess.run([sys.executable, *argv], input=json.dumps(payload), capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"{module} printed no result (rc {proc.returncode}): {proc.stdout[-1000:]} {proc.stderr[-2000:]}")


def write(files: list[dict], **kwargs) -> dict:
    return run(MODULE, {"files": files}, **kwargs)


def ansible_module(name: str) -> str:
    """One of Ansible's own modules, by name. ansible-test units gives the tests module_utils only: there the
    comparison is skipped (the fast tier runs this file with the controller's whole Ansible, where it runs)."""
    pytest.importorskip(f"ansible.modules.{name}", reason="Ansible's own modules are not on this path (ansible-test units)")
    return f"ansible.modules.{name}"


ADMIN = "127.0.0.1 localhost\n10.1.0.7 gpu07  # the admin's own line\n"
MARKER = "# {mark} hvdcluster lab nodes"


@pytest.mark.parametrize("start", ["", ADMIN, ADMIN.rstrip("\n"), ADMIN + "# BEGIN hvdcluster lab nodes\n10.0.0.9 old\n"
                                   "# END hvdcluster lab nodes\n# after\n"])
@pytest.mark.parametrize("block", ["10.0.0.1 gpu01\n10.0.0.2 gpu02\n", "10.0.0.1 gpu01", ""])
def test_a_block_is_what_blockinfile_writes_and_a_file_it_wrote_is_in_place(tmp_path: Path, start: str,
                                                                            block: str) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours.write_text(start)
    theirs.write_text(start)
    done = write([{"path": str(ours), "state": "block", "marker": MARKER, "block": block}])
    assert "failed" not in done, done
    answer = run(ansible_module("blockinfile"), {"path": str(theirs), "marker": MARKER, "block": block})
    assert "failed" not in answer, answer
    assert ours.read_bytes() == theirs.read_bytes()
    assert done["changed"] == answer["changed"] and done["updated"] == ([str(ours)] if done["changed"] else [])
    again = write([{"path": str(theirs), "state": "block", "marker": MARKER, "block": block}])
    assert again["changed"] is False and again["updated"] == []


def test_no_block_wanted_in_a_missing_file_makes_nothing(tmp_path: Path) -> None:
    """hvd_openmpi keeps its block out of Open MPI's parameter file where the single-copy path works: a node without
    the file gets none (an empty file would be a change every converge could not explain)."""
    missing = tmp_path / "etc" / "openmpi-mca-params.conf"
    (tmp_path / "etc").mkdir()
    done = write([{"path": str(missing), "state": "block", "marker": MARKER, "block": ""}])
    assert done["changed"] is False and done["updated"] == [] and not missing.exists(), done
    done = write([{"path": str(missing), "state": "block", "marker": MARKER, "block": "x = 1\n"}])
    assert done["changed"] is True and missing.read_text() == "# BEGIN hvdcluster lab nodes\nx = 1\n# END hvdcluster lab nodes\n"


@pytest.mark.parametrize("start", ["", "ssh-ed25519 AAAAold hvdcluster@lab\nssh-rsa BBBB admin\n",
                                   "ssh-rsa BBBB admin", "ssh-ed25519 AAAAnew hvdcluster@lab\n"])
def test_a_line_is_what_lineinfile_writes(tmp_path: Path, start: str) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours.write_text(start)
    theirs.write_text(start)
    entry = {"regexp": " hvdcluster@lab$", "line": "ssh-ed25519 AAAAnew hvdcluster@lab"}
    done = write([{"path": str(ours), "state": "line", **entry}])
    answer = run(ansible_module("lineinfile"), {"path": str(theirs), **entry})
    assert "failed" not in answer, answer
    assert ours.read_bytes() == theirs.read_bytes()
    assert done["changed"] == answer["changed"]


@root_only
def test_files_folders_and_removals_are_made_then_a_second_run_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "proxy").write_text("old proxy\n")
    files = [
        {"path": str(tmp_path / "run"), "state": "directory", "owner": "root", "group": "root", "mode": "01777"},
        {"path": str(tmp_path / "run" / "fact"), "content": '{"a": 1}\n', "mode": "0600"},
        {"path": str(tmp_path / "run" / "libexec" / "tool"), "state": "directory"},  # its parent made too
        {"path": str(tmp_path / "proxy"), "state": "absent"},
        {"path": str(tmp_path / "left-out"), "content": "x", "manage": False},
    ]
    done = write(files)
    assert done["changed"] and done["updated"] == [f["path"] for f in files[:4]], done
    assert stat.S_IMODE((tmp_path / "run" / "libexec").stat().st_mode) == 0o755
    info = (tmp_path / "run").stat()
    assert stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o1777 and info.st_uid == 0
    fact = tmp_path / "run" / "fact"
    assert fact.read_text() == '{"a": 1}\n' and stat.S_IMODE(fact.stat().st_mode) == 0o600
    assert not (tmp_path / "proxy").exists() and not (tmp_path / "left-out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no temporary file left beside them
    again = write(files)
    assert again["changed"] is False and again["updated"] == [], again


def test_the_result_echoes_each_content_by_size_and_sha256_not_its_text(tmp_path: Path) -> None:
    """A CA bundle's text written (or failing to be) comes back as its size and digest: the run's events and logs
    do not carry it from every node again; what was asked is still told (the paths, modes, states)."""
    bundle = "-----BEGIN CERTIFICATE-----\n" + "A" * 200_000 + "\n-----END CERTIFICATE-----\n"
    files = [{"path": str(tmp_path / "ca.crt"), "content": bundle, "mode": "0644"},
             {"path": str(tmp_path / "hosts"), "state": "block", "marker": "# {mark} x", "block": "10.0.0.1 node1\n"}]
    for done in (write(files), write(files, check=True)):
        echoed = done["invocation"]["module_args"]["files"]
        assert len(json.dumps(done)) < 5000, len(json.dumps(done))
        digest = hashlib.sha256(bundle.encode()).hexdigest()
        assert echoed[0]["content"] == f"({len(bundle)} bytes, sha256 {digest})" and echoed[0]["mode"] == "0644"
        assert echoed[1]["block"].startswith("(15 bytes, sha256 ") and echoed[1]["path"] == str(tmp_path / "hosts")
    assert (tmp_path / "ca.crt").read_text() == bundle
    (tmp_path / "blocked").mkdir()
    failed = write([{"path": str(tmp_path / "blocked"), "content": bundle}])
    assert failed.get("failed") and "AAAA" not in json.dumps(failed), json.dumps(failed)[:2000]


def test_a_fact_file_gets_its_missing_folders_0755_whatever_the_umask(tmp_path: Path) -> None:
    """parents: the folders above a local fact are made as ansible.builtin.file makes them (0755), also under a
    umask of 077 that os.makedirs would honour (a node's root with a hardened umask)."""
    fact = tmp_path / "etc" / "ansible" / "facts.d" / "hvd_x.fact"
    files = [{"path": str(fact), "content": "{}\n", "mode": "0644", "parents": True},
             {"path": str(tmp_path / "opt" / "a" / "b"), "state": "directory", "mode": "0700"}]
    old = os.umask(0o077)
    try:
        done = write(files)
    finally:
        os.umask(old)
    assert done["updated"] == [f["path"] for f in files], done
    for folder in (tmp_path / "etc", tmp_path / "etc" / "ansible", fact.parent, tmp_path / "opt" / "a"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o755, folder
    assert stat.S_IMODE((tmp_path / "opt" / "a" / "b").stat().st_mode) == 0o700
    assert fact.read_text() == "{}\n" and stat.S_IMODE(fact.stat().st_mode) == 0o644
    assert write(files)["changed"] is False


@root_only
def test_check_mode_reports_every_change_and_writes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "conf"
    target.write_text("old\n")
    os.chmod(target, 0o644)
    files = [{"path": str(target), "content": "new\n", "mode": "0600"},
             {"path": str(tmp_path / "made"), "state": "directory"},
             {"path": str(tmp_path / "ca.crt"), "content": "PEM\n"}]
    looked = write(files, check=True, diff=True)
    assert looked["changed"] and looked["updated"] == [f["path"] for f in files]
    assert target.read_text() == "old\n" and stat.S_IMODE(target.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conf"]
    [first, *_] = looked["diff"]
    assert first["before"] == "old\n" and first["after"] == "new\n" and first["before_header"] == str(target)


@root_only
def test_a_mode_or_owner_alone_is_put_right_and_reported(tmp_path: Path) -> None:
    target = tmp_path / "authorized_keys"
    target.write_text("key\n")
    os.chmod(target, 0o644)
    os.chown(target, 1, 1)
    done = write([{"path": str(target), "content": "key\n", "owner": "root", "mode": "0600"}])
    assert done["updated"] == [str(target)]
    info = target.stat()
    assert info.st_uid == 0 and stat.S_IMODE(info.st_mode) == 0o600 and target.read_text() == "key\n"


@root_only
def test_a_file_that_cannot_be_replaced_is_rewritten_in_place_only_with_unsafe_writes(tmp_path: Path) -> None:
    """/etc/hosts in a container is a bind mount: renaming onto it fails (EBUSY); a bind mount made here shows it."""
    source, mounted = tmp_path / "source", tmp_path / "hosts"
    source.write_text(ADMIN)
    mounted.write_text("")
    if subprocess.run(["mount", "--bind", str(source), str(mounted)], capture_output=True).returncode:
        pytest.fail("mount --bind failed: this test needs root with mount rights (as the container tier has)")
    try:
        entry = {"path": str(mounted), "state": "block", "marker": MARKER, "block": "10.0.0.1 gpu01\n"}
        refused = write([entry])
        assert refused.get("failed") and str(mounted) in refused["msg"] and "busy" in refused["msg"].lower(), refused
        assert source.read_text() == ADMIN
        done = write([{**entry, "unsafe_writes": True}])
        assert done["changed"] and source.read_text().endswith("# BEGIN hvdcluster lab nodes\n10.0.0.1 gpu01\n"
                                                                 "# END hvdcluster lab nodes\n")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["hosts", "source"]
    finally:
        subprocess.run(["umount", str(mounted)], check=True)


@root_only
def test_a_users_home_is_found_by_name(tmp_path: Path) -> None:
    home = pwd.getpwnam("root").pw_dir
    probe = f"hvd-write-test-{os.getpid()}"
    try:
        done = write([{"path": f"~root/{probe}", "content": "x\n"}])
        assert done["updated"] == [f"{home}/{probe}"] and Path(home, probe).read_text() == "x\n"
    finally:
        Path(home, probe).unlink(missing_ok=True)
    unknown = write([{"path": "~no-such-user-here/.ssh", "state": "directory"}])
    assert unknown["failed"] and "~no-such-user-here/.ssh: no such user" in unknown["msg"]


@pytest.mark.parametrize("entry, words", [
    ({"state": "absent", "is_dir": True}, "a folder; only files are removed"),
    ({"state": "directory", "is_file": True}, "not a folder"),
    ({"state": "file", "content": "x", "mode": "rw-r--r--"}, "is not octal"),
    ({"state": "file", "content": "x", "owner": "no-such-user-here"}, "no user 'no-such-user-here'"),
    ({"state": "block", "marker": MARKER}, "state block needs marker and block"),
    ({"state": "file", "content": "x", "missing_parent": True}, "its folder is missing"),
])
def test_a_path_it_cannot_keep_fails_naming_it_and_what_is_wrong(tmp_path: Path, entry: dict, words: str) -> None:
    target = tmp_path / "thing"
    if entry.pop("is_dir", False):
        target.mkdir()
    if entry.pop("is_file", False):
        target.write_text("x")
    if entry.pop("missing_parent", False):
        target = tmp_path / "gone" / "thing"
    done = write([{"path": str(target), **entry}])
    assert done.get("failed") and done["msg"].startswith(f"hvd_write: {target}: ") and words in done["msg"], done
