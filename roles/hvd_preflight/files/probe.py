#!/usr/bin/env python3
"""hvd_preflight's node probe: looks, changes nothing, prints one JSON document.

Usage: probe.py '<json>' where the JSON holds
  peers:       [{"name": ..., "address": ..., "port": ssh port, "probe_port": listener port}, ...]
  paths:       folders whose free space matters (/opt, /var/tmp ...)
  tmp_dir:     the scratch folder that must be writable
  host_cxx:    the host compiler CUDA builds will use, if one is set
Standard library only, Python >= 3.6 (the oldest python3 of the supported node systems).
"""

import glob
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

SIOCGIFADDR = 0x8915


def run(*argv):
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                              timeout=20)
        return proc.returncode, proc.stdout
    except (OSError, subprocess.SubprocessError) as err:
        return 127, str(err)


def read(path, default=""):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return default


def version_key(text):
    return [int(p) if p.isdigit() else p for p in re.split(r"[.\-+~]", text)]


def interfaces():
    """name -> {"ipv4": address or "", "mtu": int} for every interface (no iproute2 needed)."""
    import fcntl

    out = {}
    for path in sorted(glob.glob("/sys/class/net/*")):
        name = os.path.basename(path)
        mtu = int(read(path + "/mtu", "0").strip() or 0)
        address = ""
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            packed = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            address = socket.inet_ntoa(packed[20:24])
        except OSError:
            pass
        finally:
            sock.close()
        out[name] = {"ipv4": address, "mtu": mtu}
    return out


def route_to(address, ifaces):
    """The interface and local address the kernel picks to reach ``address`` (a UDP connect sends nothing)."""
    try:
        target = socket.gethostbyname(address)
    except OSError as err:
        return {"resolved": "", "error": "name does not resolve: %s" % err}
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.connect((target, 9))
        local = sock.getsockname()[0]
    except OSError as err:
        return {"resolved": target, "error": "no route: %s" % err}
    finally:
        sock.close()
    name = next((n for n, i in ifaces.items() if i["ipv4"] == local), "")
    return {"resolved": target, "local": local, "iface": name, "mtu": ifaces.get(name, {}).get("mtu", 0)}


def tcp(address, port, wait):
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


def kernels():
    running = os.uname().release
    installed = {os.path.basename(p) for p in glob.glob("/lib/modules/*") if os.path.isdir(p)}
    installed |= {os.path.basename(p)[len("vmlinuz-"):] for p in glob.glob("/boot/vmlinuz-*")}
    newer = sorted((k for k in installed if version_key(k) > version_key(running)), key=version_key)
    headers = any(os.path.isdir(p) for p in ("/lib/modules/%s/build" % running, "/usr/src/linux-headers-" + running,
                                                  "/usr/src/kernels/" + running))
    candidate = ""
    if not headers and shutil.which("apt-cache"):
        rc, text = run("apt-cache", "policy", "linux-headers-" + running)
        match = re.search(r"Candidate:\s*(\S+)", text)
        if rc == 0 and match and match.group(1) != "(none)":
            candidate = match.group(1)
    return {"running": running, "newer": newer, "headers": headers, "headers_candidate": candidate}


def secure_boot():
    """True/False when the firmware says, None on BIOS machines and where it cannot be read."""
    for path in glob.glob("/sys/firmware/efi/efivars/SecureBoot-*"):
        try:
            with open(path, "rb") as handle:
                data = handle.read()
            return bool(data[-1])
        except OSError:
            pass
    return None


def nvidia():
    gpus = []
    rc, text = run("nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader")
    if rc == 0:
        gpus = [line.split(",")[0].strip() for line in text.splitlines() if line.strip()]
    pci = 0
    for path in glob.glob("/sys/bus/pci/devices/*/vendor"):
        if read(path).strip() == "0x10de" and read(os.path.dirname(path) + "/class").startswith("0x03"):
            pci += 1
    loaded = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", read("/proc/driver/nvidia/version"))
    installed = sorted({os.path.basename(p)[len("libnvidia-ml.so."):]
                        for pattern in ("/usr/lib/*/libnvidia-ml.so.*.*", "/usr/lib64/libnvidia-ml.so.*.*",
                                        "/usr/lib/libnvidia-ml.so.*.*")
                        for p in glob.glob(pattern)})
    return {"gpus": gpus, "pci_devices": pci, "loaded": loaded.group(1) if loaded else "",
            "installed": installed, "nouveau": os.path.isdir("/sys/module/nouveau")}


def gcc(host_cxx):
    out = {}
    for key, name in (("gcc", "gcc"), ("g++", "g++"), ("host_cxx", host_cxx)):
        rc, text = run(name, "-dumpversion") if name else (1, "")
        out[key] = text.strip() if rc == 0 else ""
    return out


def writable(folder):
    try:
        handle, path = tempfile.mkstemp(prefix=".hvd-preflight-", dir=folder)
        os.close(handle)
        os.unlink(path)
        return ""
    except OSError as err:
        return err.strerror or str(err)


def free_gb(path):
    while not os.path.exists(path):
        path = os.path.dirname(path) or "/"
    usage = shutil.disk_usage(path)
    return round(usage.free / 2 ** 30, 1)


def main():
    args = json.loads(sys.argv[1])
    ifaces = interfaces()
    peers = []
    for peer in args.get("peers", []):
        route = route_to(peer["address"], ifaces)
        entry = {"name": peer["name"], "address": peer["address"], "route": route}
        if route.get("resolved"):
            entry["ssh"] = {"port": peer["port"], "error": tcp(route["resolved"], peer["port"], 5)}
            if peer.get("probe_port"):
                entry["probe"] = {"port": peer["probe_port"], "error": tcp(route["resolved"], peer["probe_port"], 5)}
        peers.append(entry)
    shm = os.statvfs("/dev/shm") if os.path.isdir("/dev/shm") else None
    ports = read("/proc/sys/net/ipv4/ip_local_port_range").split()
    result = {
        "time": time.time(),
        "hostname": socket.gethostname(),
        "uid": os.getuid(),
        "tmp_error": writable(args.get("tmp_dir", "/tmp")),
        "free_gb": {path: free_gb(path) for path in args.get("paths", [])},
        "shm_mb": int(shm.f_blocks * shm.f_frsize / 2 ** 20) if shm else 0,
        "kernel": kernels(),
        "secure_boot": secure_boot(),
        "nvidia": nvidia(),
        "gcc": gcc(args.get("host_cxx", "")),
        "interfaces": ifaces,
        "ephemeral_ports": [int(p) for p in ports] if len(ports) == 2 else [],
        "peers": peers,
    }
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
