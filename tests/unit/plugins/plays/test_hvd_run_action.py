"""hvd_run's action plugin in a real ansible-playbook run: the argv reaches the command exactly (spaces, quotes, shell
characters, a newline), with the task's environment, as one shell command over the connection - no module file sent,
no Python started for it (-vvv names none) - never changed, run in check mode too, a non-zero exit failed unless the
task's failed_when says otherwise; a task that becomes a user (su here: root, as this machine runs the tests) runs
the module, with the same result.

Under ansible-test units these run in the controller's context (this folder is neither modules/ nor module_utils/).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ansible_collections.hvd.cluster.tests.unit.plugins.support import run_play as run

ECHO = [sys.executable, "-I", "-c", "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ.get('HVD_X')]))"]
ODD = ["a b", "it's", '"q"', "$HOME", "; false", "two\nlines", "*", ""]


def test_the_argv_runs_exactly_with_the_environment_and_no_module_run(tmp_path: Path) -> None:
    tasks = [{"hvd.cluster.hvd_run": {"argv": ECHO + ODD}, "environment": {"HVD_X": "x y 'z'"}},
             {"hvd.cluster.hvd_run": {"argv": ["sh", "-c", "echo out; echo err >&2; exit 3"]}, "ignore_errors": True},
             {"hvd.cluster.hvd_run": {"argv": ["sh", "-c", "exit 4"]}, "failed_when": False}]
    results, out = run(tmp_path, tasks)
    assert "AnsiballZ_hvd_run" not in out
    echoed = results[0]
    assert json.loads(echoed["stdout"]) == [ODD, "x y 'z'"] and echoed["rc"] == 0, echoed
    assert echoed["changed"] is False and not echoed.get("failed") and echoed["cmd"] == ECHO + ODD
    failed = results[1]
    assert failed["failed"] and failed["rc"] == 3 and "non-zero return code" in failed["msg"], failed
    assert (failed["stdout"], failed["stderr"], failed["stdout_lines"]) == ("out", "err", ["out"]), failed
    assert results[2]["rc"] == 4 and not results[2].get("failed"), results[2]


def test_check_mode_runs_it_and_a_become_runs_the_module_with_the_same_result(tmp_path: Path) -> None:
    tasks = [{"hvd.cluster.hvd_run": {"argv": ECHO + ["checked"]}},
             {"hvd.cluster.hvd_run": {"argv": ECHO + ODD}, "environment": {"HVD_X": "become"}, "become": True,
              "become_method": "su"}]
    results, out = run(tmp_path, tasks, "--check")
    assert json.loads(results[0]["stdout"]) == [["checked"], None] and results[0]["changed"] is False, results[0]
    assert json.loads(results[1]["stdout"]) == [ODD, "become"] and results[1]["changed"] is False, results[1]
    assert "AnsiballZ_hvd_run" in out  # the become
