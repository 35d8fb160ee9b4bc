#!/usr/bin/env bash
# The GPU checks for a lent GPU machine that hvdcluster did not converge: one with its own driver, CUDA compiler,
# PyTorch and NCCL wheel, no network, nothing of ours installed (the workplace's device machine). From the checkout:
#
#   tests/gpu/lent_machine.sh SDIST OUT     SDIST: horovod-0.28.1.tar.gz (pip download --no-binary :all:), with the
#                                           cffi and pycparser wheels beside it if python3 lacks cffi; OUT: a folder
#
# 1. the product's node readers against the real GPU: driver.installed / driver.loaded / driver.given (hvd_state:
#    the driver mounted in from outside, hvd_nvidia_driver's mode host), the next-boot module guard (hvd_kernel),
#    nvidia-smi's health (tests/gpu/health_check.py);
# 2. a rolling change's look for running work (hvdcluster.jobs: the node script and its parser) while a PyTorch
#    process holds the GPU, and again after it ended: the process counts as running work, then no longer;
# 3. Horovod built with NCCL from its sdist against the machine's PyTorch, CUDA and NCCL wheel (the
#    patches hvd_horovod carries: cxx17 and gcc13-headers; CMAKE_POLICY_VERSION_MINIMUM for a CMake 4, which refuses
#    gloo's 2.8 minimum),
#    into the env of the machine's python3 (a venv made here would not see its PyTorch);
# 4. tests/gpu/run_gpu_checks.sh --no-facts on that env: --check-build lists NCCL, the NCCL allreduce on every GPU,
#    health (its step 1, the facts the roles record, is left out by name: no role recorded anything here).
# Exit status 0 only when every step ran and passed; 1 when one failed or was skipped (each named); 3 when all ran
# and passed but the allreduce had one rank (one GPU: its sum proves nothing across ranks).
set -uo pipefail
sdist=$1
out=$2
repo=$(pwd)
mkdir -p "$out"
export PYTHONPATH=$repo/src:$repo/collections PYTHONUNBUFFERED=1
fail=0
# NCCL's unversioned links and the unpacked sdist: a folder of this run's own, gone when it ends
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
step() { printf '\n== %s (%s s)\n' "$*" "$SECONDS"; }

step "0. the machine"
nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader || fail=1
command -v nvcc && nvcc --version | tail -2
g++ --version | head -1
python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())' || fail=1
uname -r

step "1. node readers: hvd_state.driver_state, hvd_kernel.module_guard, health"
python3 - <<'EOF' || fail=1
import json, subprocess
from ansible_collections.hvd.cluster.plugins.module_utils import hvd_driver, hvd_kernel, hvd_state
state = hvd_state.driver_state("/")
print("driver_state:", json.dumps(state))
smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.split()
print("nvidia-smi driver_version:", smi)
print("NVML files the loader finds:", subprocess.run("ldconfig -p | grep nvidia-ml; cat /etc/ld.so.conf.d/*.conf; echo LD_LIBRARY_PATH=$LD_LIBRARY_PATH", shell=True, capture_output=True, text=True).stdout)
assert state["driver.loaded"] == smi[0], "driver.loaded differs from nvidia-smi's driver_version"
assert smi[0] in state["driver.installed"].split(","), "driver.installed misses the library nvidia-smi runs"
# the driver is this machine's host's, mounted in (/usr/local/nvidia, read-only): hvd_nvidia_driver's mode host
nvml = hvd_driver.find_nvml("/")
points = hvd_driver.mount_points("/")
for path in nvml:
    print(f"NVML {path} (version {hvd_driver.installed_version(path) or '-'}) lies on mount "
          f"{hvd_driver.holding_mount(path, points)}")
assert smi[0] in state.get("driver.given", "").split(","), "driver.given misses the driver mounted from outside"
print("next_boot_kernel:", hvd_kernel.next_boot_kernel("/"))
print("module_guard:", hvd_kernel.module_guard("/"))
print("ok: the readers agree with nvidia-smi")
EOF
python3 tests/gpu/health_check.py | tee "$out/health-idle.txt" || fail=1

step "2. a GPU compute process is running work for a rolling change (hvdcluster.jobs)"
install -d -m 0700 /run/hvdcluster  # as hvd_base makes it: the login user's (root here) alone
python3 -c 'import time, torch; x = torch.ones(1 << 20, device="cuda"); torch.cuda.synchronize(); print("holding", flush=True); time.sleep(120)' \
    >"$out/holder.txt" 2>&1 &
holder=$!
for _ in $(seq 60); do grep -q holding "$out/holder.txt" && break; sleep 1; done
cat "$out/holder.txt"
python3 - "$holder" <<'EOF' || fail=1
import subprocess, sys
from hvdcluster import jobs
def look():
    proc = subprocess.run(["sh", "-c", jobs.script()], capture_output=True, text=True)
    print("node script says:", repr(proc.stdout), "rc", proc.returncode)
    return jobs.parse("gpu0", proc.returncode, proc.stdout, proc.stderr)
seen = look()
print("busy:", jobs.busy(seen))
assert any(sys.argv[1] in item for item in jobs.busy(seen)), f"pid {sys.argv[1]} holds the GPU but is not busy work"
print("ok: the PyTorch process holding the GPU counts as running work")
EOF
kill "$holder"; wait "$holder" 2>/dev/null
python3 - <<'EOF' || fail=1
import subprocess, time
from hvdcluster import jobs
for _ in range(20):
    proc = subprocess.run(["sh", "-c", jobs.script()], capture_output=True, text=True)
    busy = jobs.busy(jobs.parse("gpu0", proc.returncode, proc.stdout, proc.stderr))
    if not busy:
        break
    time.sleep(0.5)
print("busy after the process ended:", busy)
assert not busy
print("ok: nothing counts once it ended")
EOF

step "3. Horovod with NCCL from the sdist against this machine's PyTorch"
cuda_home=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
nccl_pkg=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0])')
mkdir -p "$work/nccl/lib"
ln -sfn "$nccl_pkg/include" "$work/nccl/include"
for f in "$nccl_pkg"/lib/libnccl.so*; do ln -sf "$f" "$work/nccl/lib/"; done
[ -e "$work/nccl/lib/libnccl.so" ] || ln -sf "$(ls "$nccl_pkg"/lib/libnccl.so.* | head -1)" "$work/nccl/lib/libnccl.so"
ls -l "$work/nccl/lib" "$work/nccl/include/" | head
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
env=$(python3 -c 'import sys; print(sys.prefix)')
# Horovod's setup_requires names cffi (for its PyTorch part); wheels of it may lie beside the sdist
"$env/bin/python3" -c 'import cffi' 2>/dev/null ||
    "$env/bin/python3" -m pip install -q --no-index --no-deps "$(dirname "$sdist")"/cffi-*.whl "$(dirname "$sdist")"/pycparser-*.whl
tar xzf "$sdist" -C "$work"
src=$(ls -d "$work"/horovod-*/ | head -1)
# hvd_horovod's own patches for this machine (PyTorch >= 2.1, GCC 13), from its catalogue, as its replace task does
python3 - "$src" cxx17 gcc13-headers <<'PATCH' || fail=1
import re, sys, yaml
catalogue = yaml.safe_load(open("roles/hvd_horovod/vars/main.yml"))["__hvd_horovod_patch_catalogue"]
for name in sys.argv[2:]:
    for item in catalogue[name]:
        path = f"{sys.argv[1]}/{item['path']}"
        text, count = re.compile(item["regexp"], re.MULTILINE).subn(item["replace"], open(path).read())
        assert count, f"patch {name} matched nothing in {item['path']}"
        open(path, "w").write(text)
        print(f"patch {name}: {item['path']} ({count})")
PATCH
export LD_LIBRARY_PATH="$work/nccl/lib":${LD_LIBRARY_PATH:-}
if HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_NCCL_HOME="$work/nccl" HOROVOD_NCCL_LINK=SHARED HOROVOD_CUDA_HOME=$cuda_home \
   HOROVOD_BUILD_CUDA_CC_LIST=$cc HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
   HOROVOD_WITHOUT_MPI=1 HOROVOD_WITH_GLOO=1 MAKEFLAGS=-j$(nproc) CMAKE_POLICY_VERSION_MINIMUM=3.5 \
   timeout 420 "$env/bin/python3" -m pip install --no-build-isolation --no-deps --no-index -v "$src" >"$out/build.log" 2>&1; then
    echo "built in $SECONDS s (cumulative)"
else
    echo "FAIL: the build (last lines of $out/build.log):"; grep -E 'error|Error' "$out/build.log" | head -20; tail -30 "$out/build.log"
    fail=1
fi

step "4. tests/gpu/run_gpu_checks.sh --no-facts --env $env"
checks=1
if [ -x "$env/bin/horovodrun" ]; then
    tests/gpu/run_gpu_checks.sh --no-facts --env "$env" --out "$out/checks"
    checks=$?
else
    echo "SKIPPED step 4: no horovodrun under $env/bin (step 3's build did not install it)"
fi
[ "$checks" -eq 0 ] || [ "$checks" -eq 3 ] || fail=1
step "done, fail=$fail"
if [ "$fail" -eq 0 ] && [ "$checks" -eq 3 ]; then
    echo "INCOMPLETE: every step ran and passed, but one GPU cannot prove an allreduce across ranks"
    exit 3
fi
exit "$fail"
