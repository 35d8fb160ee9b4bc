"""hvd_horovod's build gate (roles/hvd_horovod/files/build_check.py): horovodrun --check-build's questions asked with
one import of each framework, its table printed, read by the same filters as horovodrun's own output.

Run against a stand-in `horovod` package (no Horovod build here in the fast tier): frameworks whose extension loads,
fails to load, or kills its process; the real Horovod answers it in every container suite's converge (the gate runs
there, and those suites also run horovodrun --check-build itself and compare)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

SCRIPT = ROOT / "roles" / "hvd_horovod" / "files" / "build_check.py"
filters = importlib.import_module("ansible_collections.hvd.cluster.plugins.filter.hvd_horovod")

# A framework's extension: counts its imports in imports.log, answers as told (a value, or raises)
EXTENSION = """\
import os
with open(os.path.join(os.path.dirname(__file__), "..", "..", "imports.log"), "a") as log:
    log.write("{name}\\n")
{body}
def _answer(value):
    if isinstance(value, Exception):
        raise value
    return value
mpi_built = lambda: _answer({mpi!r})
gloo_built = lambda: _answer({gloo!r})
nccl_built = lambda: _answer({nccl!r})
ddl_built = lambda: _answer(False)
ccl_built = lambda: _answer(False)
"""


def fake_horovod(root: Path, frameworks: dict[str, dict]) -> None:
    (root / "horovod").mkdir()
    (root / "horovod" / "__init__.py").write_text("__version__ = '0.28.1'\n")
    for name, answers in frameworks.items():
        (root / "horovod" / name).mkdir()
        (root / "horovod" / name / "__init__.py").write_text(EXTENSION.format(
            name=name, body=answers.get("body", ""), mpi=answers.get("mpi", True), gloo=answers.get("gloo", True),
            nccl=answers.get("nccl", False)))


def check(root: Path) -> tuple[str, list[str]]:
    proc = subprocess.run([sys.executable, "-c", SCRIPT.read_text()], capture_output=True, text=True, timeout=120,
                          cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    assert proc.returncode == 0, proc.stderr
    log = root / "imports.log"
    return proc.stdout, log.read_text().split() if log.exists() else []


def test_a_pytorch_build_with_both_controllers_reads_as_horovodruns_table_with_one_import(tmp_path: Path) -> None:
    fake_horovod(tmp_path, {"torch": {},
                            "tensorflow": {"body": "raise ImportError('No module named tensorflow')"}})
    out, imports = check(tmp_path)
    assert out.startswith("Horovod v0.28.1:\n\nAvailable Frameworks:\n    [ ] TensorFlow\n    [X] PyTorch\n")
    built = filters.hvd_horovod_check_build(out)
    assert built == {"Frameworks": ["PyTorch"], "Controllers": ["Gloo", "MPI"], "Tensor Operations": ["Gloo", "MPI"]}
    expected = filters.hvd_horovod_expected_build(["pytorch"], controllers=["mpi", "gloo"])
    assert filters.hvd_horovod_build_missing(built, expected) == []
    # each framework imported once (TensorFlow's try too); horovodrun's own check imports PyTorch six times
    assert imports == ["tensorflow", "torch"]


def test_each_question_is_answered_by_the_first_framework_that_can_as_horovodrun_does(tmp_path: Path) -> None:
    fake_horovod(tmp_path, {"tensorflow": {"mpi": RuntimeError("no MPI answer"), "gloo": False, "nccl": None},
                            "torch": {"mpi": True, "gloo": True, "nccl": True}})
    built = filters.hvd_horovod_check_build(check(tmp_path)[0])
    # MPI: TensorFlow cannot say, PyTorch says yes; Gloo: TensorFlow says no (first answer); NCCL: PyTorch's yes
    assert built == {"Frameworks": ["PyTorch", "TensorFlow"], "Controllers": ["MPI"],
                     "Tensor Operations": ["MPI", "NCCL"]}


@pytest.mark.parametrize("body", ["raise ImportError('libmpi.so.40: cannot open shared object file')",
                                  "os._exit(139)"], ids=["missing-library", "crash"])
def test_an_extension_that_does_not_load_is_not_available_and_the_gate_names_what_is_missing(tmp_path: Path,
                                                                                                body: str) -> None:
    fake_horovod(tmp_path, {"torch": {"body": body}})
    built = filters.hvd_horovod_check_build(check(tmp_path)[0])
    expected = filters.hvd_horovod_expected_build(["pytorch"], controllers=["mpi", "gloo"])
    assert filters.hvd_horovod_build_missing(built, expected) == [
        "Frameworks missing PyTorch", "Controllers missing Gloo, MPI", "Tensor Operations missing Gloo, MPI"]
