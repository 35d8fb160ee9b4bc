"""How the controller's ssh is told to check host keys and to go through a bastion: the SSH arguments written
into the inventory (templated by Ansible), and the same quoting for ssh run by hvdcluster itself."""

from __future__ import annotations

import shlex
from typing import Any

BASTION_KNOWN_HOSTS = "bastion_known_hosts"  # in <inventory>/ssh/: the bastion's pinned key, from hosts.yaml


# A path goes through up to four readers on its way into ssh, each with its own syntax, so it is quoted for each, in
# order, after Ansible has templated inventory_dir into it (never before: a quote in the folder's name would end it):
#   1. ssh's option parser splits a value at spaces and reads quotes and backslashes: the path is written as one
#      double-quoted word, `\` and `"` escaped; ssh then expands %-tokens in it: `%` is doubled (ssh_word);
#   2. ProxyCommand is run by a shell: each argument is shell-quoted (Ansible's `quote`, Python's shlex.quote);
#   3. ssh expands %-tokens in ProxyCommand (%h, %p): every `%` of ours is doubled once more;
#   4. Ansible splits ansible_ssh_common_args like a shell (shlex): each -o value is shell-quoted as a whole.
# So a folder named `it's $HOME 100% mine` works. Written with Jinja's own filters, so a hand-written inventory needs
# nothing of hvdcluster's.


_JINJA_BACKSLASH = "('%c' | format(92))"  # no backslash literal: Ansible versions differ in how they read one in Jinja


def _jinja_ssh_word(path: str) -> str:
    """Jinja: the path expression ``path`` as one word of an ssh option (reader 1)."""
    bs = _JINJA_BACKSLASH
    return f"""'"' ~ ({path}) | replace({bs}, {bs} ~ {bs}) | replace('"', {bs} ~ '"') | replace('%', '%%') ~ '"'"""


# How the controller checks node host keys (ours, templated by Ansible on purpose: the one value written without
# !unsafe): against ssh/known_hosts beside the inventory; a node with pinned keys (hvd_host_keys, from hosts.yaml,
# written there before any contact) strictly, any other by recording its key on first contact (accept-new). A key
# other than the recorded one is refused either way; checking is never off.
SSH_COMMON_ARGS = (
    "-o StrictHostKeyChecking={{ 'yes' if hvd_host_keys | default([]) else 'accept-new' }} "
    "-o {{ ('UserKnownHostsFile=' ~ " + _jinja_ssh_word("inventory_dir ~ '/ssh/known_hosts'") + ") | quote }}"
)
# Where Ansible keeps its ssh connection masters (ControlPersist) for this inventory: a folder of its own, named by
# the inventory's ssh/ folder (real path: `plan --probe`'s linked copy shares it). Ansible names a master by host,
# port and user alone, so without this a master opened through another inventory (another known_hosts, another
# bastion: a private address behind one site's bastion is often the same as behind another's) was used as it was,
# and its node's key was never checked against, nor recorded in, this inventory's ssh/known_hosts. An operator's
# ANSIBLE_SSH_CONTROL_PATH_DIR stays the parent folder.
CONTROL_PATH_DIR = (
    "{{ (lookup('ansible.builtin.env', 'ANSIBLE_SSH_CONTROL_PATH_DIR') or '~/.ansible/cp') ~ '/hvd-' ~ "
    "((inventory_dir ~ '/ssh') | ansible.builtin.realpath | ansible.builtin.hash('sha1'))[:12] }}"
)
# Through the bastion (hvd_ssh_proxy_jump): ssh to it, checking its key against ssh/bastion_known_hosts only.
PROXY_COMMAND_ARG = (
    "-o {{ ('ProxyCommand=ssh -W %h:%p ' ~ (['-p', hvd_ssh_proxy_jump.port | string, '-o', 'BatchMode=yes', "
    "'-o', 'StrictHostKeyChecking=yes', '-o', 'UserKnownHostsFile=' ~ "
    + _jinja_ssh_word(f"inventory_dir ~ '/ssh/{BASTION_KNOWN_HOSTS}'") + "]"
    " + (['-o', 'IdentityFile=' ~ " + _jinja_ssh_word("hvd_ssh_proxy_jump.identity") + "]"
    " if hvd_ssh_proxy_jump.identity else [])"
    " + [hvd_ssh_proxy_jump.user ~ '@' ~ hvd_ssh_proxy_jump.host]) | map('quote') | map('replace', '%', '%%')"
    " | join(' ')) | quote }}"
)


def ssh_word(value: str) -> str:
    """``value`` as one word of an OpenSSH option (``-o Key=VALUE`` or a config line): double-quoted with ``\\`` and
    ``"`` escaped, ``%`` doubled (ssh expands %-tokens in file names and commands)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%") + '"'


def known_hosts_pattern(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


def bastion_argv(jump: dict[str, Any], ssh_dir: str, *options: str) -> list[str]:
    """ssh to the bastion ``jump`` (host, port, user, identity): its host key is checked against
    ``<ssh_dir>/bastion_known_hosts`` only, and never learnt (StrictHostKeyChecking=yes). An argv (no shell); any
    folder name works."""
    argv = ["ssh", *options, "-p", str(jump["port"]), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
            "-o", "UserKnownHostsFile=" + ssh_word(f"{ssh_dir}/{BASTION_KNOWN_HOSTS}")]
    if jump.get("identity"):  # not -i, which looks for the file before expanding %-tokens in its name
        argv += ["-o", "IdentityFile=" + ssh_word(str(jump["identity"]))]
    return [*argv, f"{jump['user']}@{jump['host']}"]


def proxy_command(jump: dict[str, Any], ssh_dir: str) -> str:
    """OpenSSH's ProxyCommand through the bastion ``jump`` (the value of ``-o ProxyCommand=``): each argument
    shell-quoted, then every ``%`` of ours doubled (ssh expands %h and %p in it before a shell runs it)."""
    argv = bastion_argv(jump, ssh_dir)
    return "ssh -W %h:%p " + " ".join(shlex.quote(arg).replace("%", "%%") for arg in argv[1:])


def bastion_problem(jump: dict[str, Any], ssh_dir: str, timeout: float = 20) -> str:
    """Why the bastion cannot be used ("" when a login to it works): what ssh said, in one line."""
    import subprocess

    argv = bastion_argv(jump, ssh_dir, "-o", f"ConnectTimeout={int(timeout)}")
    try:
        proc = subprocess.run([*argv, "true"], capture_output=True, text=True, timeout=timeout + 10, check=False)
    except (OSError, subprocess.SubprocessError) as err:
        return f"cannot run ssh: {err}"
    if proc.returncode == 0:
        return ""
    text = proc.stderr
    where = f"the bastion {jump['host']}:{jump['port']}"
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in text or "Host key verification failed" in text:
        return (f"{where} presented a host key other than ssh.proxy_jump.host_key in hosts.yaml (refused: possible "
                "man-in-the-middle); check the bastion's key with its operator (ssh-keyscan) and correct host_key")
    last = [line for line in text.splitlines() if line.strip()][-1:] or [f"ssh exited {proc.returncode}"]
    return f"{where} refused or failed the login ({last[0].strip()})"
