"""hvd_bundle_collect, run as Ansible runs it: what an offline bundle lacks, named in check mode.
"""

from __future__ import annotations

from pathlib import Path

from ansible_collections.hvd.cluster.tests.unit.plugins.support import run_module


# ------------------------------------------------------------------------------------------ hvd_bundle_collect


def test_bundle_collect_in_check_mode_names_what_the_bundle_lacks_and_downloads_nothing(tmp_path: Path) -> None:
    """Read against this machine's own dpkg and apt index (read-only): in check mode every installed package the
    bundle lacks, the locked distribution not in it and Horovod's sdist are named; the work folder stays empty."""
    prefix, work = tmp_path / "env", tmp_path / "work"
    prefix.mkdir()
    work.mkdir()
    held, lacking = "a" * 64, "b" * 64
    (prefix / "hvd-requirements.lock").write_text(f"six==1.16.0 --hash=sha256:{held}\n"
                                                  f"filelock==3.13.1 --hash=sha256:{lacking}\n")
    args = {"have": {"pypi/six-1.16.0-py2.py3-none-any.whl": held}, "prefix": str(prefix), "horovod": "0.28.1",
            "work": str(work), "out": str(work / "new.tar")}
    result = run_module("hvd_bundle_collect", args, check=True)
    assert not result.get("failed"), result
    assert result["changed"] and "filelock==3.13.1" in result["pending"] and "horovod==0.28.1 (sdist)" in result["pending"]
    assert "six==1.16.0" not in result["pending"]
    assert any(entry.startswith("dpkg=") for entry in result["pending"])  # this machine's own packages
    assert list(work.iterdir()) == []
