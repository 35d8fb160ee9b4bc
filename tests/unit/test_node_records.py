"""What other local users write in the folder of job leases and roll marks is untrusted input: the node-side script
(src/hvdcluster/node_records.py) run for real by this machine's python3 against a folder of tmp_path in place of
/run/hvdcluster, its answer parsed by the controller (jobs.parse). Hostile entries are owned by uid 12345, another
local user; the tests run as root, as the login user of the lab is root-capable (root-owned files count as the login
user's)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import stat
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hvdcluster import jobs

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="another user's files: chown needs root")
MALLORY = 12345
# Every character a line splitter or a terminal acts on: the Unicode line breaks str.splitlines() knows, NUL, ESC.
BREAKS = ["\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\x00", "\x1b"]
ESCAPES = ["\x1b[31m", "\x1b]0;pwned\x07", "\x1b]8;;http://x\x1b\\", "\x9b2J", "\x1bc"]
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
ID = "20261126T001901-"


def node(folder: Path, monkeypatch, path: str = "/usr/bin:/bin", **kwargs) -> tuple[jobs.Look, str]:
    """The node script run by a real sh (as the login shell runs it) against ``folder``: its Look and raw stdout."""
    import subprocess

    monkeypatch.setattr(jobs, "DIR", str(folder))
    proc = subprocess.run(["sh", "-c", jobs.script(**kwargs)], capture_output=True, check=False, timeout=60,
                          env={**os.environ, "PATH": path})
    out = proc.stdout.decode("utf-8", "replace")
    return jobs.parse("n1", proc.returncode, out, proc.stderr.decode("utf-8", "replace")), out


def sentinel_tree(base: Path) -> Path:
    """Files outside the folder that a forged name or link points at: what must never be removed or changed."""
    tree = base / "outside"
    (tree / "etc").mkdir(parents=True)
    (tree / "etc" / "passwd").write_text("root:x:0:0\n")
    (tree / "job-20261126T001901-7.json").write_text("{}")
    (tree / "secret").write_text("do not read\n")
    return tree


def digest(tree: Path) -> str:
    """Every path under ``tree`` with its content and mode (no new file, no removed file, no change)."""
    out = hashlib.sha256()
    for path in sorted(tree.rglob("*")):
        info = path.lstat()
        out.update(f"{path} {info.st_mode}\0".encode())
        if stat.S_ISREG(info.st_mode):
            out.update(path.read_bytes())
    return out.hexdigest()


def record(run_id: str, **fields) -> dict:
    return {**jobs.mine(jobs.ROLL, run_id), "host": "another-controller", **fields}


def planted(folder: Path, name: str, data: bytes | str, uid: int = MALLORY, mtime: float | None = None) -> Path:
    path = folder / name
    path.write_bytes(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)
    os.chown(path, uid, uid)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def printed(look: jobs.Look) -> list[str]:
    """Every line the CLI may print about the node."""
    lines = [jobs.describe(r) for r in look.holders.values()] + jobs.busy(look) + look.ignored
    lines += [f"{name}: {why}" for name, _, why in jobs.stale(look)]
    return lines + [jobs.ignored("n1", look) or "", look.error or ""]


def assert_clean(look: jobs.Look, out: str) -> None:
    """One answer line, ASCII, no raw control character in it or in anything the CLI prints of it."""
    answer = [line for line in out.split("\n") if line]
    assert len(answer) == 1 and answer[0].startswith(jobs.PREFIX) and answer[0].isascii(), out[:500]
    assert not RAW_CONTROL.search(out.rstrip("\n")), out[:500]
    for line in printed(look):
        assert not RAW_CONTROL.search(line), line


# ------------------------------------------------------------------------------------------ generated entries

hostile_text = st.lists(st.one_of(st.sampled_from(BREAKS + ESCAPES + ["/", "..", "../../etc/passwd", "\\", "%s"]),
                                  st.characters()), max_size=12).map("".join)
# A name as a file system takes it (no "/", no NUL): our pattern, our pattern with a tail, or anything.
file_names = st.one_of(
    st.integers(0, 10 ** 6).map(lambda n: f"job-{ID}{n}.json"),
    st.integers(0, 10 ** 6).map(lambda n: f"roll-{ID}{n}.json"),
    st.tuples(st.sampled_from(["job-", "roll-", "", "../"]), hostile_text).map(lambda t: (t[0] + t[1]).replace(
        "/", "_").replace("\x00", "0")),
).filter(lambda n: n not in ("", ".", "..") and len(n.encode("utf-8", "surrogatepass")) < 200)
contents = st.one_of(
    hostile_text,
    st.builds(lambda run, user, host, cmd, start: json.dumps(record(run, user=user, host=host, command=[cmd],
                                                                    started_epoch=start)),
              st.from_regex(r"\d{8}T\d{6}-\d+", fullmatch=True), hostile_text, hostile_text, hostile_text,
              st.one_of(st.floats(allow_nan=False), st.just(time.time() + 10 ** 9))),
    st.builds(lambda text: '{"run_id": "x"}' + text + '\nhvd-holder ../../etc/passwd {"kind": "roll"}', hostile_text),
)


@root_only
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=st.lists(st.tuples(file_names, contents, st.booleans()), max_size=12),
       drop=st.lists(st.one_of(file_names, st.sampled_from(["../outside/secret", "../outside/etc/passwd",
                                                             "/etc/passwd", "..", "job-../../x.json"])), max_size=4))
def test_entries_of_another_user_are_never_believed_never_removed_and_never_printed_raw(
        tmp_path_factory, monkeypatch, entries, drop) -> None:
    """Whatever another user names and writes in the folder: none of it becomes a holder, nothing outside the folder
    is removed, created or changed, the files asked to be dropped that are not the login user's stay, and nothing
    the node answers or the CLI prints of it carries a raw control character."""
    base = tmp_path_factory.mktemp("node")
    folder = base / "run"
    folder.mkdir()
    folder.chmod(0o1777)  # an old hvd_base's folder: anyone may write there
    outside = sentinel_tree(base)
    before = digest(outside)
    theirs, mine = set(), {}
    for name, data, by_root in entries:
        if (folder / name).exists():
            continue
        planted(folder, name, data, uid=0 if by_root else MALLORY)
        (mine.__setitem__(name, data) if by_root else theirs.add(name))
    started = time.monotonic()
    look, out = node(folder, monkeypatch, drop=drop)
    assert time.monotonic() - started < 20
    assert look.error is None, look.error
    assert_clean(look, out)
    assert not set(look.holders) & theirs  # another user's: never a holder
    assert set(look.holders) <= {n for n in mine if re.fullmatch(r"(job|roll)-\d{8}T\d{6}-\d+\.json", n)}
    assert all((folder / name).exists() for name in theirs)  # never removed, even when asked to
    assert digest(outside) == before


# ------------------------------------------------------------------------------------------ named cases

@root_only
def test_a_flood_of_files_a_fifo_links_and_a_1_mib_record_are_ignored_in_bounded_time(tmp_path, monkeypatch) -> None:
    """10,000 files of another user with our names, a FIFO, links to a file outside (one named like a lease the roll
    drops), a hard link and a 1 MiB record: the look answers in seconds with only the login user's lease believed,
    names a bounded number of the rest, never opens the FIFO for long, and removes nothing through a link."""
    folder = tmp_path / "run"
    folder.mkdir()
    folder.chmod(0o1777)
    outside = sentinel_tree(tmp_path)
    before = digest(outside)
    for i in range(10_000):
        planted(folder, f"job-{ID}{i}.json", json.dumps(record(f"{ID}{i}")))
    os.mkfifo(folder / f"roll-{ID}900001.json")
    (folder / f"roll-{ID}900002.json").symlink_to(outside / "secret")
    (folder / f"job-{ID}900003.json").symlink_to(outside / "etc" / "passwd")
    os.link(outside / "job-20261126T001901-7.json", folder / f"job-{ID}900004.json")
    planted(folder, f"roll-{ID}900005.json", b"{" + b" " * (1 << 20) + b"}", uid=0)
    ours = jobs.mine(jobs.JOB, f"{ID}900006")
    started = time.monotonic()
    look, out = node(folder, monkeypatch, put=ours, drop=[f"roll-{ID}900002.json", f"job-{ID}900003.json",
                                                          f"job-{ID}900004.json"])
    assert time.monotonic() - started < 15
    assert look.error is None and list(look.holders) == [jobs.file_name(ours)], (look.error, list(look.holders))
    assert len(out) < 20_000  # bounded: the ignored ones are counted, not listed
    assert_clean(look, out)
    assert len(look.ignored) == 21 and re.fullmatch(r"\d+ more", look.ignored[-1]), look.ignored
    # 10,000 files, the FIFO, the 1 MiB record and the two links as found, and the two links again as not removed
    assert int(look.ignored[-1].split()[0]) + 20 == 10_006
    assert (folder / f"roll-{ID}900002.json").is_symlink() and (folder / f"job-{ID}900003.json").is_symlink()
    assert digest(outside) == before
    line = jobs.ignored("n1", look)
    assert line.startswith("n1: ignored in ") and "writable by other users" in line


@root_only
def test_only_the_login_users_files_with_our_names_are_believed_and_removed(tmp_path, monkeypatch) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    folder.chmod(0o1777)
    theirs = planted(folder, f"roll-{ID}1.json", json.dumps(record(f"{ID}1")))  # live-looking, by another user
    ours = planted(folder, f"roll-{ID}2.json", json.dumps(record(f"{ID}2")), uid=0)
    planted(folder, "roll-x.json", json.dumps(record("x")), uid=0)  # not a name hvdcluster writes
    look, _ = node(folder, monkeypatch)
    assert list(look.holders) == [ours.name] and not jobs.live(look, jobs.ROLL, ours=ours.name)
    assert sorted(look.ignored) == [f"roll-{ID}1.json: owned by uid {MALLORY}, not the login user or root: not "
                                    "believed", "roll-x.json: not a name hvdcluster writes"]
    look, _ = node(folder, monkeypatch, drop=[theirs.name, ours.name])
    assert theirs.exists() and not ours.exists()
    assert f"roll-{ID}1.json: not a file of the login user: not removed" in look.ignored


@root_only
@pytest.mark.parametrize(("mode", "uid", "link", "says"), [
    (0o777, 0, False, "writable by other users without the sticky bit (mode 0777)"),
    (0o700, MALLORY, False, f"is owned by uid {MALLORY}, not root or the login user"),
    (0o700, 0, True, "is a link or not a folder"),
])
def test_a_folder_another_user_could_have_made_or_filled_is_not_used(tmp_path, monkeypatch, mode, uid, link,
                                                                     says) -> None:
    """A folder others may rename files in, another user's folder, or a link: nothing in it is read, written or
    removed; the node is unreadable (run refuses it, a roll skips it), naming why and the fix."""
    real = tmp_path / "real"
    real.mkdir()
    os.chmod(real, mode)
    os.chown(real, uid, uid)
    lease = planted(real, f"job-{ID}1.json", json.dumps(record(f"{ID}1")), uid=0)
    folder = tmp_path / "link" if link else real
    if link:
        folder.symlink_to(real)
    look, _ = node(folder, monkeypatch, put=jobs.mine(jobs.JOB, f"{ID}2"), drop=[lease.name])
    assert look.error and says in look.error and "nothing in it is believed" in look.error, look.error
    assert look.holders == {} and lease.exists() and sorted(p.name for p in real.iterdir()) == [lease.name]


def test_more_than_256_records_read_the_newest_and_name_the_rest(tmp_path, monkeypatch) -> None:
    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    for i in range(300):
        (folder / f"job-{ID}{1000 + i}.json").write_text(json.dumps(record(f"{ID}{1000 + i}")))
    look, _ = node(folder, monkeypatch)
    assert len(look.holders) == 256 and f"job-{ID}1299.json" in look.holders and f"job-{ID}1000.json" not in \
        look.holders
    assert f"job-{ID}1043.json: more than 256 records: not read" in look.ignored and look.ignored[-1] == "24 more"


def test_a_record_from_the_future_is_not_believed_to_hold_the_node(tmp_path, monkeypatch) -> None:
    """A roll mark written a day in the future (by its file's time on the node's clock) or claiming a start a day
    ahead: stale at once, saying why; one a little ahead (clocks differ) still counts. An unreadable record counts
    until it is as old as a record of another controller may be."""
    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    ahead = folder / f"roll-{ID}1.json"
    ahead.write_text(json.dumps(record(f"{ID}1")))
    os.utime(ahead, (time.time() + 86400, time.time() + 86400))
    skewed = folder / f"roll-{ID}2.json"
    skewed.write_text(json.dumps(record(f"{ID}2")))
    os.utime(skewed, (time.time() + 60, time.time() + 60))
    junk = folder / f"roll-{ID}3.json"
    junk.write_text("not json")
    os.utime(junk, (time.time() - 2 * 86400, time.time() - 2 * 86400))
    look, _ = node(folder, monkeypatch)
    assert {name: why for name, _, why in jobs.stale(look)} == {
        ahead.name: "start time in the future: not believed",
        junk.name: "it is older than 86400 s and its pid cannot be checked here"}
    assert [name for name, _ in jobs.live(look, jobs.ROLL)] == [skewed.name]
    claimed = record(f"{ID}4", started_epoch=time.time() + 86400)
    assert jobs.staleness(claimed) == jobs.FUTURE  # no node age: its own start time, by the same rule


def test_forged_lines_in_gpu_process_and_slurm_job_names_forge_nothing(tmp_path, monkeypatch) -> None:
    """A process named with a newline and an ESC sequence and a Slurm job named with a newline: the node stays busy
    with exactly the real process and job (their ids), and no name forges a second one or reaches the terminal raw."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    forged = "x\\n4343, forged\\r9999, \\033]0;pwned\\007"
    stubs = {
        "nvidia-smi": f"case \"$*\" in *process_name*) printf '4242, {forged}\\n' ;; *) echo 4242 ;; esac",
        "scontrol": "[ \"$1\" = -o ] && echo 'NodeName=node3 State=IDLE Partitions=lab'; exit 0",
        "squeue": "case \"$*\" in *%j*) printf '41 alice x\\n42 bob forged\\n' ;; *) echo 41 ;; esac",
    }
    for name, body in stubs.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    look, out = node(folder, monkeypatch, path=f"{bin_dir}:/usr/bin:/bin")
    assert look.error is None and look.gpu_apps == ["4242"] and look.slurm_jobs == ["41"], look
    assert jobs.busy(look) == ["GPU compute process 4242", "Slurm job 41"]
    assert_clean(look, out)
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\ncase \"$*\" in *process_name*) printf '4242, a\\033[2Jb\\r9\\n' "
                                        ";; *) echo 4242 ;; esac\n")
    look, out = node(folder, monkeypatch, path=f"{bin_dir}:/usr/bin:/bin")
    assert look.gpu_apps == ["4242, ab\\x0d9"] and "\x1b" not in out  # one line: its name, made printable
    (bin_dir / "squeue").write_text("#!/bin/sh\ncase \"$*\" in *%j*) echo '41 alice x' ;; *) printf '41\\n4x2\\n' "
                                    ";; esac\n")
    look, _ = node(folder, monkeypatch, path=f"{bin_dir}:/usr/bin:/bin")
    assert look.error == f"Slurm: squeue -w {socket.gethostname().split('.')[0]} printed 4x2, not a job id"


def test_a_job_lease_is_the_login_users_alone_and_its_holder_prints_without_control_characters(
        tmp_path, monkeypatch) -> None:
    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    ours = jobs.mine(jobs.JOB, f"{ID}1", command=["python", "-c", "print('\x1b]0;pwned\x07')", "x" * 10_000])
    look, _ = node(folder, monkeypatch, put=ours)
    lease = folder / jobs.file_name(ours)
    assert stat.S_IMODE(lease.stat().st_mode) == 0o600 and lease.stat().st_size < 64 * 1024
    assert look.holders[lease.name]["command"][-1] == "..."  # a long argv is cut
    shown = jobs.describe(look.holders[lease.name])
    assert "\x1b" not in shown and "\x07" not in shown and len(shown) < 400, shown
    evil = {**ours, "user": "\x1b[2J\x1b]0;x\x07eve\u2028", "host": "h\r\nforged", "run_id": "\x9b31m"}
    assert not RAW_CONTROL.search(jobs.describe(evil)), jobs.describe(evil)
