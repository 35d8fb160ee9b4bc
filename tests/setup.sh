#!/usr/bin/env bash
# Everything the demo and the tests need, on a fresh Debian or Ubuntu machine; safe to run again.
#   apt: docker.io (engine), debootstrap (node images), openssh-client, python3-venv, CPython's build dependencies
#   a running Docker engine (started in the background when none answers)
#   .venv with hvdcluster (editable) and the test tools: ansible (carries the collections), molecule, ...
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v ssh-keygen >/dev/null 2>&1 || need+=(openssh-client)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
# the tests' local conda channel builds CPython from Debian's source tarball (tests/conda_channel.py)
for pkg in build-essential libssl-dev libffi-dev zlib1g-dev libbz2-dev liblzma-dev libsqlite3-dev uuid-dev xz-utils; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
    echo "setup: apt-get install ${need[*]}"
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
    if command -v systemctl >/dev/null 2>&1 && systemctl is-system-running >/dev/null 2>&1; then
        $sudo systemctl start docker
    else
        echo "setup: starting dockerd in the background (log: /var/tmp/hvd-dockerd.log)"
        $sudo sh -c 'nohup dockerd >/var/tmp/hvd-dockerd.log 2>&1 &'
    fi
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
    docker info >/dev/null 2>&1 || { echo "setup: the Docker engine did not start" >&2; exit 1; }
fi

venv=$root/.venv
stamp=$venv/.hvd-installed
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
constraints=$root/tests/constraints.txt  # the test environment, pinned: a run is reproducible
if [ ! -f "$stamp" ] || [ "$root/pyproject.toml" -nt "$stamp" ] || [ "$constraints" -nt "$stamp" ]; then
    echo "setup: installing hvdcluster and the test tools into .venv"
    "$venv/bin/pip" install -q --upgrade -c "$constraints" pip >/dev/null
    "$venv/bin/pip" install -q -c "$constraints" -e "$root[test]"
    touch "$stamp"
fi
