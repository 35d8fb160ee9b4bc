#!/usr/bin/env bash
# Benchmark (prints figures, asserts nothing): README's demo (`tests/demo.sh`) from a bare machine, as near as this
# one allows without uninstalling its apt packages: a fresh clone of this checkout (no .venv), an empty HOME (no pip
# cache, no controller cache: the env is built and Horovod compiled), no node image and no debootstrap rootfs. The
# apt packages tests/setup.sh installs and a running Docker engine are taken as there (not timed).
#
#   bench/demo_bare.sh        from the checkout; the machine's own images are set aside and put back, the
#                             demo's nodes and image removed after
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
hash=$(cat "$repo"/tests/images/build.sh "$repo"/tests/images/node/* | sha256sum | cut -c1-12)
rootfs=hvdcluster/debian12-rootfs:$hash
aside=hvdcluster/rootfs-aside:$hash
image=hvdcluster/demo-bare:debian12
work=$(mktemp -d /var/tmp/hvd-demo-bare.XXXXXX)
had_rootfs=0
if docker image inspect "$rootfs" >/dev/null 2>&1; then
    had_rootfs=1
    docker tag "$rootfs" "$aside"
    docker rmi "$rootfs" >/dev/null
fi
cleanup() {
    (cd "$work/repo" 2>/dev/null && HOME=$work/home HVD_NODE_IMAGE=$image .venv/bin/python -m tests.lab down --name demo \
        >/dev/null 2>&1) || true
    docker rmi "$image" >/dev/null 2>&1 || true
    if [ "$had_rootfs" = 1 ]; then  # the machine's own rootfs back under its name
        docker rmi "$rootfs" >/dev/null 2>&1 || true
        docker tag "$aside" "$rootfs" && docker rmi "$aside" >/dev/null
    fi
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/home"
git clone -q "$repo" "$work/repo"
cd "$work/repo"
start=$(date +%s.%N)
HOME=$work/home HVD_NODE_IMAGE=$image tests/demo.sh >"$work/demo.log" 2>&1 || { tail -40 "$work/demo.log"; exit 1; }
end=$(date +%s.%N)
grep -E '^(setup:|debootstrap|built node image)' "$work/demo.log" || true
run=$(sed -n 's#^Full log: \(.*\)/stdout$#\1#p' "$work/demo.log" | tail -1)
python3 - "$run" <<'PY'
import datetime, glob, json, os, sys
def ts(s): return datetime.datetime.fromisoformat(s)
longest = {}
for f in glob.glob(os.path.join(sys.argv[1], "job_events", "*.json")):
    ed = json.load(open(f)).get("event_data", {})
    if ed.get("start") and ed.get("end") and ed.get("task"):
        longest[ed["task"]] = max(longest.get(ed["task"], 0), (ts(ed["end"]) - ts(ed["start"])).total_seconds())
for task, seconds in sorted(longest.items(), key=lambda kv: -kv[1])[:5]:
    print(f"  longest task: {seconds:6.1f} s  {task[:90]}")
PY
echo "demo from a bare machine (fresh clone, empty HOME, no node image): $(python3 -c "print(round($end - $start, 1))") s"
