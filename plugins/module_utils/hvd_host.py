"""hvd_node_state's look at the host itself, for the pre-flight and ``plan --probe``: what a converge depends on
but does not install (kernel and its headers, disks, /dev/shm, Secure Boot, GPUs, compilers, the interpreter, the
MPI a non-interactive SSH command finds) and whether every peer is reachable on the routes and ports the jobs use.

Unlike the managed-state readers (plugins/module_utils/hvd_state.py: file reads only), this look asks programs (nvidia-smi,
gcc, mpirun, apt-cache) and opens TCP connections to the peers; it writes nothing but one temporary file it removes
at once (is the scratch folder writable?). Nested dicts, the shape plugins/filter/hvd_preflight.py judges.
"""

from __future__ import annotations

import glob
import ipaddress
import os
import platform
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_boot import version_key
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_driver import (
    find_nvml,
    installed_versions,
    loaded_version,
)
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_fabric import nvidia_pci
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import read_text, under
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_netlink import kernel_addresses
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_resolver import resolve
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_state_stack import mpi_state, os_state


def run(*argv: str, path: str | None = None) -> tuple[int, str]:
    """rc and output of a program (127 when it cannot be started); ``path``: the PATH it is looked up on."""
    env = dict(os.environ, LC_ALL="C")
    if path is not None:
        env["PATH"] = path
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                              timeout=20, env=env, check=False)
        return proc.returncode, proc.stdout
    except (OSError, subprocess.SubprocessError) as err:
        return 127, str(err)


# ------------------------------------------------------------------------------------------ the host


def interfaces() -> dict:
    """name -> {"ipv4": its first IPv4 address or "", "mtu": int} for every interface (the kernel's netlink list,
    hvd_resolve's reader: no iproute2 needed)."""
    first: dict[str, str] = {}
    for name, address in kernel_addresses():
        if "." in address:
            first.setdefault(name, address)
    out = {}
    for path in sorted(glob.glob("/sys/class/net/*")):
        name = os.path.basename(path)
        mtu = int((read_text(path + "/mtu") or "0").strip() or 0)
        out[name] = {"ipv4": first.get(name, ""), "mtu": mtu}
    return out


def kernels(root: str = "/") -> dict:
    """The running kernel, newer installed ones (a reboot would change it), and whether its headers are there or
    can be installed."""
    running = os.uname().release
    installed = {os.path.basename(p) for p in glob.glob(under(root, "/lib/modules/*")) if os.path.isdir(p)}
    installed |= {os.path.basename(p)[len("vmlinuz-"):] for p in glob.glob(under(root, "/boot/vmlinuz-*"))}
    newer = sorted((k for k in installed if version_key(k) > version_key(running)), key=version_key)
    headers = any(os.path.isdir(under(root, p)) for p in (f"/lib/modules/{running}/build",
                                                          f"/usr/src/linux-headers-{running}"))
    candidate = ""
    if not headers and root in ("", "/") and shutil.which("apt-cache"):
        rc, text = run("apt-cache", "policy", "linux-headers-" + running)
        match = re.search(r"Candidate:\s*(\S+)", text)
        if rc == 0 and match and match.group(1) != "(none)":
            candidate = match.group(1)
    return {"running": running, "newer": newer, "headers": headers, "headers_candidate": candidate}


def secure_boot(root: str = "/") -> bool | None:
    """True/False when the firmware says, None on BIOS machines and where it cannot be read."""
    for path in glob.glob(under(root, "/sys/firmware/efi/efivars/SecureBoot-*")):
        try:
            with open(path, "rb") as handle:
                data = handle.read()
            return bool(data[-1])
        except (OSError, IndexError):
            pass
    return None


def gpu_models(root: str = "/") -> list[str]:
    """The GPUs' model names: nvidia-smi's, else the driver's /proc/driver/nvidia/gpus/*/information."""
    if root in ("", "/"):
        rc, text = run("nvidia-smi", "--query-gpu=name", "--format=csv,noheader")
        if rc == 0:
            return [line.strip() for line in text.splitlines() if line.strip()]
    models = []
    for path in sorted(glob.glob(under(root, "/proc/driver/nvidia/gpus/*/information"))):
        match = re.search(r"^Model:\s*(.+?)\s*$", read_text(path) or "", re.M)
        if match:
            models.append(match.group(1))
    return models


def nvidia(root: str = "/") -> dict:
    """GPUs by model, NVIDIA display devices on the PCI bus, the loaded and installed driver, nouveau."""
    pci = sum(1 for dev in nvidia_pci(root) if dev["class"].startswith("0x03"))  # display devices
    loaded = loaded_version(read_text(under(root, "/proc/driver/nvidia/version")) or "")
    installed = installed_versions(find_nvml(root))
    return {"gpus": gpu_models(root), "pci_devices": pci, "loaded": loaded, "installed": installed,
            "nouveau": os.path.isdir(under(root, "/sys/module/nouveau"))}


def compilers(host_cxx: str = "") -> dict:
    """gcc's full version, g++'s and the CUDA host compiler's (``host_cxx``) major-level ones; "" where absent."""
    out = {}
    for key, argv in (("gcc", ("gcc", "-dumpfullversion", "-dumpversion")), ("g++", ("g++", "-dumpversion")),
                      ("host_cxx", (host_cxx, "-dumpversion"))):
        rc, text = run(*argv) if argv[0] else (1, "")
        out[key] = text.strip().splitlines()[0] if rc == 0 and text.strip() else ""
    return out


def mpi(ssh_path: str = "", root: str = "/") -> dict:
    """The mpirun a non-interactive SSH command finds (on ``ssh_path``) and the first line of its --version."""
    path = mpi_state(root, ssh_path)["mpi.path"]
    if path == "absent":
        return {"noninteractive": "", "version": ""}
    rc, text = run(under(root, path), "--version") if root in ("", "/") else (1, "")
    return {"noninteractive": path, "version": text.strip().splitlines()[0] if rc == 0 and text.strip() else ""}


def login_mpirun(user: str) -> str:
    """The mpirun a login shell of ``user`` finds (bash -l, as ``ssh user@node bash -lc`` would run it), "" where it
    finds none or cannot be asked. As root (the probe's become) it becomes that user with runuser's login session:
    its HOME, the PAM environment (/etc/environment), its profile files."""
    if not user:
        return ""
    try:
        me = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        me = ""
    if user == me:
        rc, text = run("bash", "-lc", "command -v mpirun || true")
    elif os.geteuid() == 0:
        rc, text = run("runuser", "-l", user, "-s", "/bin/bash", "-c", "command -v mpirun || true")
    else:
        return ""
    paths = [line.strip() for line in text.splitlines() if line.strip().startswith("/")] if rc == 0 else []
    return paths[-1] if paths else ""


def writable(folder: str) -> str:
    try:
        handle, path = tempfile.mkstemp(prefix=".hvd-preflight-", dir=folder)
        os.close(handle)
        os.unlink(path)
        return ""
    except OSError as err:
        return err.strerror or str(err)


def free_gb(path: str) -> float:
    while not os.path.exists(path):
        path = os.path.dirname(path) or "/"
    return round(shutil.disk_usage(path).free / 2 ** 30, 1)


# ------------------------------------------------------------------------------------------ the peers


def route_to(address: str, ifaces: dict, hosts_file: str = "/etc/hosts") -> dict:
    """The interface and local address the kernel picks to reach ``address`` (a UDP connect sends nothing). A name is
    resolved as hvd_resolve resolves it: our own /etc/hosts block (which hvd_base repairs after the pre-flight) only
    where nothing else knows the name, so a drifted line there sends the look to the peer's real address."""
    found, _source = resolve(address, hosts_file)
    try:
        target = found if found and ipaddress.ip_address(found).version == 4 else socket.gethostbyname(address)
    except OSError as err:
        return {"resolved": "", "error": f"name does not resolve: {err}"}
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.connect((target, 9))
        local = sock.getsockname()[0]
    except OSError as err:
        return {"resolved": target, "error": f"no route: {err}"}
    finally:
        sock.close()
    name = next((n for n, i in ifaces.items() if i["ipv4"] == local), "")
    return {"resolved": target, "local": local, "iface": name, "mtu": ifaces.get(name, {}).get("mtu", 0)}


def tcp(address: str, port: int, wait: float) -> str:
    """"" when a TCP connection to address:port opens, else why not (retried for ``wait`` seconds)."""
    deadline = time.time() + wait
    while True:
        try:
            with socket.create_connection((address, port), timeout=3):
                return ""
        except OSError as err:
            reason = err.strerror or str(err) or type(err).__name__
            if time.time() >= deadline or isinstance(err, socket.timeout):
                return reason
            time.sleep(0.5)


def peers_seen(peers: list[dict], ifaces: dict) -> list[dict]:
    """For every peer (name, address, port: SSH, probe_port: the pre-flight's listener): its route, and whether
    its SSH port and listener answer."""
    out = []
    for peer in peers:
        route = route_to(peer["address"], ifaces)
        entry = {"name": peer["name"], "address": peer["address"], "route": route}
        if route.get("resolved"):
            entry["ssh"] = {"port": peer["port"], "error": tcp(route["resolved"], int(peer["port"]), 5)}
            if peer.get("probe_port"):
                entry["probe"] = {"port": peer["probe_port"],
                                  "error": tcp(route["resolved"], int(peer["probe_port"]), 5)}
        out.append(entry)
    return out


# ------------------------------------------------------------------------------------------ all of it


def look(*, peers: list[dict] | None = None, paths: list[str] | None = None, tmp_dir: str = "/tmp",
         host_cxx: str = "", ssh_path: str = "", login_user: str = "") -> dict:
    """The host as the pre-flight judges it and ``plan --probe`` resolves for it (nested, JSON-ready); with
    ``login_user``, ``mpi.login`` is the mpirun that user's login shell finds."""
    ifaces = interfaces()
    release = os_state("/")["os.release"]
    os_id, dummy, os_version = ("" if release == "absent" else release).partition(" ")
    shm = os.statvfs("/dev/shm") if os.path.isdir("/dev/shm") else None
    ports = (read_text("/proc/sys/net/ipv4/ip_local_port_range") or "").split()
    return {
        "time": time.time(),
        "hostname": socket.gethostname(),
        "uid": os.getuid(),
        "release": {"id": os_id, "version": os_version},
        "python": platform.python_version(),
        "tmp_error": writable(tmp_dir),
        "free_gb": {path: free_gb(path) for path in paths or []},
        "shm_mb": int(shm.f_blocks * shm.f_frsize / 2 ** 20) if shm else 0,
        "kernel": kernels(),
        "secure_boot": secure_boot(),
        "nvidia": nvidia(),
        "gcc": compilers(host_cxx),
        "mpi": {**mpi(ssh_path), **({"login": login_mpirun(login_user)} if login_user else {})},
        "interfaces": ifaces,
        "ephemeral_ports": [int(p) for p in ports] if len(ports) == 2 else [],
        "peers": peers_seen(peers or [], ifaces),
    }
