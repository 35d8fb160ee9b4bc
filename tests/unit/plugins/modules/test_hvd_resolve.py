"""hvd_resolve: a node's names resolved without hvdcluster's own /etc/hosts block (real files, real resolver).

Run as Ansible runs it (its file, arguments as JSON on stdin). The names used are ones this machine's resolver
cannot answer by DNS (no network here but loopback), so what answers is the hosts file we write."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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


def resolve(tmp_path: Path, names: list[str]) -> dict:
    (tmp_path / "hosts").write_text(HOSTS)
    (tmp_path / "resolv.conf").write_text("nameserver 127.0.0.1\nsearch lab.invalid\n")
    payload = {"ANSIBLE_MODULE_ARGS": {"names": names, "hosts_file": str(tmp_path / "hosts"),
                                       "resolv_conf": str(tmp_path / "resolv.conf"), "_ansible_check_mode": True}}
    proc = subprocess.run([sys.executable, str(MODULE)], input=json.dumps(payload), capture_output=True, text=True,
                          timeout=120)
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
