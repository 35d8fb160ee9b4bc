#!/usr/bin/env bash
# The test suite. Default: the full tier (unit, lint, molecule, container cluster).
#   tests/run.sh --fast     unit tests, lint, syntax checks only (minutes, no containers)
#   tests/run.sh -k NAME    extra arguments go to pytest
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
marker=()
if [ "${1:-}" = "--fast" ]; then
    shift
    marker=(-m "not containers")
fi
tests/setup.sh
exec .venv/bin/python -m pytest "${marker[@]}" "$@"
