#!/usr/bin/env bash
# Where a test tier's CPU goes, by program: runs `tests/run.sh ARGS...` under the kernel's process accounting
# (acct: every process that exits, the nodes' containers included, with its user and system CPU) and prints the
# wall time and `sa`'s table by command name, largest first.
#   bench/tier_cpu.sh                 the full tier
#   bench/tier_cpu.sh --heavy         the heavy set
# Needs root and Debian's `acct` package (installed when missing). Accounting goes to a file of this run's own and is
# switched off at the end, whatever was on before. Processes still running at the end (dockerd, an ssh master) are
# not in the table; `python3.11` is the nodes' Ansible modules (the interpreter Ansible finds on Debian 12 nodes),
# `ansible-playboo*` its forked per-task workers, `python` the venvs' and the envs' interpreters (pytest, ranks).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v accton >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q acct >/dev/null
fi
log=$(mktemp --tmpdir hvd-tier-acct.XXXXXX)
trap 'accton off >/dev/null 2>&1 || true; rm -f "$log"' EXIT
accton "$log" >/dev/null
start=$(date +%s)
rc=0
tests/run.sh "$@" || rc=$?
accton off >/dev/null
echo "tests/run.sh $*: rc $rc, wall $(( $(date +%s) - start )) s; CPU minutes by command (user, system):"
sa -a --separate-times -c "$log" | head -n 26
exit "$rc"
