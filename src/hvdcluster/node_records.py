"""The node side of the job leases and roll marks (src/hvdcluster/jobs.py): sent over SSH and run by the login user as
``python3 -I -c <this file> <arguments as JSON>``. Standard library only, Python 3.7 or later.

What another local user can write is data, never an instruction (ARCHITECTURE.md, "Trust boundaries"):

- The folder is opened once, without following a link, and used only when it is root's or the login user's and no
  other user can replace what is in it (not group- or other-writable, unless sticky as an old hvd_base made it);
  else it is reported untrusted and nothing in it is read, written or removed.
- Every name in it is reached through that folder's descriptor, never joined into a path. Only names hvdcluster
  writes (``job-<run id>.json``, ``roll-<run id>.json``) are read, and only regular files with one link, owned by the
  login user or root, of at most MAX_BYTES; at most MAX_RECORDS of them (the newest). Everything else is named in
  ``ignored`` (escaped, at most MAX_NAMED names and a count) and never believed.
- Only a file the controller asked to drop, with such a name, that the login user owns, is removed.
- Our record is created, never written over (O_EXCL, no link followed), mode 0600.
- nvidia-smi, scontrol and squeue run from an argv, never a shell. Process and job names are chosen by users: a
  line of their output frames nothing. The pids and job ids come from a query of ids alone (digits); the names from
  a second query are kept only when its lines pair one to one with those ids, else the ids go without names.

Everything comes back as one JSON document (ASCII: no control byte, no line break inside) on one line that starts
with PREFIX; the exit status is 0 whenever that line was printed.
"""

import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import time

PREFIX = "hvd-node-look "
NAME = re.compile(r"(job|roll)-(\d{8}T\d{6}-\d+)\.json")  # file_name(): the kind and new_id()'s run id
RUN_ID = re.compile(r"\d{8}T\d{6}-\d+")
DIGITS = re.compile(r"[0-9]+")
MAX_BYTES = 64 * 1024  # one record
MAX_RECORDS = 256  # records read (the newest first)
MAX_ENTRIES = 100000  # folder entries looked at
MAX_NAMED = 20  # ignored entries named one by one; the rest are counted
TIMEOUT = 20  # seconds for each program asked
ROLL_REASON = "hvdcluster roll "
OURS = "hvdcluster "  # what every reason hvdcluster drains with starts with


def shown(text, limit=120):
    """``text`` (a file name, a program's words) as printable ASCII: other bytes and the backslash as \\xNN."""
    raw = os.fsencode(text) if isinstance(text, str) else bytes(text)
    out = "".join(chr(b) if 32 <= b < 127 and b != 92 else "\\x%02x" % b for b in raw[:limit])
    return out + ("..." if len(raw) > limit else "")


def ignore(doc, name, why):
    if len(doc["ignored"]) < MAX_NAMED:
        doc["ignored"].append("%s: %s" % (shown(name), why))
    else:
        doc["ignored_more"] += 1


def fail(doc, code, text):
    doc["error"] = {"code": code, "text": text}


def open_folder(path, doc):
    """The folder's descriptor, or None (the reason in ``doc``) when it is missing or not to be trusted."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return fail(doc, "missing", path)
    except PermissionError:
        return fail(doc, "unreadable", "%s cannot be read by the login user (uid %d)" % (path, os.getuid()))
    except OSError as exc:
        return fail(doc, "untrusted", "%s is a link or not a folder (%s)" % (path, exc.strerror))
    info = os.fstat(fd)
    mode = stat.S_IMODE(info.st_mode)
    why = None
    if info.st_uid not in (0, os.getuid()):
        why = "%s is owned by uid %d, not root or the login user (uid %d)" % (path, info.st_uid, os.getuid())
    elif mode & 0o022 and not mode & stat.S_ISVTX:
        why = "%s is writable by other users without the sticky bit (mode %04o)" % (path, mode)
    if why:
        os.close(fd)
        return fail(doc, "untrusted", why)
    doc["shared"] = bool(mode & 0o022)
    return fd


def judge(info):
    """Why a folder entry is not a record to believe, or None."""
    if not stat.S_ISREG(info.st_mode):
        kind = {stat.S_IFLNK: "a symbolic link", stat.S_IFDIR: "a folder", stat.S_IFIFO: "a FIFO",
                stat.S_IFSOCK: "a socket"}.get(stat.S_IFMT(info.st_mode), "not a regular file")
        return "%s: not believed" % kind
    if info.st_uid not in (0, os.getuid()):
        return "owned by uid %d, not the login user or root: not believed" % info.st_uid
    if info.st_nlink != 1:
        return "a file with %d links: not believed" % info.st_nlink
    if info.st_size > MAX_BYTES:
        return "%d bytes, more than %d: not read" % (info.st_size, MAX_BYTES)
    return None


def drop(fd, names, doc):
    """Remove the files ``names`` the controller named: our own (the login user's) files with our names only."""
    for name in names:
        if not isinstance(name, str) or not NAME.fullmatch(name):
            ignore(doc, str(name), "not a name hvdcluster writes: not removed")
            continue
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            ignore(doc, name, "not a file of the login user: not removed")
            continue
        try:
            os.unlink(name, dir_fd=fd)
        except FileNotFoundError:
            pass


def put(fd, name, text, doc):
    """Create our record ``name`` (never over a file, mode 0600); False (the reason in ``doc``) when it cannot be."""
    data = text.encode("utf-8") + b"\n"
    if not NAME.fullmatch(name) or len(data) > MAX_BYTES:
        fail(doc, "unwritable", "%s: not a record hvdcluster writes" % shown(name))
        return False
    try:
        out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
    except OSError as exc:
        fail(doc, "unwritable", "%s: %s" % (name, exc.strerror))
        return False
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(out, view):]
    except OSError as exc:
        os.unlink(name, dir_fd=fd)
        fail(doc, "unwritable", "%s: %s" % (name, exc.strerror))
        return False
    finally:
        os.close(out)
    return True


def read_one(fd, name, doc):
    try:
        rfd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
    except FileNotFoundError:
        return
    except OSError as exc:
        return ignore(doc, name, "cannot be opened (%s): not believed" % exc.strerror)
    try:
        info = os.fstat(rfd)
        why = judge(info)
        if why:
            return ignore(doc, name, why)
        chunks, size = [], 0
        while size <= MAX_BYTES:
            chunk = os.read(rfd, MAX_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_BYTES:
            return ignore(doc, name, "more than %d bytes: not read" % MAX_BYTES)
        doc["holders"][name] = b"".join(chunks).decode("utf-8", "replace")
        doc["ages"][name] = round(time.time() - info.st_mtime, 3)  # the node's clock, the kernel's time of writing
    finally:
        os.close(rfd)


def records(fd, doc):
    """Read the records to believe; name every other entry in ``ignored``."""
    found, seen = [], 0
    with os.scandir(fd) as entries:
        for entry in entries:
            seen += 1
            if seen > MAX_ENTRIES:
                ignore(doc, "*", "more than %d entries in the folder: the rest not looked at" % MAX_ENTRIES)
                break
            match = NAME.fullmatch(entry.name)
            if not match:
                ignore(doc, entry.name, "not a name hvdcluster writes")
                continue
            try:
                info = os.stat(entry.name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            why = judge(info)
            if why:
                ignore(doc, entry.name, why)
                continue
            found.append((match.group(2), entry.name))
    found.sort(reverse=True)  # the newest first
    for dummy, name in found[MAX_RECORDS:]:
        ignore(doc, name, "more than %d records: not read" % MAX_RECORDS)
    for dummy, name in found[:MAX_RECORDS]:
        read_one(fd, name, doc)


def run(argv, quiet_errors=False):
    """(exit status, output) of ``argv`` (stderr with it unless ``quiet_errors``); status None when it did not run."""
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL if quiet_errors else subprocess.STDOUT, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return None, ("%s: no answer in %d s" % (argv[0], TIMEOUT)).encode()
    except OSError as exc:
        return None, ("%s: %s" % (argv[0], exc.strerror)).encode()
    return proc.returncode, proc.stdout


def lines(data):
    """A program's output as lines: split on newlines only (any other byte stays inside its line)."""
    rows = data.split(b"\n")
    if rows and rows[-1] == b"":
        rows.pop()
    return [row.decode("utf-8", "replace") for row in rows]


def first_line(data):
    return shown(data.split(b"\n", 1)[0].strip(), 300)


def paired(answer, ids, sep):
    """The names of ``ids`` from a query that printed "<id><sep><name>" per line: {} unless its lines pair one to
    one with ``ids`` (a name with a newline in it adds a line: then no name is believed)."""
    rc, out = answer
    rows = lines(out) if rc == 0 else []
    names = {}
    for row in rows:
        key, found, name = row.partition(sep)
        if not found or key not in ids or key in names:
            return {}
        names[key] = name
    return names if len(names) == len(ids) else {}


def gpu_apps(doc):
    """The GPU compute processes ("<pid>, <name>", or "<pid>"); nvidia-smi's own words where it printed no pid
    (it cannot tell: counted as running work)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return
    rc, out = run([smi, "--query-compute-apps=pid", "--format=csv,noheader"], quiet_errors=True)
    pids, other = [], [] if rc is not None else [shown(out, 200)]
    for row in lines(out) if rc is not None else []:
        if DIGITS.fullmatch(row.strip()):
            pids.append(row.strip())
        elif row.strip():
            other.append(shown(row.strip(), 200))
    names = paired(run([smi, "--query-compute-apps=pid,process_name", "--format=csv,noheader"], quiet_errors=True),
                   set(pids), ", ") if pids else {}
    doc["gpu_apps"] = [("%s, %s" % (pid, names[pid])) if pid in names else pid for pid in pids] + other


def slurm(args, doc):
    """Under Slurm: drain or resume the node as asked (only a drain of ours is resumed), then its record and the jobs
    running there (jobs.py describes the rules)."""
    if not shutil.which("scontrol"):
        return
    node = socket.gethostname().split(".", 1)[0]
    rc, out = run(["scontrol", "-o", "show", "node", node])
    text = out.decode("utf-8", "replace")
    if rc != 0:
        if rc is not None and "not found" in text:
            return  # a node Slurm does not know
        return fail(doc, "slurm", first_line(out))
    line = text.rstrip("\n")
    sudo = [] if os.getuid() == 0 else ["sudo", "-n"]
    state = "\n".join(word[len("State="):] for word in re.split(r"[ \n]", line) if word.startswith("State="))
    reason = args.get("reason") or ""
    if args.get("slurm") == "drain" and not any(word in state for word in ("DRAIN", "DOWN", "FAIL")):
        if run(sudo + ["scontrol", "update", "nodename=" + node, "state=DRAIN", "reason=" + reason])[0] != 0:
            return fail(doc, "slurm", "cannot drain %s in Slurm (scontrol update as root: sudo -n)" % node)
        line = run(["scontrol", "-o", "show", "node", node])[1].decode("utf-8", "replace").rstrip("\n")
    elif args.get("slurm") == "resume":
        ours = [r for r in [reason] + [ROLL_REASON + i for i in args.get("adopt") or [] if RUN_ID.fullmatch(i)] if r]
        prefix = args.get("resume_prefix") or ""  # every reason of one kind of ours (hvdcluster health: <item>)
        mine = any(" Reason=%s " % r in line or line.endswith(" Reason=" + r) for r in ours)
        if (mine or (prefix.startswith(OURS) and " Reason=" + prefix in line)) and "DRAIN" in state:
            if run(sudo + ["scontrol", "update", "nodename=" + node, "state=RESUME"])[0] != 0:
                return fail(doc, "slurm", "cannot resume %s in Slurm (scontrol update as root: sudo -n)" % node)
            line = run(["scontrol", "-o", "show", "node", node])[1].decode("utf-8", "replace").rstrip("\n")
    doc["slurm"] = line.split("\n", 1)[0]
    query = ["squeue", "-h", "-w", node, "-t", "RUNNING,COMPLETING,SUSPENDED", "-o"]
    rc, out = run(query + ["%A"])
    if rc != 0:
        return fail(doc, "slurm", "squeue -w %s: %s" % (node, first_line(out)))
    ids = [row.strip() for row in lines(out) if row.strip()]
    odd = [row for row in ids if not DIGITS.fullmatch(row)]
    if odd:
        return fail(doc, "slurm", "squeue -w %s printed %s, not a job id" % (node, shown(odd[0])))
    names = paired(run(query + ["%A %u %j"]), set(ids), " ") if ids else {}
    doc["slurm_jobs"] = [("%s %s" % (job, names[job])) if job in names else job for job in ids]


def look(args, doc):
    fd = open_folder(args["dir"], doc)
    if fd is None:
        return
    try:
        drop(fd, args.get("drop") or [], doc)
        if args.get("put") is not None and not put(fd, args.get("put_name") or "", args["put"], doc):
            return
        records(fd, doc)
    except OSError as exc:
        return fail(doc, "unreadable", "%s: %s" % (args["dir"], exc.strerror))
    finally:
        os.close(fd)
    gpu_apps(doc)
    slurm(args, doc)


def main(argv):
    doc = {"holders": {}, "ages": {}, "ignored": [], "ignored_more": 0, "shared": False, "gpu_apps": [],
           "slurm": None, "slurm_jobs": [], "error": None}
    look(json.loads(argv[0]), doc)
    sys.stdout.write(PREFIX + json.dumps(doc, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
