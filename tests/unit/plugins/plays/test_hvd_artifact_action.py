"""hvd_artifact's action plugin in a real ansible-playbook run: the controller cache's look (``state: verified`` on
the controller itself, the local connection without become) runs the module's own function in the worker - no
module file sent, no Python started for it (-vvv names none) - with the module's result: valid, corrupt (removed,
not in check mode), missing, failed on request. Any other state, and a become, still run the module.

Under ansible-test units these run in the controller's context (this folder is neither modules/ nor module_utils/).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ansible_collections.hvd.cluster.tests.unit.plugins.support import run_play as run


def entry(tmp_path: Path, name: str, data: bytes, recorded: bytes | None = None) -> Path:
    path = tmp_path / "cache" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    (path.parent / f"{name}.sha256").write_text(f"{hashlib.sha256(recorded or data).hexdigest()}  {name}\n")
    return path


def test_the_controller_caches_look_runs_in_the_worker_with_the_modules_result(tmp_path: Path) -> None:
    good = entry(tmp_path, "good.whl", b"wheel" * 1000)
    bad = entry(tmp_path, "bad.whl", b"truncat", recorded=b"truncated")
    tasks = [{"hvd.cluster.hvd_artifact": {"path": str(good)}},
             {"hvd.cluster.hvd_artifact": {"path": str(tmp_path / "cache"), "pattern": "bad*.whl"}},
             {"hvd.cluster.hvd_artifact": {"path": str(tmp_path / "cache" / "none.whl")}},
             {"hvd.cluster.hvd_artifact": {"path": str(tmp_path / "cache" / "none.whl"), "fail_invalid": True},
              "ignore_errors": True}]
    results, out = run(tmp_path, tasks)
    assert "AnsiballZ_hvd_artifact" not in out and "hvd_artifact.py" not in out.replace("action/hvd_artifact.py", "")
    assert (results[0]["valid"], results[0]["size"], results[0]["changed"]) == (True, 5000, False)
    assert results[0]["sha256"] == hashlib.sha256(b"wheel" * 1000).hexdigest()
    assert (results[1]["valid"], results[1]["removed"], results[1]["path"]) == (False, True, str(bad))
    assert "corrupt or truncated" in results[1]["reason"] and not bad.exists()
    assert (results[2]["valid"], results[2]["removed"]) == (False, False) and "is missing" in results[2]["reason"]
    assert results[3]["failed"] and "is missing" in results[3]["msg"]


def test_check_mode_keeps_a_corrupt_entry_and_other_states_still_run_the_module(tmp_path: Path) -> None:
    bad = entry(tmp_path, "bad.whl", b"truncat", recorded=b"truncated")
    src = entry(tmp_path, "src.whl", b"x" * 10)
    tasks = [{"hvd.cluster.hvd_artifact": {"path": str(bad)}},
             {"hvd.cluster.hvd_artifact": {"path": str(tmp_path / "copy.whl"), "state": "copied", "src": str(src),
                                           "sha256": hashlib.sha256(b"x" * 10).hexdigest()}}]
    results, out = run(tmp_path, tasks, "--check")
    assert (results[0]["valid"], results[0]["removed"], results[0]["changed"]) == (False, True, True)
    assert bad.exists()  # check mode: named, not removed
    assert results[1]["changed"] and "AnsiballZ_hvd_artifact" in out  # state copied: the module itself
