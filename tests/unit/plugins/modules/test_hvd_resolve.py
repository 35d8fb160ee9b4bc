"""hvd_resolve: a node's names resolved without hvdcluster's own /etc/hosts block (real files, real resolver).

Run as Ansible runs it (its file, arguments as JSON on stdin). The names used are ones this machine's resolver
cannot answer by DNS (no network here but loopback), so what answers is the hosts file we write."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.hvd.cluster.tests.unit.plugins.support import BOOT, COLLECTIONS

# the collection root: the checkout, or the installed copy ansible-test units runs in
MODULE = Path(__file__).resolve().parents[4] / "plugins" / "modules" / "hvd_resolve.py"

HOSTS = """\
127.0.0.1 localhost
10.1.0.7 gpu07.lab gpu07  # the admin's own line
fd00::8 gpu08
10.1.0.8 gpu08
# BEGIN hvdcluster lab nodes
10.99.99.99 node3 gpu07 ghost.invalid
# END hvdcluster lab nodes
"""


def resolve(tmp_path: Path, names: list[str], prefix: tuple[str, ...] = (), **more: str) -> dict:
    (tmp_path / "hosts").write_text(HOSTS)
    (tmp_path / "resolv.conf").write_text("nameserver 127.0.0.1\nsearch lab.invalid\n")
    payload = {"ANSIBLE_MODULE_ARGS": {"names": names, "hosts_file": str(tmp_path / "hosts"),
                                       "resolv_conf": str(tmp_path / "resolv.conf"), "_ansible_check_mode": True,
                                       **more}}
    proc = subprocess.run([*prefix, sys.executable, "-c", BOOT, str(COLLECTIONS), str(MODULE)],
                          input=json.dumps(payload), capture_output=True, text=True, timeout=120)
    return json.loads(proc.stdout)


def test_the_admins_lines_answer_and_our_own_block_never_does(tmp_path: Path) -> None:
    done = resolve(tmp_path, ["gpu07", "GPU07.lab", "gpu08", "10.2.0.1"])
    assert done["addresses"] == {"gpu07": "10.1.0.7", "GPU07.lab": "10.1.0.7", "gpu08": "10.1.0.8",
                                 "10.2.0.1": "10.2.0.1"}  # IPv4 preferred; an address is itself
    assert done["sources"]["gpu07"] == "hosts" and done["sources"]["10.2.0.1"] == "address"
    assert not done.get("changed")


def test_our_block_never_outranks_another_source_and_is_only_kept_when_nothing_else_knows(tmp_path: Path) -> None:
    """gpu07 is in the admin's lines and in our block (10.99.99.99): the admin's answer wins. ghost.invalid is only
    in our block (a node that is down has left DNS): its address is kept, said so, rather than failing its peers."""
    done = resolve(tmp_path, ["gpu07", "ghost.invalid"])
    assert done["addresses"] == {"gpu07": "10.1.0.7", "ghost.invalid": "10.99.99.99"}
    assert done["sources"] == {"gpu07": "hosts", "ghost.invalid": "kept"}


def test_a_name_nothing_knows_fails_naming_it(tmp_path: Path) -> None:
    done = resolve(tmp_path, ["nowhere.invalid"])
    assert done["failed"] and "cannot resolve nowhere.invalid" in done["msg"]


def ip_addresses(*prefix: str) -> list[tuple[str, str]]:
    """(interface, address) as iproute2 lists them (``ip -o addr``)."""
    out = subprocess.run([*prefix, "ip", "-o", "addr"], capture_output=True, text=True, check=True).stdout
    return [(line.split()[1], line.split()[3].split("/")[0]) for line in out.splitlines() if line.strip()]


@pytest.mark.skipif(shutil.which("ip") is None, reason="iproute2 (ip) is not installed here")
def test_the_interface_of_each_address_is_the_one_iproute2_names(tmp_path: Path) -> None:
    """hvd_base's fabric fact: the interface read from the kernel (netlink), held against `ip` on this machine.
    Other tests (and Docker) add and remove bridges meanwhile: an address `ip` no longer lists after the module's read
    went away between the two and is not held against it; every address that stayed is."""
    listed = ip_addresses()
    assert listed and ("lo", "127.0.0.1") in listed
    held = 0
    for name, address in listed:
        done = resolve(tmp_path, [address], interface_of=address)
        if done.get("interface") != name and (name, address) not in ip_addresses():
            continue  # gone between the reads
        assert done.get("interface") == name, (address, done)
        held += 1
    assert held >= 1  # lo at least


def test_an_address_no_interface_carries_names_none_and_interface_of_must_be_a_name(tmp_path: Path) -> None:
    assert resolve(tmp_path, ["gpu07"], interface_of="gpu07")["interface"] == ""  # 10.1.0.7: not this machine's
    done = resolve(tmp_path, ["gpu07"], interface_of="gpu08")
    assert done["failed"] and "interface_of: gpu08 is not one of names" in done["msg"]
    assert "interface" not in resolve(tmp_path, ["gpu07"])


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None,
                    reason="needs root, unshare and ip: a network namespace of its own")
def test_a_secondary_address_is_found_on_its_interface(tmp_path: Path) -> None:
    """A second address on an interface (where `ip` finds it and a per-interface query of the first address does
    not): in a network namespace of the test's own, on its loopback."""
    script = tmp_path / "netns.sh"
    script.write_text("ip link set lo up && ip addr add 10.77.0.9/24 dev lo && ip addr add 10.77.0.10/24 dev lo"
                      f" && exec {sys.executable} -c {shlex.quote(BOOT)} {COLLECTIONS} {MODULE}\n")
    done = resolve(tmp_path, ["10.77.0.10", "gpu07"], prefix=("unshare", "--net", "sh", str(script)),
                   interface_of="10.77.0.10")
    assert done["interface"] == "lo", done


@pytest.mark.skipif(shutil.which("ip") is None, reason="iproute2 (ip) is not installed here")
def test_the_preflight_look_reads_the_same_list_each_interfaces_first_ipv4_and_mtu() -> None:
    """The pre-flight's look (hvd_host.interfaces) takes hvd_resolve's netlink reader: per interface the first IPv4
    address `ip -4` lists, and the MTU, held against this machine."""
    from ansible_collections.hvd.cluster.plugins.module_utils.hvd_host import interfaces

    first: dict[str, str] = {}
    for name, address in ip_addresses():
        if "." in address:
            first.setdefault(name, address)
    found = interfaces()
    assert sorted(found) == sorted(os.listdir("/sys/class/net")) and found["lo"]["ipv4"] == "127.0.0.1"
    for name, look in found.items():
        mtu = int(Path(f"/sys/class/net/{name}/mtu").read_text())
        assert look == {"ipv4": first.get(name, ""), "mtu": mtu}, (name, look)


def test_the_preflight_looks_for_a_peer_where_hvd_resolve_finds_it_not_where_a_drifted_block_says(
        tmp_path: Path) -> None:
    """The pre-flight runs before hvd_base repairs our /etc/hosts block: a peer whose line there drifted (10.99.99.99)
    is looked for where every other source says it is (here the admin's own line, loopback), and found listening; a
    name only our block knows is still looked for there (nothing else knows it)."""
    import socket  # noqa: PLC0415 - only here

    from ansible_collections.hvd.cluster.plugins.module_utils.hvd_host import interfaces, route_to, tcp

    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost peer7\n# BEGIN hvdcluster lab nodes\n10.99.99.99 peer7 ghost.invalid\n"
                     "# END hvdcluster lab nodes\n")
    ifaces = interfaces()
    route = route_to("peer7", ifaces, hosts_file=str(hosts))
    assert route["resolved"] == "127.0.0.1" and route["iface"] == "lo", route
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        assert tcp(route["resolved"], listener.getsockname()[1], 1) == ""
    assert route_to("ghost.invalid", ifaces, hosts_file=str(hosts))["resolved"] == "10.99.99.99"
