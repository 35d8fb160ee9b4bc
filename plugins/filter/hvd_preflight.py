"""hvd_preflight's judge: what every node's probe found -> findings, on the controller.

``probes`` maps each host to its host look (hvd_node_state with ``look``), plus what the role read itself
(``os`` from the facts, ``mpi.login``: a login shell's mpirun). ``plan`` holds what is about to be installed and
the limits (see the role's defaults). Each finding: host, check, severity (fail or warn), found, expected, fix.
Pure functions, so the rules are unit-tested without nodes (tests/unit/plugins/filter/test_hvd_preflight.py).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from ansible_collections.hvd.cluster.plugins.module_utils.hvd_limits import cuda_outside, driver_above, gcc_above, gpu_row
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_names import hostname_problem

FAIL, WARN = "fail", "warn"


def _finding(host: str, check: str, severity: str, found: str, expected: str, fix: str) -> dict[str, str]:
    return {"host": host, "check": check, "severity": severity, "found": found, "expected": expected, "fix": fix}


def _per_host(host: str, p: dict[str, Any], plan: dict[str, Any]) -> list[dict[str, str]]:
    out = []

    def add(*a) -> None:
        out.append(_finding(host, *a))

    osinfo = p.get("os") or {}
    supported = plan.get("supported_os") or {}
    accepted = supported.get(osinfo.get("distribution"), [])
    if osinfo and str(osinfo.get("version")) not in accepted and str(osinfo.get("major")) not in accepted:
        add("os-supported", FAIL, f"{osinfo.get('distribution')} {osinfo.get('version')}",
            ", ".join(f"{k} {'/'.join(map(str, v))}" for k, v in supported.items())
            + (f" ({plan['supported_os_why']})" if plan.get("supported_os_why") else ""),
            "install a supported operating system on this node")

    if p.get("uid") not in (None, 0):
        add("become-root", FAIL, f"tasks run as uid {p.get('uid')}", "uid 0 (root)",
            "connect as root, or give the ssh user passwordless sudo and set `ssh: {become: true}` in hosts.yaml")

    name = p.get("hostname", "")
    problem = hostname_problem(name.lower()) if name and not plan.get("set_hostname") else None
    if problem:
        add("hostname-valid", FAIL, f"hostname {name!r}: {problem}",
            "an RFC 1123 name: letters, digits and inner hyphens, dot-separated",
            "rename the node (hostnamectl set-hostname NAME), or set `set_hostname: true` in hosts.yaml")

    if p.get("tmp_error"):
        add("tmp-writable", FAIL, f"{plan.get('tmp_dir', '/tmp')} not writable ({p['tmp_error']})",
            "a writable scratch folder", f"remount it read-write (mount -o remount,rw {plan.get('tmp_dir', '/tmp')})")

    for path, free in sorted((p.get("free_gb") or {}).items()):
        need = plan.get("min_free_gb", 0)
        if free < need:
            add("disk-free", FAIL, f"{free} GiB free under {path}", f">= {need} GiB for the planned install",
                f"free space under {path} or grow its filesystem")

    shm, need = p.get("shm_mb", 0), plan.get("min_shm_mb", 0)
    if shm < need:
        add("shm-size", FAIL, f"/dev/shm is {shm} MiB", f">= {need} MiB (NCCL and Gloo pass data through it)",
            "mount -o remount,size=1G /dev/shm (and in /etc/fstab); containers: --shm-size=1g")

    kernel = p.get("kernel") or {}
    module = bool(p.get("kernel_module", plan.get("kernel_module")))
    if kernel.get("newer"):
        add("kernel-booted", FAIL if module else WARN,
            f"kernel {kernel['newer'][-1]} installed, {kernel.get('running')} running",
            "the newest installed kernel is the running one",
            "reboot into the new kernel before the driver is built (DKMS builds for the running kernel)")
    if module and not kernel.get("headers") and not kernel.get("headers_candidate"):
        add("kernel-headers", FAIL, f"no headers for the running kernel {kernel.get('running')} (none installed, "
            "none installable)", f"linux-headers-{kernel.get('running')} installed or installable",
            f"install linux-headers-{kernel.get('running')}, or boot a kernel whose headers your mirror carries")
    if module and p.get("secure_boot"):
        add("secure-boot", FAIL, "Secure Boot is on", "off, or a signing key enrolled for DKMS modules",
            "enroll a MOK for DKMS (mokutil --import) or turn Secure Boot off; an unsigned nvidia module will not load")

    nv = p.get("nvidia") or {}
    if nv.get("nouveau") and (nv.get("pci_devices") or nv.get("gpus")):
        add("nouveau", WARN, "the nouveau module is loaded", "nouveau not loaded",
            "hvd_nvidia_driver blacklists it; reboot afterwards (or set hvd_nvidia_driver_reboot: true)")
    installed = nv.get("installed") or []
    if nv.get("loaded") and installed and nv["loaded"] not in installed:
        add("driver-loaded", FAIL, f"kernel module {nv['loaded']} loaded, driver {', '.join(installed)} installed",
            "the loaded module is the installed driver (else: Driver/library version mismatch)",
            "reboot the node (or unload and reload the nvidia modules)")

    for gpu in nv.get("gpus") or []:
        rule = gpu_row(plan.get("gpu_rules"), gpu)
        if not rule:
            continue
        cuda, driver = plan.get("cuda") or "", plan.get("driver") or ""
        bound = cuda_outside(rule, cuda) if cuda else None
        if bound:
            add("gpu-supported", FAIL, f"{gpu} ({rule.get('arch')}) with CUDA {cuda}", f"CUDA {bound}",
                f"plan CUDA {bound[3:]} or {'newer' if bound.startswith('>') else 'older'} (stack.cuda in hosts.yaml)")
        if driver and driver_above(rule, driver):
            add("gpu-supported", FAIL, f"{gpu} ({rule.get('arch')}) with driver {driver}",
                f"driver branch <= {rule['driver_max']}", f"plan driver {rule['driver_max']} (stack.driver)")

    gcc_max = plan.get("gcc_max")
    compiler = p.get("gcc", {}).get("host_cxx") or p.get("gcc", {}).get("g++") or ""
    if plan.get("cuda") and compiler and gcc_above(compiler, gcc_max):
        add("gcc-nvcc", FAIL, f"g++ {compiler} is the host compiler", f"g++ <= {gcc_max} (nvcc {plan['cuda']})",
            f"install g++-{gcc_max} and use it for CUDA (stack.gcc: \"{gcc_max}\" in hosts.yaml)")

    mpi = p.get("mpi") or {}
    if mpi.get("login") and not mpi.get("noninteractive"):
        add("mpi-path", FAIL, f"mpirun {mpi['login']} on the login PATH only",
            "the same mpirun on the PATH of non-interactive SSH commands (else: orted: command not found)",
            f"put {mpi['login'].rsplit('/', 1)[0]} on the PATH of non-interactive shells (/etc/environment), "
            "or remove it and let hvd_openmpi install Open MPI")
    return out


def _odd_ones(values: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """Where the nodes disagree: (host, its value, the most common value) for every host off the common one."""
    if len(set(values.values())) < 2:
        return []
    common = Counter(values.values()).most_common(1)[0][0]
    return [(host, value, common) for host, value in sorted(values.items()) if value != common]


def _cross(probes: dict[str, dict[str, Any]], plan: dict[str, Any]) -> list[dict[str, str]]:
    out = []
    if not plan.get("set_hostname"):
        by_name = defaultdict(list)
        for host, p in probes.items():
            if p.get("hostname"):
                by_name[p["hostname"]].append(host)
        for name, hosts in by_name.items():
            for host in hosts if len(hosts) > 1 else []:
                others = ", ".join(h for h in hosts if h != host)
                out.append(_finding(host, "hostname-unique", FAIL, f"hostname {name!r}, also on {others}",
                                    "a hostname no other node has",
                                    "give every node its own hostname (or set `set_hostname: true` in hosts.yaml)"))

    # Reachability between every pair, on the fabric: judged on the target, naming who cannot reach it.
    unreachable: dict[tuple[str, str], list[str]] = defaultdict(list)
    routes: dict[str, dict[str, dict]] = {}
    for host, p in probes.items():
        for peer in p.get("peers") or []:
            target = peer["name"]
            route = peer.get("route") or {}
            routes.setdefault(host, {})[target] = route
            if route.get("error"):
                unreachable[(target, f"{peer['address']}: {route['error']}")].append(host)
                continue
            for kind in ("ssh", "probe"):
                result = peer.get(kind)
                if result and result.get("error"):
                    what = f"{peer['address']}:{result['port']} ({result['error']})"
                    unreachable[(target, what)].append(host)
    for (target, what), sources in sorted(unreachable.items()):
        ephemeral = plan.get("probe_port") and what.split(" ")[0].endswith(f":{plan.get('probe_port')}")
        out.append(_finding(
            target, "peer-port" if ephemeral else "peer-reachable", FAIL,
            f"{', '.join(sorted(sources))} cannot connect to {what}",
            "every node reaches every other node over TCP on the fabric (SSH and the ephemeral ports NCCL and "
            "Gloo open)" if ephemeral else "every node reaches every other node's SSH port on the fabric",
            "open TCP between the nodes' fabric addresses (ports "
            f"{'-'.join(map(str, plan.get('ephemeral_ports') or [32768, 60999]))}) in the firewall"
            if ephemeral else "check fabric_address/fabric_port in hosts.yaml, sshd and the firewall on the fabric"))

    # One fabric interface name every node uses to reach its peers, with one MTU.
    used = {host: sorted({r.get("iface") for r in peers.values() if r.get("iface")}) for host, peers in routes.items()}
    used = {h: names for h, names in used.items() if names}
    if len(used) > 1 and not set.intersection(*(set(v) for v in used.values())):
        listing = "; ".join(f"{h}: {','.join(v)}" for h, v in sorted(used.items()))
        for host in used:
            out.append(_finding(host, "fabric-interface", FAIL, f"fabric interfaces {listing}",
                                "one interface name on every node (horovodrun/NCCL take a single name)",
                                "give the fabric NICs one name (a udev rule or netplan set-name)"))
    mtus = {}
    for host, peers in routes.items():
        for route in peers.values():
            if route.get("mtu"):
                mtus[host] = route["mtu"]
    for host, mtu, common in _odd_ones(mtus):
        out.append(_finding(host, "mtu", FAIL, f"fabric MTU {mtu}", f"the MTU of the others ({common})",
                            f"set MTU {common} on the fabric interface (ip link set dev IF mtu {common})"))

    gpu_sets = {h: tuple(sorted((p.get("nvidia") or {}).get("gpus") or [])) for h, p in probes.items()}
    gpu_sets = {h: g for h, g in gpu_sets.items() if g}
    for host, gpus, common in _odd_ones(gpu_sets):
        out.append(_finding(host, "gpu-models", WARN, f"GPUs {', '.join(gpus)}",
                            f"the GPUs of the others ({', '.join(common)})",
                            "expect the slowest GPU to set the pace; build for every compute capability"))

    versions = {h: (p.get("mpi") or {}).get("version") for h, p in probes.items()}
    versions = {h: v for h, v in versions.items() if v}
    for host, version, common in _odd_ones(versions):
        out.append(_finding(host, "mpi-same", FAIL, f"non-interactive SSH finds {version}",
                            f"the MPI of the others ({common})",
                            "remove the stray MPI from the PATH, then let hvd_openmpi install one MPI"))

    window = plan.get("controller_time") or []
    skew = float(plan.get("max_clock_skew_s", 0) or 0)
    if len(window) == 2 and skew:
        for host, p in sorted(probes.items()):
            t = p.get("time")
            if t is None:
                continue
            off = t - window[1] if t > window[1] else (t - window[0] if t < window[0] else 0.0)
            if abs(off) > skew:
                out.append(_finding(host, "clock-skew", FAIL, f"clock {off:+.1f} s from the controller's",
                                    f"within {skew:g} s", "run an NTP client (chrony or systemd-timesyncd)"))
    return out


def hvd_preflight_findings(probes: dict[str, dict[str, Any]], plan: dict[str, Any]) -> dict[str, list[dict]]:
    """host -> its findings (fail first), for every probed host (an empty list when all is well)."""
    found: dict[str, list[dict]] = {host: [] for host in probes}
    for host, p in probes.items():
        found[host].extend(_per_host(host, p, plan))
    for finding in _cross(probes, plan):
        found.setdefault(finding["host"], []).append(finding)
    for host in found:
        found[host].sort(key=lambda f: (f["severity"] != FAIL, f["check"]))
    return found


def hvd_preflight_report(findings: dict[str, list[dict]]) -> list[str]:
    """Findings as report lines: HOST  CHECK  FOUND / EXPECTED / FIX."""
    rows = [f for host in sorted(findings) for f in findings[host]]
    if not rows:
        return [f"all {len(findings)} nodes passed every pre-flight check"]
    return [f"{f['severity'].upper():4}  {f['host']}  {f['check']}: found {f['found']}; expected {f['expected']}; "
            f"fix: {f['fix']}" for f in rows]


def hvd_preflight_line(finding: dict[str, str], short: bool = False) -> str:
    """One finding in one line: check: found ...; expected ...; fix: ... (short: without expected)."""
    expected = "" if short else f"; expected {finding['expected']}"
    return f"{finding['check']}: found {finding['found']}{expected}; fix: {finding['fix']}"


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"hvd_preflight_findings": hvd_preflight_findings, "hvd_preflight_report": hvd_preflight_report,
                "hvd_preflight_line": hvd_preflight_line}
