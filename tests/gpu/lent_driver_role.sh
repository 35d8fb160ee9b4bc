#!/usr/bin/env bash
# hvd_nvidia_driver on a GPU machine given its driver from outside (mode host): the workplace's lent machine, whose
# driver lies read-only at /usr/local/nvidia, mounted into it. Run from the checkout, as root, on that machine:
#
#   tests/gpu/lent_driver_role.sh WHEELS OUT     WHEELS: a folder with the ansible-core wheel (pip download --no-deps
#                                                ansible-core), installed into python3's env if ansible-playbook is
#                                                missing, and an SSH key `id_hvd` for hosts.yaml where the
#                                                machine has no ssh-keygen (never used: a local connection);
#                                                OUT: a folder for the logs
#
# As ops run it: hosts.yaml -> `hvdcluster inventory` -> ansible-playbook playbooks/nvidia_driver.yml (connection local:
# the machine has no SSH server; root, so no become). Passes when the role keeps the given driver and installs
# nothing (mode host, the fact's version is nvidia-smi's, no package added), a second run and --check change nothing,
# a stack asking for another branch is refused naming both, and the distro's CUDA toolkit is refused (playbooks/cuda.yml).
set -uo pipefail
wheels=$(cd "$1" && pwd)
out=$2
repo=$(pwd)
mkdir -p "$out"
export PYTHONPATH=$repo/src:$repo/collections PYTHONUNBUFFERED=1 ANSIBLE_CONFIG=$repo/ansible.cfg ANSIBLE_NOCOLOR=1 \
    ANSIBLE_CALLBACK_RESULT_FORMAT=json
fail=0
bad() { echo "FAIL: $*"; fail=1; }
py=$(command -v python3)
command -v ansible-playbook >/dev/null || "$py" -m pip install -q --no-deps --no-index "$wheels"/ansible_core-*.whl
playbook=$(dirname "$py")/ansible-playbook
[ -x "$playbook" ] || playbook=$(command -v ansible-playbook)
given=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 | tr -d ' ')
echo "nvidia-smi: driver $given; $("$playbook" --version | head -1)"
work=$(mktemp -d)
cd "$work"
ssh-keygen -q -t ed25519 -N "" -f id_hvd 2>/dev/null || install -m 600 "$wheels/id_hvd" id_hvd  # never used (local connection)
hosts() {
    printf 'cluster: lent\nssh: {user: root, identity: id_hvd}\nhosts:\n  - {name: gpu0, address: 127.0.0.1}\nstack: %s\n' \
        "$1" > hosts.yaml
    "$py" -m hvdcluster.cli inventory hosts.yaml >/dev/null || bad "hvdcluster inventory"
}
play() {  # play LOG PLAYBOOK [ARGS]: the playbook from the checkout, as ops run it; its rc
    local log=$1 book=$2; shift 2
    "$playbook" -i inventories/lent "$repo/playbooks/$book" -e ansible_connection=local -e ansible_become=false \
        -e "ansible_python_interpreter=$py" "$@" >"$out/$log" 2>&1
}
packages() { dpkg-query -W -f '${Package}\n' 2>/dev/null | sort; }
packages >"$out/packages-before.txt"

hosts "{driver: \"${given%%.*}\"}"
play driver-1.log nvidia_driver.yml; rc=$?
[ "$rc" -eq 0 ] || bad "the driver's playbook exited $rc"
tr -s ' \n' ' ' <"$out/driver-1.log" | grep -o "gpu0: the host's NVIDIA driver [^:]*: nothing installed" ||
    bad "no 'nothing installed' line"
"$py" - "$given" <<'PY' || fail=1
import json, sys
fact = json.load(open("/etc/ansible/facts.d/hvd_nvidia_driver.fact"))
print("fact:", json.dumps({k: fact.get(k) for k in ("mode", "installed", "loaded", "packages", "container", "mismatch")}))
assert fact["mode"] == "host" and fact["installed"] == sys.argv[1] and fact["packages"] == [], fact
assert not fact["mismatch"] and not fact["reboot_required"], fact
PY
play driver-2.log nvidia_driver.yml && grep -q "changed=0" "$out/driver-2.log" || bad "a second run changed something"
play driver-check.log nvidia_driver.yml --check && grep -q "changed=0" "$out/driver-check.log" || bad "--check changed something"
grep -h "PLAY RECAP" -A1 "$out"/driver-*.log | grep gpu0

hosts '{driver: "535"}'
play driver-535.log nvidia_driver.yml; rc=$?
[ "$rc" -eq 2 ] || bad "a 535 stack exited $rc (want 2)"
tr -s ' \n' ' ' <"$out/driver-535.log" | grep -o "gpu0: the NVIDIA driver is the host's ([^;]*); the stack asks for 535[^(]*" ||
    bad "no refusal naming both drivers"

hosts "{driver: \"${given%%.*}\", gpu_repo: distro}"
play driver-distro.log nvidia_driver.yml || bad "the driver's playbook (gpu_repo distro) failed"
play cuda.log cuda.yml; rc=$?
[ "$rc" -eq 2 ] || bad "the distro's toolkit: cuda.yml exited $rc (want 2)"
tr -s ' \n' ' ' <"$out/cuda.log" | grep -o "gpu0: the distro's CUDA toolkit depends on [^:]*" || bad "no refusal of the distro's toolkit"

packages >"$out/packages-after.txt"
diff "$out/packages-before.txt" "$out/packages-after.txt" && echo "no package added or removed" || bad "packages changed"
rm -f /etc/ansible/facts.d/hvd_nvidia_driver.fact
echo "== done, fail=$fail"
exit "$fail"
