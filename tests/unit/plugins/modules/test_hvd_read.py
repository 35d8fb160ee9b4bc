"""hvd_read: several small files read in one module run (real files; run as Ansible runs it, its file with the
arguments as JSON on stdin)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

MODULE = Path(__file__).resolve().parents[4] / "plugins" / "modules" / "hvd_read.py"


def read(paths: list[str], **args) -> dict:
    payload = {"ANSIBLE_MODULE_ARGS": {"paths": paths, **args, "_ansible_check_mode": True}}
    # the module imports the collection's module_utils: the test's own import path finds them (the checkout, or
    # the copy ansible-test units runs in)
    proc = subprocess.run([sys.executable, str(MODULE)], input=json.dumps(payload), capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})
    return json.loads(proc.stdout)


def test_each_file_is_read_and_a_missing_one_or_a_folder_is_null_in_check_mode_too(tmp_path: Path) -> None:
    (tmp_path / "key").write_text("abc123\n")
    (tmp_path / "fact").write_bytes(b'{"version": "4.1.4"}\n\xff')
    paths = [str(tmp_path / "key"), str(tmp_path / "fact"), str(tmp_path / "missing"), str(tmp_path),
             str(tmp_path / "key" / "under-a-file")]
    done = read(paths)
    assert done["changed"] is False and "failed" not in done, done
    assert done["content"] == {paths[0]: "abc123\n", paths[1]: '{"version": "4.1.4"}\n\ufffd', paths[2]: None,
                               paths[3]: None, paths[4]: None}


def test_a_file_over_the_limit_fails_naming_it(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_text("x" * 11)
    done = read([str(big)], limit=10)
    assert done["failed"] and done["msg"] == f"hvd_read: {big}: larger than 10 bytes"
    assert read([str(big)], limit=11)["content"] == {str(big): "x" * 11}
