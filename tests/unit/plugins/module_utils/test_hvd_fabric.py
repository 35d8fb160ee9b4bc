"""plugins/module_utils/hvd_fabric.py and the hvd_fabric module: which GPU fabric pieces a node gets from the
hardware it has (persistence mode, nvidia-peermem, Fabric Manager), and the reader `check` uses for them.

No GPU, InfiniBand adapter or NVSwitch exists here: the tests write the sysfs trees such hardware leaves (the vendor,
class and device files of /sys/bus/pci/devices/*, the adapters under /sys/class/infiniband) and the files the role
leaves (systemd's wants links, the modules-load.d entry, dpkg's status), and the readers run on those real folders.
The PCI class and device ids are those of an H100 SXM (0x2330, class 0x030200) and of its NVSwitch (0x22a3,
class 0x068000), as `lspci -nn` shows them; the module is run the way Ansible runs it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.hvd.cluster.tests.unit.plugins.support import run_module

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_fabric as hf
from ansible_collections.hvd.cluster.plugins.module_utils import hvd_state_stack


H100 = ("0x10de", "0x030200", "0x2330")
NVSWITCH = ("0x10de", "0x068000", "0x22a3")
NIC = ("0x15b3", "0x020700", "0x1021")  # a ConnectX-7, not NVIDIA's vendor id: never counted as a GPU
AUDIO = ("0x10de", "0x040300", "0x22ba")  # an NVIDIA GPU's audio function: no GPU


def write(root: Path, path: str, text: str = "") -> Path:
    full = root / path.lstrip("/")
    full.parent.mkdir(parents=True, exist_ok=True)
    full.write_text(text)
    return full


def machine(root: Path, devices: list[tuple[str, str, str]], rdma: tuple[str, ...] = ()) -> Path:
    for number, (vendor, klass, device) in enumerate(devices):
        folder = f"/sys/bus/pci/devices/0000:{number + 0x18:02x}:00.0"
        write(root, f"{folder}/vendor", vendor + "\n")
        write(root, f"{folder}/class", klass + "\n")
        write(root, f"{folder}/device", device + "\n")
    for name in rdma:
        write(root, f"/sys/class/infiniband/{name}/ports/1/state", "4: ACTIVE\n")
    return root


@pytest.mark.parametrize(("devices", "rdma", "mode", "wanted", "why"), [
    ([H100, AUDIO, NIC], (), "kernel", (True, False, False),
     ("found: NVIDIA GPUs", "no InfiniBand/RoCE adapter (/sys/class/infiniband)",
      "no NVSwitch on the PCI bus (class 0x068000)")),
    ([H100] * 8 + [NVSWITCH] * 4, ("mlx5_0", "mlx5_1"), "kernel", (True, True, True),
     ("found: NVIDIA GPUs", "found: NVIDIA GPUs and RDMA adapters", "found: NVSwitches")),
    ([NIC], ("mlx5_0",), "kernel", (False, False, False),
     ("no NVIDIA GPU on the PCI bus", "no NVIDIA GPU on the PCI bus", "no NVSwitch on the PCI bus (class 0x068000)")),
    ([H100], ("mlx5_0",), "user-space", (False, False, False), ("a container: the host runs it",) * 3),
    ([H100] * 8 + [NVSWITCH] * 4, ("mlx5_0",), "host", (False, False, False),
     ("the driver is given from outside: whoever gives it runs it",) * 3),
    ([], (), "skipped", (False, False, False), ("no NVIDIA device",) * 3),
    ([], (), "image", (True, False, False), ("a golden image for GPU machines",
                                             "an image cannot tell whether its machines have InfiniBand: "
                                             "hvd_nvidia_driver_peermem: true to add it",
                                             "an image cannot tell whether its machines have NVSwitches: "
                                             "hvd_nvidia_driver_fabricmanager: true")),
])
def test_each_piece_follows_the_hardware_found(tmp_path, devices, rdma, mode, wanted, why) -> None:
    root = str(machine(tmp_path, devices, rdma))
    plan = hf.plan(hf.nvidia_pci(root), hf.rdma_devices(root), mode)
    assert tuple(plan[p]["wanted"] for p in hf.PIECES) == wanted
    assert tuple(plan[p]["why"] for p in hf.PIECES) == why


def test_settings_turn_a_piece_on_or_off_but_never_in_a_container(tmp_path) -> None:
    root = str(machine(tmp_path, [H100], ("mlx5_0",)))
    pci, rdma = hf.nvidia_pci(root), hf.rdma_devices(root)
    off = hf.plan(pci, rdma, "kernel", persistence="false", peermem="False")
    assert [off[p]["wanted"] for p in hf.PIECES] == [False, False, False] and off["peermem"]["why"] == "turned off"
    image = hf.plan([], [], "image", peermem="true", fabricmanager="True")
    assert [image[p]["wanted"] for p in hf.PIECES] == [True, True, True] and image["peermem"]["why"] == "asked for"
    assert not any(v["wanted"] for v in hf.plan(pci, rdma, "user-space", peermem="true").values())


def test_the_reader_names_what_is_missing_and_says_ok_once_in_place(tmp_path) -> None:
    """What `check` reads back (driver.persistence, driver.peermem, driver.fabricmanager): the role's files, dpkg's
    record of Fabric Manager held against the driver's exact version (NVIDIA's journal line for that failure reads
    "driver interface version 530.30.02 don't match with driver version 530.41.03")."""
    root = tmp_path
    every = dict.fromkeys(hf.PIECES, True)
    write(root, "/var/lib/dpkg/status", "")

    def read(driver: str = "530.41.03", modules=("nvidia", "nvidia_uvm")):
        return hf.state(str(root), every, driver, hvd_state_stack.dpkg_status(str(root)),
                        None if modules is None else list(modules))

    assert read() == {"driver.persistence": "nvidia-persistenced not installed",
                      "driver.peermem": "not loaded at boot (/etc/modules-load.d/hvd-nvidia-peermem.conf); not loaded",
                      "driver.fabricmanager": "Fabric Manager not installed"}
    write(root, "/lib/systemd/system/nvidia-persistenced.service", "[Install]\nWantedBy=multi-user.target\n")
    assert read()["driver.persistence"] == "nvidia-persistenced.service not enabled at boot"
    (root / "etc/systemd/system/multi-user.target.wants").mkdir(parents=True)
    (root / "etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service").symlink_to(
        "/lib/systemd/system/nvidia-persistenced.service")
    write(root, hf.PEERMEM_CONF, "# managed\nnvidia-peermem\n")
    write(root, "/var/lib/dpkg/status", "Package: nvidia-fabricmanager-530\nStatus: hold ok installed\n"
                                        "Architecture: amd64\nVersion: 530.30.02-1\n\n")
    found = read()
    assert found["driver.persistence"] == "ok" and found["driver.peermem"] == "not loaded"
    assert found["driver.fabricmanager"] == "Fabric Manager 530.30.02 with driver 530.41.03 (they must match exactly)"
    assert read(modules=None)["driver.peermem"] == "ok"  # an image loads nothing
    assert read(modules=("nvidia", "nvidia_peermem"))["driver.peermem"] == "ok"
    assert read(driver="530.30.02")["driver.fabricmanager"] == "nvidia-fabricmanager.service not enabled at boot"
    (root / "etc/systemd/system/multi-user.target.wants/nvidia-fabricmanager.service").symlink_to(
        "/lib/systemd/system/nvidia-fabricmanager.service")
    assert read(driver="530.30.02")["driver.fabricmanager"] == "ok"
    assert hf.state(str(root), dict.fromkeys(hf.PIECES, False), "530.30.02", [], []) == {}


def test_the_node_state_reads_the_pieces_the_role_recorded_for_the_node(tmp_path) -> None:
    root = tmp_path
    write(root, "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.161.08")
    write(root, "/var/lib/dpkg/status", "")
    write(root, "/proc/modules", "nvidia_uvm 1 0 - Live 0x0\nnvidia 1 1 nvidia_uvm, Live 0x0\n")
    fact = {"mode": "kernel", "fabric": {"persistence": {"wanted": True, "why": "found: NVIDIA GPUs"},
                                         "peermem": {"wanted": False, "why": "no InfiniBand/RoCE adapter"},
                                         "fabricmanager": {"wanted": False, "why": "no NVSwitch"}}}
    write(root, "/etc/ansible/facts.d/hvd_nvidia_driver.fact", json.dumps(fact))
    items = hvd_state_stack.driver_state(str(root))
    assert items["driver.persistence"] == "nvidia-persistenced not installed"
    assert "driver.peermem" not in items and "driver.fabricmanager" not in items
    write(root, "/etc/ansible/facts.d/hvd_nvidia_driver.fact", json.dumps({"mode": "user-space"}))
    assert not any(k in hvd_state_stack.driver_state(str(root)) for k in ("driver.persistence", "driver.peermem"))


def test_the_module_plans_and_reads_on_a_machine_tree(tmp_path) -> None:
    root = machine(tmp_path, [H100, H100, NVSWITCH], ("mlx5_0",))
    write(root, "/var/lib/dpkg/status", "")
    out = run_module("hvd_fabric", {"mode": "kernel", "root": str(root), "peermem": "false"}, check=True)
    assert out["changed"] is False and out["gpus"] == ["0000:18:00.0", "0000:19:00.0"], out
    assert out["nvswitches"] == ["0000:1a:00.0"] and out["rdma"] == ["mlx5_0"]
    assert {p: v["wanted"] for p, v in out["plan"].items()} == {"persistence": True, "peermem": False,
                                                                "fabricmanager": True}
    assert set(out["state"]) == {"driver.persistence", "driver.fabricmanager"}
