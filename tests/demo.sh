#!/usr/bin/env bash
# The demo: three bare Debian 12 nodes in local containers, then `hvdcluster up` against them.
#   tests/demo.sh           bring the demo cluster up (again) and converge it
#   tests/demo.sh down      remove its containers
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# What prepares the demo goes to stderr: stdout is `hvdcluster up`'s alone (its --json document, for one).
tests/setup.sh >&2
if [ "${1:-}" = "down" ]; then
    exec .venv/bin/python -m tests.lab down --name demo
fi
# Fresh nodes have fresh host keys and nothing of the last demo's state: forget what was recorded for those.
rm -rf .demo/inventories/demo/ssh/known_hosts .demo/inventories/demo/state
.venv/bin/python -m tests.lab up --name demo --nodes "${HVD_DEMO_NODES:-3}" --dir .demo >&2
cd .demo
exec ../.venv/bin/hvdcluster up hosts.yaml "$@"
