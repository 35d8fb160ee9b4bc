"""hvd_dist_record: the fingerprint of an installed distribution's RECORD (and of files beside it), tested through
its function and as Ansible runs it, on real folders.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from ansible_collections.hvd.cluster.tests.unit.plugins.support import run_module, sha

from ansible_collections.hvd.cluster.plugins.modules import hvd_dist_record


# ------------------------------------------------------------------------------------------ hvd_dist_record


def install_dist(prefix: Path, folder: str, record: bytes = b"horovod/__init__.py,sha256=abc,10\n") -> Path:
    """A distribution as pip leaves it: <prefix>/lib/python3.11/site-packages/<folder>/RECORD."""
    info = prefix / "lib" / "python3.11" / "site-packages" / folder
    info.mkdir(parents=True, exist_ok=True)
    (info / "RECORD").write_bytes(record)
    return info / "RECORD"


def test_dist_record_fingerprint_is_the_records_mtime_and_content(tmp_path: Path) -> None:
    record = install_dist(tmp_path / "env", "horovod-0.28.1.dist-info")
    install_dist(tmp_path / "env", "horovod_extras-1.0.dist-info")  # another distribution whose name starts alike
    found = hvd_dist_record.fingerprint(str(tmp_path / "env"), "horovod")
    assert found["record"] == str(record)
    assert found["sha256"] == sha(b"%d " % record.stat().st_mtime_ns + record.read_bytes())
    assert "files_sha256" not in found


@pytest.mark.parametrize("folder", ["Horovod-0.28.1.dist-info", "horovod-0.28.1.dist-info"])
def test_dist_record_is_found_by_the_name_packaging_normalises(tmp_path: Path, folder: str) -> None:
    install_dist(tmp_path / "env", folder)
    assert hvd_dist_record.fingerprint(str(tmp_path / "env"), "Horovod")["sha256"] != "none"
    install_dist(tmp_path / "env", "nvidia_nccl_cu12-2.21.5.dist-info")
    assert hvd_dist_record.fingerprint(str(tmp_path / "env"), "nvidia-nccl.cu12")["sha256"] != "none"


def test_any_reinstall_changes_the_fingerprint_even_of_the_same_wheel(tmp_path: Path) -> None:
    record = install_dist(tmp_path / "env", "horovod-0.28.1.dist-info")
    before = hvd_dist_record.fingerprint(str(tmp_path / "env"), "horovod")["sha256"]
    stat = record.stat()
    os.utime(record, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # pip rewrote it, same bytes
    assert hvd_dist_record.fingerprint(str(tmp_path / "env"), "horovod")["sha256"] != before


def test_a_distribution_not_installed_fingerprints_as_none(tmp_path: Path) -> None:
    install_dist(tmp_path / "env", "torch-2.3.1.dist-info")
    assert hvd_dist_record.fingerprint(str(tmp_path / "env"), "horovod") == {"record": "", "sha256": "none"}
    assert hvd_dist_record.fingerprint(str(tmp_path / "missing"), "horovod")["sha256"] == "none"


def fed(path: Path) -> bytes:
    """What the verify fingerprint feeds for one file: path and content; a missing file as path and '-'."""
    if not path.exists():
        return os.fsencode(path) + b" -\0"
    return os.fsencode(path) + b"\0" + path.read_bytes() + b"\0"


def test_files_digest_covers_each_file_then_the_record_and_counts_missing_files(tmp_path: Path) -> None:
    hosts, gone = tmp_path / "hosts", tmp_path / "hvd_cuda.fact"
    hosts.write_text("10.0.0.1 gpu01\n")
    record = install_dist(tmp_path / "env", "horovod-0.28.1.dist-info")
    files = [str(hosts), str(gone)]
    found = hvd_dist_record.fingerprint(str(tmp_path / "env"), "horovod", files)
    assert found["files_sha256"] == sha(fed(hosts) + fed(gone) + fed(record))
    record.unlink()
    assert hvd_dist_record.fingerprint(str(tmp_path / "env"), "horovod", files)["files_sha256"] == sha(
        fed(hosts) + fed(gone) + b"no horovod")


def test_files_digest_is_the_bytes_a_repair_puts_back_and_changes_with_any_byte(tmp_path: Path) -> None:
    """The post-flight's allreduce runs again when what it depends on differs from what the last passing one saw: a
    repair that rewrites /etc/hosts with the same bytes (or installs the same wheel again) is not a difference, an
    edited line is."""
    hosts = tmp_path / "hosts"
    hosts.write_text("10.0.0.1 gpu01\n")
    install_dist(tmp_path / "env", "horovod-0.28.1.dist-info")

    def digest() -> str:
        return hvd_dist_record.fingerprint(str(tmp_path / "env"), "horovod", [str(hosts)])["files_sha256"]

    before = digest()
    stat = hosts.stat()
    hosts.write_text("10.0.0.1 gpu01\n")
    os.utime(hosts, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert digest() == before
    hosts.write_text("10.0.0.2 gpu01\n")
    assert digest() != before
    hosts.write_text("10.0.0.1 gpu01\n")
    assert digest() == before
    hosts.unlink()
    assert digest() != before
def test_dist_record_module_only_reads_and_runs_in_check_mode(tmp_path: Path) -> None:
    record = install_dist(tmp_path / "env", "horovod-0.28.1.dist-info")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    result = run_module("hvd_dist_record", {"prefix": str(tmp_path / "env"), "files": [str(record)]}, check=True)
    assert result["changed"] is False and not result.get("failed")
    assert result["record"] == str(record) and result["sha256"] == hvd_dist_record.fingerprint(
        str(tmp_path / "env"), "horovod")["sha256"]
    assert len(result["files_sha256"]) == 64
    assert result["absent"] == []
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_dist_record_module_names_the_paths_it_was_asked_to_look_for_that_are_not_there(tmp_path: Path) -> None:
    """The post-flight's check script, which an env installed again from its archive does not hold: named absent,
    and left out of the fingerprint (the script is the role's, not what the allreduce's result depends on)."""
    install_dist(tmp_path / "env", "horovod-0.28.1.dist-info")
    script = tmp_path / "env" / "libexec" / "hvdcluster" / "allreduce.py"
    args = {"prefix": str(tmp_path / "env"), "files": [str(tmp_path / "hosts")], "present": [str(script)]}
    gone = run_module("hvd_dist_record", args, check=True)
    assert gone["absent"] == [str(script)]
    script.parent.mkdir(parents=True)
    script.write_text("print(1)\n")
    there = run_module("hvd_dist_record", args, check=True)
    assert there["absent"] == [] and there["files_sha256"] == gone["files_sha256"]


def test_dist_record_module_reads_the_keys_a_role_decides_by_in_the_same_run(tmp_path: Path) -> None:
    """hvd_horovod's one module run: the fingerprint and its small files (a key, a fact), null where missing."""
    install_dist(tmp_path / "env", "horovod-0.28.1.dist-info")
    key = tmp_path / "env" / ".hvd-env-key"
    key.write_text("0123456789abcdef\n")
    args = {"prefix": str(tmp_path / "env"), "read": [str(key), str(tmp_path / "env" / ".hvd-horovod-key")]}
    result = run_module("hvd_dist_record", args, check=True)
    assert result["content"] == {str(key): "0123456789abcdef\n", str(tmp_path / "env" / ".hvd-horovod-key"): None}
    assert result["sha256"] == hvd_dist_record.fingerprint(str(tmp_path / "env"), "horovod")["sha256"]
    big = tmp_path / "big"
    big.write_bytes(b"x" * (1048576 + 1))
    failed = run_module("hvd_dist_record", {**args, "read": [str(big)]}, check=True)
    assert failed.get("failed") and str(big) in failed["msg"], failed


def test_the_gate_runs_in_the_same_module_run_as_the_fingerprint_of_what_it_asks(tmp_path: Path) -> None:
    """hvd_horovod's build gate: the check's output and exit status with the fingerprint, one module run; a check
    that fails fails the task with its last lines."""
    record = install_dist(tmp_path / "env", "horovod-0.28.1.dist-info")
    done = run_module("hvd_dist_record", {"prefix": str(tmp_path / "env"),
                                          "run": [sys.executable, "-I", "-c", "print('[X] PyTorch')"]})
    assert not done.get("failed") and done["changed"] is False, done
    assert (done["rc"], done["stdout"]) == (0, "[X] PyTorch\n")
    assert done["sha256"] == sha(b"%d " % record.stat().st_mtime_ns + record.read_bytes())
    failed = run_module("hvd_dist_record", {"prefix": str(tmp_path / "env"),
                                            "run": [sys.executable, "-c", "import sys; sys.exit('no horovod.torch')"]})
    assert failed["failed"] and failed["rc"] == 1 and "exited 1: no horovod.torch" in failed["msg"], failed
    assert "rc" not in run_module("hvd_dist_record", {"prefix": str(tmp_path / "env")})
