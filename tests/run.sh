#!/usr/bin/env bash
# The test suite. Default: the full tier (unit, lint, molecule, container cluster), the heavy set left out.
#   tests/run.sh --fast     unit tests, lint, syntax checks only (minutes, no containers)
#   tests/run.sh --heavy    the heavy set only: day-2 scenarios of several minutes each (tests/conftest.py HEAVY)
#   tests/run.sh --all      the full tier and the heavy set in one session (CI, .ci/run): a suite's cluster is
#                           converged once for its full-tier and its heavy tests
#   tests/run.sh -k NAME    extra arguments go to pytest (a heavy test by name: tests/run.sh --heavy -k NAME)
# Two pytest-xdist workers (HVD_TEST_WORKERS; 0 runs in one process): each container suite and each molecule scenario
# is one scheduling unit (tests/conftest.py), longest first, so suites that wait on their nodes overlap.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
marker=(-m "not heavy")
case "${1:-}" in
    --fast) shift; marker=(-m "not containers") ;;
    --heavy) shift; marker=(-m "heavy") ;;
    --all) shift; marker=() ;;
esac
tests/setup.sh
workers=(-n "${HVD_TEST_WORKERS:-2}" --dist loadscope --no-loadscope-reorder)
exec .venv/bin/python -m pytest "${workers[@]}" ${marker[@]+"${marker[@]}"} "$@"
