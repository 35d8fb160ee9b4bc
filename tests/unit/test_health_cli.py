"""``hvdcluster health``: the controller's judgement (src/hvdcluster/health.py), the node's read (hvd_health_read) and
the command's contract (exit codes, folded text, JSON).

No GPU, NVSwitch or InfiniBand adapter is reachable here, so the GPU and fabric outputs are recorded ones: the real
captures in ../shared/fixtures-gpu next to the checkout, read in place (never copied into this repository; its
SOURCES.md names where each came from), as tests/unit/plugins/module_utils/test_hvd_health.py reads them. The module
runs for real, as Ansible runs it, against a folder standing in for / and with fake ``nvidia-smi``, ``journalctl``, ``dmesg`` and ``dcgmi``
scripts on its ``path`` that print those recordings: a mock of the GPU tools, which cannot run here.

The recordings are an extra layer: tests/unit/test_health_cli_own.py runs the same paths on the project's own
fixtures (tests/unit/plugins/fixtures/gpu); without ../shared/fixtures-gpu the tests here that read it are skipped.
What this file shares with those (a reading, the node's stand-in root, the fake tools): tests/unit/health_readings.py.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
from pathlib import Path

import pytest
from ansible_collections.hvd.cluster.plugins.module_utils import hvd_health_net
from ansible_collections.hvd.cluster.tests.unit.plugins.support import ROOT, gpu_fixture, run_module

from hvdcluster import cli, health
from tests.unit.health_readings import fake_health, fake_tool, items, module_reading, pci, reading
from tests.unit.health_readings import node_root  # noqa: F401 - a fixture: the tests below ask for it by name

H100_Q = "nvidia-smi-q_h100-8gpu_535.183.01.txt"
A100_Q = "nvidia-smi-q_a100-sxm4-80gb-4gpu_555.42.02.txt"
A10_REMAP = "nvidia-smi-q_a10_row-remap-pending-uncorrectable4_535.129.03.txt"
SMI_NO_DRIVER = "nvidia-smi_FAIL-couldnt-communicate_kernel-upgraded-module-missing.txt"
NVLINK_A100 = "nvidia-smi-nvlink-s_a100-sxm4-80gb-8gpu_12x25GBs.txt"
DMESG_79 = "dmesg_xid-79-fallen-off-bus_sxid-20034_h100-nvswitch.log"
IB_NDR = "ibstat_h100-cx7-ndr400-ib-all-active.txt"
FM_JOURNAL = "journal-line_nv-fabricmanager_FAIL-version-mismatch_530.30.02-vs-530.41.03.txt"
DCGM_R1_FAIL = "dcgmi-diag-r1_h200-8gpu_FAIL-persistence-mode_dcgm3.1.8.txt"


def read(name: str) -> str:
    return gpu_fixture(name).read_text(encoding="utf-8")


def h100(**fields: object) -> dict:
    """The recorded 8 x H100 node, driver loaded, every GPU on the bus."""
    return reading(**{"nvidia_smi_q": read(H100_Q), "nvidia_smi_q_error": "", "nvlink": "", "nvlink_error": "",
                      "pci": pci(8), "modules": ["nvidia", "nvidia_modeset", "nvidia_uvm"], **fields})


# ------------------------------------------------------------------------------------------ judge


def test_eight_h100s_where_eight_are_expected_are_healthy() -> None:
    assert health.judge("gpu01", h100(), 8) == []
    assert health.judge("gpu01", h100(), None) == []  # no record: the 8 GPUs on its PCI bus are expected


def test_four_a100s_where_eight_are_expected_fail_naming_the_count() -> None:
    findings = health.judge("gpu02", reading(nvidia_smi_q=read(A100_Q), nvidia_smi_q_error="", pci=pci(4)), 8)
    count = next(f for f in findings if f["item"] == "gpu.count")
    assert count["severity"] == "fail" and count["found"] == "4 GPUs" and count["node"] == "gpu02"
    assert count["expected"] == f"8 GPUs ({health.RECORDED})"


def test_without_a_record_the_gpus_on_the_pci_bus_are_expected() -> None:
    findings = health.judge("gpu02", reading(nvidia_smi_q=read(A100_Q), nvidia_smi_q_error="", pci=pci(5)), None)
    count = next(f for f in findings if f["item"] == "gpu.count")
    assert count["expected"] == f"5 GPUs ({health.ON_PCI})"


def test_the_a10s_pending_row_remap_fails() -> None:
    findings = health.judge("gpu03", reading(nvidia_smi_q=read(A10_REMAP), nvidia_smi_q_error="", pci=pci(1)), 1)
    assert items(findings) == {"gpu.row_remap.0000:07:00.0": "fail"}
    assert "4 rows" in findings[0]["found"]


def test_xid_79_in_the_kernel_log_fails_and_names_the_gpu() -> None:
    findings = health.judge("gpu01", h100(kernel_log=read(DMESG_79)), 8)
    assert items(findings)["gpu.xid.0000:91:00.0.79"] == "fail"
    assert "fallen off the bus" in next(f["found"] for f in findings if f["item"] == "gpu.xid.0000:91:00.0.79")


def test_an_active_ib_port_beside_gpus_without_nvidia_peermem_is_a_warning() -> None:
    ib = hvd_health_net.parse_ibstat(read(IB_NDR))
    findings = health.judge("gpu01", h100(ib=ib), 8)
    assert items(findings) == {"gpu.peermem": "warn"}
    assert "nvidia_peermem not loaded" in findings[0]["found"]
    assert health.judge("gpu01", h100(ib=ib, modules=["nvidia", "nvidia_peermem"]), 8) == []
    assert health.judge("cpu01", reading(ib=ib), None) == []  # no GPU: nothing for GPUDirect RDMA to reach


def test_fabric_manager_at_another_version_than_the_driver_fails_on_an_nvswitch_node() -> None:
    node = h100(pci=pci(8, switches=4), fabricmanager_active="failed", fabricmanager_journal=read(FM_JOURNAL))
    findings = health.judge("gpu01", node, 8)
    assert items(findings) == {"fabricmanager.active": "fail", "fabricmanager.version": "fail"}
    version = next(f for f in findings if f["item"] == "fabricmanager.version")
    assert "530.30.02" in version["found"] and version["expected"] == "Fabric Manager 535.183.01"
    running = h100(pci=pci(8, switches=4), fabricmanager_active="active\n",
                   fabricmanager_version="Fabric Manager version is : 535.183.01\n")
    assert health.judge("gpu01", running, 8) == []


def test_a_cpu_node_is_healthy_with_one_note_per_skipped_area() -> None:
    report = health.assess({"cpu01": reading()}, {"cpu01": {"gpu.count": 0}})
    assert report["cpu01"]["healthy"] and report["cpu01"]["findings"] == []
    assert report["cpu01"]["notes"][0].startswith("no NVIDIA device: GPU checks skipped")
    assert len(report["cpu01"]["notes"]) == 3  # GPUs, InfiniBand, NVSwitch


def test_gpus_on_the_bus_that_nvidia_smi_cannot_reach_fail() -> None:
    said = next(line for line in read(SMI_NO_DRIVER).splitlines() if line.startswith("NVIDIA-SMI has failed"))
    node = reading(nvidia_smi_q=said + "\n", nvidia_smi_q_error=f"nvidia-smi -q: exit 9: {said}", pci=pci(2))
    findings = health.judge("gpu01", node, None)
    assert items(findings) == {"gpu.nvidia_smi": "fail"}
    assert "couldn't communicate with the NVIDIA driver" in findings[0]["found"]


def test_an_unreadable_kernel_log_on_a_gpu_node_is_a_warning_that_keeps_it_healthy() -> None:
    node = h100(kernel_log=None, kernel_log_error="dmesg: exit 1: dmesg: read kernel buffer failed")
    report = health.assess({"gpu01": node}, {"gpu01": {"gpu.count": 8}})
    assert items(report["gpu01"]["findings"]) == {"kernel_log": "warn"} and report["gpu01"]["healthy"]
    assert health.exit_code(report, {}) == 0


def test_identical_nodes_fold_onto_one_line_and_each_finding_is_one_line() -> None:
    report = health.assess({"gpu01": h100(), "gpu02": h100(), "gpu03": h100(kernel_log=read(DMESG_79))},
                           {node: {"gpu.count": 8} for node in ("gpu01", "gpu02", "gpu03")})
    text = health.render(report, {"gpu04": "unreachable: no route"})
    assert "gpu[01-02]: healthy\n" in text
    assert "gpu03: unhealthy, 4 failed\n" in text  # the Xid and 3 NVSwitches' SXid 20034
    assert ("  fail gpu.xid.0000:91:00.0.79: Xid 79 x1 (GPU has fallen off the bus: the GPU no longer answers on "
            "PCIe) (expected no Xid event) — drain the node") in text
    assert "unreachable: gpu04\n  gpu04: unreachable: no route" in text


# ------------------------------------------------------------------------------------------ the module


@pytest.fixture
def fake_bin(tmp_path: Path) -> Path:
    """nvidia-smi, journalctl and dcgmi printing recorded outputs (dcgmi exits 226, as it does when a test fails)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    q = shlex.quote
    fake_tool(folder, "nvidia-smi", f'case "$1" in -q) cat {q(str(gpu_fixture(A100_Q)))};; '
                                    f'nvlink) cat {q(str(gpu_fixture(NVLINK_A100)))};; esac')
    fake_tool(folder, "journalctl", f'case "$1" in -k) cat {q(str(gpu_fixture(DMESG_79)))};; *) exit 1;; esac')
    fake_tool(folder, "dcgmi", f"cat {q(str(gpu_fixture(DCGM_R1_FAIL)))}; exit 226")
    return folder


def test_the_module_reads_the_tools_and_the_kernel_files_and_changes_nothing(node_root: Path, fake_bin: Path) -> None:
    got = module_reading(node_root, fake_bin)
    assert got["nvidia_smi_q"] == read(A100_Q) and got["nvlink"] == read(NVLINK_A100)
    assert got["kernel_log_source"] == "journalctl" and "Xid (PCI:0000:91:00): 79" in got["kernel_log"]
    assert "NVRM: GPU Board Serial Number" in got["kernel_log"]
    assert [d["address"] for d in got["pci"]] == ["0000:05:00.0", "0000:07:00.0", "0000:08:00.0"]
    assert got["ib"]["ports"][0] == {"ca": "mlx5_0", "port": 1, "state": "Active", "physical_state": "LinkUp",
                                     "rate_gbps": 400.0, "link_layer": "InfiniBand"}
    assert got["modules"] == ["nvidia", "nvidia_uvm"]
    assert got["dcgm_diag"] == read(DCGM_R1_FAIL) and "exit 226" in got["dcgm_diag_error"]
    assert got["fabricmanager_active"] is None and got["fabricmanager_active_error"] == "systemctl: not installed"
    judged = items(health.judge("gpu01", got, 2))
    assert judged["gpu.count"] == "fail" and judged["gpu.xid.0000:91:00.0.79"] == "fail"
    assert judged["gpu.peermem"] == "warn" and judged["fabricmanager.active"] == "fail"
    assert any(item.startswith("dcgm.diag.") for item in judged)


def test_the_module_records_a_refused_kernel_log_and_absent_tools_without_failing(node_root: Path,
                                                                                  tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    fake_tool(folder, "journalctl", "exit 0")  # a user outside systemd-journal: no kernel line, and -q hides why
    fake_tool(folder, "dmesg", "echo 'dmesg: read kernel buffer failed: Operation not permitted' >&2; exit 1")
    got = module_reading(node_root, folder, quick=True)
    assert got["kernel_log"] is None
    assert "journalctl -k -b --no-pager -q: printed nothing" in got["kernel_log_error"]
    assert "dmesg: exit 1: dmesg: read kernel buffer failed: Operation not permitted" in got["kernel_log_error"]
    assert got["nvidia_smi_q"] is None and got["nvidia_smi_q_error"] == "nvidia-smi: not installed"
    assert got["dcgm_diag"] is None and got["dcgm_diag_error"] == "skipped (--quick)"
    assert items(health.judge("gpu01", got, None))["kernel_log"] == "warn"


def test_up_reads_the_same_health_in_the_state_modules_run(node_root: Path, tmp_path: Path) -> None:
    """`up`'s read-back asks hvd_node_state for health too (one module run a node, not two): the reading is the one
    hvd_health_read gives, dcgmi diag left out; `check` (no health asked) gets none."""
    folder = tmp_path / "tools"
    folder.mkdir()
    fake_tool(folder, "journalctl", "case \"$1\" in -k) echo 'NVRM: Xid (PCI:0000:07:00): 79, GPU has fallen off';; "
                                    "*) exit 1;; esac")
    env = {**os.environ, "PATH": str(folder)}
    args = {"cluster": "lab", "root": str(node_root)}
    state = run_module("hvd_node_state", {**args, "health": True}, check=True, env=env)
    assert "failed" not in state and state["changed"] is False, state
    got = state["health"]
    assert got == module_reading(node_root, folder, quick=True)
    assert "Xid (PCI:0000:07:00): 79" in got["kernel_log"] and got["dcgm_diag_error"] == "skipped (--quick)"
    assert got["modules"] == ["nvidia", "nvidia_uvm"] and isinstance(state["health_seconds"], float)
    assert items(health.judge("gpu01", got, 2))["gpu.xid.0000:07:00.0.79"] == "fail"
    plain = run_module("hvd_node_state", args, check=True, env=env)
    assert "health" not in plain and plain["state"] == state["state"]


def test_the_module_on_a_bare_root_reads_a_cpu_node(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    got = module_reading(tmp_path / "nothing", tmp_path / "bin")
    assert got["pci"] == [] and got["ib"] is None and got["modules"] is None
    assert health.judge("cpu01", got, None) == []
    assert health.notes(got)[0].startswith("no NVIDIA device")


def test_the_modules_documentation_is_yaml_that_names_every_option() -> None:
    """What ansible-doc shows (every module's documentation is held to it in test_module_examples.py; this one's options
    too)."""
    import ast

    import yaml

    tree = ast.parse((ROOT / "plugins" / "modules" / "hvd_health_read.py").read_text())
    docs = {node.targets[0].id: yaml.safe_load(node.value.value) for node in tree.body if isinstance(node, ast.Assign)
            and getattr(node.targets[0], "id", "") in ("DOCUMENTATION", "EXAMPLES", "RETURN")}
    assert set(docs["DOCUMENTATION"]["options"]) == {"quick", "timeout", "path", "root"}
    assert docs["EXAMPLES"][0]["hvd.cluster.hvd_health_read"] == {"quick": True} and "reading" in docs["RETURN"]


# ------------------------------------------------------------------------------------------ the command


@pytest.fixture
def rendered(hosts: Path, tmp_path: Path) -> Path:
    """The inventory `up` would have written, and each node's record: 8 GPUs."""
    assert cli.main(["inventory", str(hosts), "-o", str(tmp_path / "inv")]) == 0
    (tmp_path / "inv" / "c1" / "state").mkdir()
    for node in ("gpu01", "gpu02"):
        (tmp_path / "inv" / "c1" / "state" / f"{node}.json").write_text(json.dumps({"state": {"gpu.count": 8}}))
    return tmp_path / "inv"


def refused(argv: list[str], capsys: pytest.CaptureFixture[str], *named: str) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("hvdcluster: "), err
    for text in named:
        assert text in err, err


def test_bad_input_exits_2_before_any_node_is_read(hosts: Path, rendered: Path, tmp_path: Path, capsys,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(health, "read", lambda *a, **k: pytest.fail("a node was read"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: c1\nhosts:\n  - {name: GPU_01, address: 10.0.0.1}\n")
    refused(["health", str(bad), "-o", str(rendered)], capsys, str(bad))
    refused(["health", str(hosts), "-o", str(rendered), "--limit", "gpu9"], capsys, "unknown host 'gpu9'")
    refused(["health", str(hosts), "-o", str(tmp_path / "none")], capsys, "no inventory yet")
    refused(["health", str(hosts), "-o", str(rendered), "--full", "--size", "1.5G"], capsys, "--size: '1.5G'")
    refused(["health", str(hosts), "-o", str(rendered), "--size", "1G"], capsys, "--size: only with --full")


def test_a_failure_exits_1_and_healthy_nodes_exit_0(hosts: Path, rendered: Path, capsys,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    a100 = reading(nvidia_smi_q=read(A100_Q), nvidia_smi_q_error="", pci=pci(4))
    fake_health(monkeypatch, {"gpu01": h100(), "gpu02": a100})
    assert cli.main(["health", str(hosts), "-o", str(rendered), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["cluster"] == "c1" and doc["unreachable"] == {} and doc["log"] == "runs/log"
    assert doc["nodes"]["gpu01"] == {"healthy": True, "findings": [], "notes": doc["nodes"]["gpu01"]["notes"],
                                     "expected_gpus": 8}
    assert not doc["nodes"]["gpu02"]["healthy"]
    first = doc["nodes"]["gpu02"]["findings"][0]
    assert {"item": "gpu.count", "found": "4 GPUs", "node": "gpu02"}.items() <= first.items()
    calls = fake_health(monkeypatch, {"gpu01": h100(), "gpu02": h100()})
    assert cli.main(["health", str(hosts), "-o", str(rendered), "--quick"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gpu[01-02]: healthy\n")
    assert out.splitlines()[-1] == "health: 2 healthy, 0 with failures (read 2 nodes in 0.1 s; log: runs/log)"
    assert calls == [(None, True)]


def test_warnings_are_printed_and_exit_0_an_unreachable_node_exits_1(hosts: Path, rendered: Path, capsys,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    fake_health(monkeypatch, {"gpu01": h100(kernel_log=None, kernel_log_error="dmesg: refused \x1b[2J")})
    assert cli.main(["health", str(hosts), "-o", str(rendered), "--limit", "gpu01"]) == 0
    out = capsys.readouterr().out
    assert "gpu01: healthy, 1 warning\n  warn kernel_log: dmesg: refused" in out and "\x1b" not in out
    fake_health(monkeypatch, {"gpu01": h100()}, {"gpu02": "unreachable: no route to host"})
    assert cli.main(["health", str(hosts), "-o", str(rendered)]) == 1
    out = capsys.readouterr().out
    assert "unreachable: gpu02\n  gpu02: unreachable: no route to host" in out
    assert "1 unreachable" in out.splitlines()[-1]


def test_read_runs_health_yml_in_check_mode_and_collects_each_nodes_reading(tmp_path: Path) -> None:
    """playbooks/health.yml really run through ansible-runner, on this machine over a local connection (no SSH):
    the module's reading comes back from the events, without dcgmi under --quick, and a node never answering is
    named. The run leaves the process's SIGTERM and SIGINT handlers as they were (ansible-runner installs its own
    and would leave them: Ctrl-C after a run would no longer stop hvdcluster)."""
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    inv = tmp_path / "lab"
    inv.mkdir()
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    (inv / "hosts.yml").write_text(json.dumps({"all": {"children": {"hvd_nodes": {"hosts": {"node1": local}}}}}))
    got = health.read(inv, hosts=["node1", "node2"], quick=True)
    assert set(got.found) == {"node1"}, (got.unreachable, Path(got.log).read_text()[-3000:])
    assert got.found["node1"]["dcgm_diag_error"] == "skipped (--quick)" and isinstance(got.found["node1"]["pci"], list)
    assert got.unreachable == {"node2": f"no answer (ansible-playbook rc 0; see {got.log})"}
    argv = json.loads((Path(got.log).parent / "command").read_text())["command"]
    assert "--check" in argv
    assert {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)} == before
