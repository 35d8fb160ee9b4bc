"""Readers of how a node is reached and how a rank starts on it, for hvd_node_state: the SSH mesh (``mesh.*``: the
cluster key, known hosts, other keys), the blocks hvd_base keeps (``base.*``: /etc/hosts, the CA, the run folder) and
what a rank inherits (``launch.*``: sshd's environment settings, the loader's configuration, each peer as ``ssh -G``
resolves it).

``root`` and the item shapes are hvd_state.py's.
"""

from __future__ import annotations

import base64
import glob
import hashlib
import os
import stat

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_defaults import RUN_DIR
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import (
    ABSENT,
    LINE_KEPT,
    d16,
    file_d16,
    on_node,
    read_fact,
    read_text,
    under,
)
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_state_stack import mpi_state

KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"  # hvd_ssh_mesh_known_hosts' default
CA_GLOB = "/usr/local/share/ca-certificates/hvdcluster*.crt"  # hvd_base installs hvdcluster-ca.crt


# ------------------------------------------------------------------------------------------ blocks we manage


def read_blocks(path: str, begin: str, prefix: bool = False) -> list[tuple[str, list[str]]]:
    """The blockinfile blocks of a file whose BEGIN marker line is ``begin`` (``prefix``: starts with ``begin``
    and a space), as (marker without '# BEGIN ', lines between the markers)."""
    text = read_text(path)
    blocks: list[tuple[str, list[str]]] = []
    current = None
    for line in (text or "").splitlines():
        mark = line.rstrip()
        if current is None:
            if mark == begin or (prefix and mark.startswith(begin + " ")):
                current = (mark[len("# BEGIN "):], [])
        elif mark == "# END " + current[0]:
            blocks.append(current)
            current = None
        else:
            current[1].append(line)
    if current is not None:
        blocks.append(current)
    return blocks


def blocks_d16(blocks: list[tuple[str, list[str]]], named: bool = False) -> str:
    """d16 of a block's lines (each ended by a newline, as blockinfile's ``block``); ``named``: of every block's
    marker and lines, in marker order (the order blocks were added in does not count)."""
    if not blocks:
        return ABSENT
    if not named:
        return d16("".join(line + "\n" for line in blocks[0][1]).encode())
    return d16("".join(f"{mark}\n" + "".join(line + "\n" for line in lines) + "\0"
                       for mark, lines in sorted(blocks)).encode())


def block_text(blocks: list[tuple[str, list[str]]]) -> str:
    """The first block's lines, one per line (a small block we manage, shown as it is so that `check` can name the
    line that differs); "absent" without one, "" for an empty one."""
    if not blocks:
        return ABSENT
    return "\n".join(line.rstrip() for line in blocks[0][1])


def home_of(root: str, user: str) -> str | None:
    for line in (read_text(under(root, "/etc/passwd")) or "").splitlines():
        fields = line.split(":")
        if len(fields) >= 6 and fields[0] == user:
            return fields[5]
    return None


def _key_pairs(line: str) -> set[tuple[str, str]]:
    """(type, base64) pairs of an OpenSSH key line (authorized_keys options and comments around it ignored)."""
    tokens = line.split()
    return {(tokens[i], tokens[i + 1]) for i in range(len(tokens) - 1) if tokens[i + 1].startswith("AAAA")}


def mesh_state(root: str, cluster: str, user: str = "root", public_key: str = "") -> dict:
    """``mesh.authorized`` (the cluster key in the user's authorized_keys), ``mesh.known_hosts`` (d16 of every node's
    hvdcluster block in /etc/ssh/ssh_known_hosts) and ``mesh.ssh_config`` (the block in the user's ~/.ssh/config, as
    text)."""
    home = home_of(root, user)
    want = _key_pairs(public_key)
    authorized = False
    if home and want:
        for line in (read_text(under(root, os.path.join(home, ".ssh", "authorized_keys"))) or "").splitlines():
            if not line.lstrip().startswith("#") and want & _key_pairs(line):
                authorized = True
                break
    begin = f"# BEGIN hvdcluster {cluster}"
    config = read_blocks(under(root, os.path.join(home, ".ssh", "config")), begin) if home else []
    return {"mesh.authorized": authorized,
            "mesh.known_hosts": blocks_d16(read_blocks(under(root, KNOWN_HOSTS), begin, prefix=True), named=True),
            "mesh.ssh_config": block_text(config),
            "mesh.other_keys": other_keys(root, home, want)}


def other_keys(root: str, home: str | None, cluster_keys: set[tuple[str, str]]) -> str:
    """``mesh.other_keys``: the keys in the user's authorized_keys beyond the cluster's, one per line as
    "<type> SHA256:<fingerprint> <comment>" (as ``ssh-keygen -l`` names them), in file order; "absent" for none. A
    notice `check` names, never a drift: the controller's own key is one of them."""
    if not home:
        return ABSENT
    lines = []
    for line in (read_text(under(root, os.path.join(home, ".ssh", "authorized_keys"))) or "").splitlines():
        if line.lstrip().startswith("#"):
            continue
        tokens = line.split()
        for i, (kind, blob) in enumerate(zip(tokens, tokens[1:])):
            if blob.startswith("AAAA") and (kind, blob) not in cluster_keys:
                try:
                    raw = base64.b64decode(blob, validate=True)
                except ValueError:
                    raw = blob.encode()
                print_ = base64.b64encode(hashlib.sha256(raw).digest()).decode().rstrip("=")
                lines.append(" ".join([kind, f"SHA256:{print_}", *tokens[i + 2:]])[:LINE_KEPT])
                break
        if len(lines) > LAUNCH_LINES:
            lines[LAUNCH_LINES:] = ["+ more keys"]
            break
    return "\n".join(lines) or ABSENT


def run_dir_state(path: str) -> str:
    """``ok`` when the folder of job leases and roll marks is the login user's (the reader's: the state is read as
    the login user) with mode 0700, as hvd_base makes it, else what is wrong: no other local user may write there."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return ABSENT
    except OSError as exc:
        return f"unreadable: {exc.strerror}"
    if not stat.S_ISDIR(info.st_mode):
        return "not a folder"
    mode = stat.S_IMODE(info.st_mode)
    wrong = [f"mode {mode:04o}"] if mode != 0o700 else []
    wrong += [f"owner uid {info.st_uid}, not the login user's (uid {os.geteuid()})"] \
        if info.st_uid != os.geteuid() else []
    return ", ".join(wrong) or "ok"


def base_state(root: str, cluster: str) -> dict:
    """``base.hosts`` (hvd_base's /etc/hosts block, as text), ``base.fabric_interface`` (the interface hvd_base found
    for the node's fabric address: what `run` passes to horovodrun), ``base.ca`` (the CA files it installs), ``profile.<file>``
    and ``ldconf.<file>`` (our /etc/profile.d/hvd-*.sh and /etc/ld.so.conf.d/hvd-*.conf)."""
    out = {"base.hosts": block_text(read_blocks(under(root, "/etc/hosts"), f"# BEGIN hvdcluster {cluster} nodes")),
           "base.fabric_interface": (read_fact(root, "hvd_base") or {}).get("fabric_interface") or ABSENT}
    digest = hashlib.sha256()
    cas = sorted(glob.glob(glob.escape(under(root, os.path.dirname(CA_GLOB))) + "/" + os.path.basename(CA_GLOB)))
    for path in cas:
        try:
            with open(path, "rb") as handle:
                digest.update(os.path.basename(path).encode() + b"\0" + handle.read() + b"\0")
        except OSError:
            digest.update(os.path.basename(path).encode() + b" -\0")
    out["base.ca"] = digest.hexdigest()[:16] if cas else ABSENT
    out["base.run_dir"] = run_dir_state(under(root, RUN_DIR))
    for key, folder, pattern in (("profile", "/etc/profile.d", "hvd-*.sh"),
                                 ("ldconf", "/etc/ld.so.conf.d", "hvd-*.conf")):
        for path in sorted(glob.glob(os.path.join(glob.escape(under(root, folder)), pattern))):
            out[f"{key}.{os.path.basename(path)}"] = file_d16(path)
    return out


# ------------------------------------------------------------------------------------------ how a rank is launched

# The most lines one launch item keeps of one file, and the longest line (a longer one is cut, a file with more lines
# ends in "+N more lines <d16 of them>"): node-supplied text, bounded.
LAUNCH_LINES = 50
SSHD_CONFIG = "/etc/ssh/sshd_config"
# sshd_config keywords that give a command variables (lowercase: sshd reads keywords case-insensitively).
SSHD_ENV = ("permituserenvironment", "setenv", "acceptenv")
# What `ssh -G <peer>` resolves that changes how a node reaches its peer or what the peer's command gets.
SSH_OPTIONS = ("hostname", "port", "user", "proxycommand", "proxyjump", "identityfile", "stricthostkeychecking",
               "userknownhostsfile", "globalknownhostsfile", "hostkeyalias", "sendenv", "setenv")
SSH_TIMEOUT = 10


def _settings(root: str, path: str, keep=None) -> list[str] | None:
    """The lines of the node's file ``path`` that set something (not blank, not a comment), stripped; ``keep``: only
    the lines it says yes to. [] for a missing file, None for one the reader may not read."""
    try:
        text = read_text(under(root, path), strict=True)
    except OSError:
        return None
    lines = [line.strip() for line in (text or "").splitlines()]
    return [line for line in lines if line and not line.startswith("#") and (keep is None or keep(line))]


def setting_lines(root: str, path: str, lines: list[str] | None = None) -> list[str]:
    """``lines`` (default: :func:`_settings` of ``path``) as "<path>: <line>", bounded (:data:`LAUNCH_LINES`, cut at
    :data:`LINE_KEPT`); "<path>: unreadable" for a file the reader may not read."""
    lines = _settings(root, path) if lines is None else lines
    if lines is None:
        return [f"{path}: unreadable"]
    out = [f"{path}: {line}"[:LINE_KEPT] for line in lines[:LAUNCH_LINES]]
    if len(lines) > LAUNCH_LINES:
        out.append(f"{path}: +{len(lines) - LAUNCH_LINES} more lines {d16(chr(10).join(lines).encode())}")
    return out


# hvd_openmpi's own block in Open MPI's parameter file (its marker in roles/hvd_openmpi/tasks/main.yml): where this
# node's ranks may not read each other's memory, the single-copy path turned off. The node's own setting, which may
# differ from a peer's (a bare-metal node beside a container): ``mpi.single_copy``, held against the node's record and
# repaired by hvd_openmpi, never a launch setting compared with the peers'.
MPI_BLOCK = "hvdcluster: Open MPI's single-copy path (hvd_openmpi)"


def _mpi_settings(root: str, path: str) -> tuple[list[str] | None, list[str]]:
    """The setting lines of Open MPI's parameter file ``path`` outside hvd_openmpi's block (:data:`MPI_BLOCK`; None
    for a file the reader may not read), and those inside it."""
    inside: list[str] = []
    outside: list[str] = []
    where = outside
    begin, end = f"# BEGIN {MPI_BLOCK}", f"# END {MPI_BLOCK}"
    try:
        text = read_text(under(root, path), strict=True)
    except OSError:
        return None, []
    for line in (line.strip() for line in (text or "").splitlines()):
        if line in (begin, end):
            where = inside if line == begin else outside
        elif line and not line.startswith("#"):
            where.append(line)
    return outside, inside


def _lines_value(lines: list[str]) -> str:
    return "\n".join(lines) or ABSENT


def _keyword(line: str) -> tuple[str, list[str]]:
    """An sshd_config line's keyword (lowercase) and arguments ("Keyword value" or "Keyword=value")."""
    words = line.replace("=", " ", 1).split()
    return (words[0].lower(), words[1:]) if words else ("", [])


def sshd_lines(root: str) -> tuple[list[str], bool]:
    """sshd_config's lines (its Include'd files' in place) that give a command variables (PermitUserEnvironment,
    SetEnv, AcceptEnv), and whether sshd reads the user's ~/.ssh/environment (the first PermitUserEnvironment says
    anything but no)."""
    out, todo, seen, user_env = [], [SSHD_CONFIG], set(), None
    while todo:
        path = todo.pop(0)
        if path in seen:
            continue
        seen.add(path)
        lines = _settings(root, path, keep=lambda line: _keyword(line)[0] in (*SSHD_ENV, "include"))
        for line in lines or []:
            keyword, args = _keyword(line)
            if keyword == "include":
                for pattern in args:
                    pattern = pattern if pattern.startswith("/") else os.path.join("/etc/ssh", pattern)
                    todo += [on_node(root, full) for full in sorted(glob.glob(under(root, pattern)))]
            elif keyword == "permituserenvironment" and user_env is None:
                user_env = args[:1] != ["no"]
        out += setting_lines(root, path, None if lines is None else
                             [line for line in lines if _keyword(line)[0] != "include"])
    return out, bool(user_env)


def ld_lines(root: str) -> list[str]:
    """The dynamic linker's configuration: /etc/ld.so.preload, /etc/ld.so.conf and the files its include lines name,
    but our own /etc/ld.so.conf.d/hvd-*.conf (the roles' files: the ``ldconf.*`` items)."""
    lines = setting_lines(root, "/etc/ld.so.preload")
    todo, seen = ["/etc/ld.so.conf"], set()
    while todo:
        path = todo.pop(0)
        if path in seen:
            continue
        seen.add(path)
        if path.startswith("/etc/ld.so.conf.d/hvd-") and path.endswith(".conf"):
            continue
        found = _settings(root, path)
        lines += setting_lines(root, path, found)
        for line in found or []:
            words = line.split()
            if words[:1] == ["include"]:
                for pattern in words[1:]:
                    pattern = pattern if pattern.startswith("/") else os.path.join(os.path.dirname(path), pattern)
                    todo += [on_node(root, full) for full in sorted(glob.glob(under(root, pattern)))]
    return lines


def ssh_resolved(root: str, user: str, peers: list[str], ssh: str = "ssh") -> dict:
    """``launch.ssh.<peer>``: the options (:data:`SSH_OPTIONS`) ``ssh -G <peer>`` resolves for the login user, one
    per line as ssh prints them: what the user's ~/.ssh/config and /etc/ssh/ssh_config, every Host and Match block
    of them, make of that peer's name. Run as the user (a reader running as root runs it with the user's ids); below
    a test's ``root``, with that root's ~/.ssh/config (``-F``). "absent" where ssh cannot say."""
    import pwd
    import subprocess

    if not peers:
        return {}
    argv = [ssh, "-G"]
    if root not in ("", "/"):
        home = home_of(root, user)
        argv += ["-F", under(root, os.path.join(home, ".ssh", "config")) if home else os.devnull]
    ids: dict = {}
    if os.geteuid() == 0 and user != "root" and root in ("", "/"):
        try:
            entry = pwd.getpwnam(user)
            ids = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": os.getgrouplist(user, entry.pw_gid)}
        except KeyError:
            return {f"launch.ssh.{peer}": ABSENT for peer in peers}
    out = {}
    names = list(dict.fromkeys(peers))
    for start in range(0, len(names), 16):  # at most 16 at once
        running = {}
        for peer in names[start:start + 16]:
            try:
                running[peer] = subprocess.Popen([*argv, "--", peer], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                                 stderr=subprocess.DEVNULL, text=True, **ids)
            except OSError:
                out[f"launch.ssh.{peer}"] = ABSENT
        for peer, proc in running.items():
            try:
                text = proc.communicate(timeout=SSH_TIMEOUT)[0]
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                text = ""
            lines = [line.strip()[:LINE_KEPT] for line in (text or "").splitlines()
                     if proc.returncode == 0 and line.split(" ", 1)[0] in SSH_OPTIONS]
            out[f"launch.ssh.{peer}"] = _lines_value(lines[:LAUNCH_LINES])
    return out


def launch_state(root: str, user: str = "root", peers: list[str] | None = None, ssh_path: str = "") -> dict:
    """What changes what a rank runs or how it reaches its peers, beside the env itself, as text (one line per
    setting, "<file>: <line>", so that `check` names the file and the line that differ; "absent" for none):

    - ``launch.env``: the variables a non-interactive SSH command gets from pam_env (/etc/environment,
      /etc/default/locale, /etc/security/pam_env.conf, the user's ~/.pam_environment) and sshd (the user's
      ~/.ssh/environment, where PermitUserEnvironment lets sshd read it): PYTHONPATH, LD_*, OMPI_MCA_*, NCCL_*, ...
    - ``launch.sshd``: sshd_config's PermitUserEnvironment, SetEnv and AcceptEnv lines (its Include'd files too).
    - ``launch.mpi``: Open MPI's parameter files (<prefix>/etc/openmpi-mca-params.conf of the mpirun on the SSH
      PATH, Debian's /etc/openmpi/openmpi-mca-params.conf, the user's ~/.openmpi/mca-params.conf), but for
      hvd_openmpi's own block in them: ``mpi.single_copy`` (:data:`MPI_BLOCK`).
    - ``launch.nccl``: /etc/nccl.conf and the user's ~/.nccl.conf. Horovod reads only variables (``launch.env``).
    - ``launch.ld``: the dynamic linker's preload and search-path files (:func:`ld_lines`).
    - ``launch.ssh.<peer>`` for every name in ``peers`` (:func:`ssh_resolved`).
    """
    home = home_of(root, user)
    mine = (lambda rel: [os.path.join(home, rel)]) if home else (lambda rel: [])
    sshd, user_env = sshd_lines(root)
    env_files = ["/etc/environment", "/etc/default/locale", "/etc/security/pam_env.conf", *mine(".pam_environment")]
    if user_env:
        env_files += mine(".ssh/environment")
    mpirun = mpi_state(root, ssh_path)["mpi.path"]
    mpi_files = [os.path.join(os.path.dirname(os.path.dirname(mpirun)), "etc", "openmpi-mca-params.conf")
                 if mpirun != ABSENT else "", "/etc/openmpi/openmpi-mca-params.conf", *mine(".openmpi/mca-params.conf")]
    groups = {"launch.env": env_files, "launch.nccl": ["/etc/nccl.conf", *mine(".nccl.conf")]}
    out = {key: _lines_value([line for path in files for line in setting_lines(root, path)])
           for key, files in groups.items()}
    mpi, own = [], []
    user_file = mine(".openmpi/mca-params.conf")
    for path in dict.fromkeys(f for f in mpi_files if f):
        # hvd_openmpi writes its block in the system's files only: a block in the user's own file (the user may
        # write anything there) is the user's lines like any other
        outside, inside = (_settings(root, path), []) if path in user_file else _mpi_settings(root, path)
        mpi += setting_lines(root, path, outside)
        own += setting_lines(root, path, inside)
    out["launch.mpi"], out["mpi.single_copy"] = _lines_value(mpi), _lines_value(own)
    out["launch.sshd"] = _lines_value(sshd)
    out["launch.ld"] = _lines_value(ld_lines(root))
    out.update(ssh_resolved(root, user, list(peers or [])))
    return out
