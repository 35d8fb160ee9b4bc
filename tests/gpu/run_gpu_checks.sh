#!/usr/bin/env bash
# GPU checks for a machine with NVIDIA GPUs that hvdcluster converged (hvd_nvidia_driver, hvd_cuda, hvd_cudnn,
# hvd_nccl, hvd_pyenv with a CUDA build of PyTorch, hvd_horovod with hvd_horovod_gpu_operations: nccl).
# No GPU is needed anywhere else in the test suite; this is the part that needs one. Run it on a node:
#
#   tests/gpu/run_gpu_checks.sh                      this node: facts, --check-build, allreduce over every GPU
#   tests/gpu/run_gpu_checks.sh -H gpu01:4,gpu02:4   across nodes (this checkout at the same path on each;
#                                                    hvd_ssh_mesh's passwordless, host-key-checked SSH)
# Options:
#   --env PREFIX         the env hvd_pyenv made (default /opt/hvd/env)
#   -np N                processes (default: the sum of the -H slots, or this node's GPU count)
#   --controller C       gloo (default) or mpi
#   --out DIR            where facts.json and allreduce.log go (default: a fresh folder under /tmp)
#   --no-facts           leave step 1 out (a machine no role converged has no facts to compare); said so, by name
# Exit status 0: every step ran and passed: the node facts agree (driver loaded == installed, CUDA/NCCL/cuDNN as the
# roles recorded, Horovod's NCCL == nccl.h == PyTorch's NCCL), --check-build lists NCCL, every rank's GPU allreduce
# is right and went through NCCL, and the node's health (tests/gpu/health_check.py) shows no failure. 1: a step
# failed. 3: every step that ran passed but the allreduce had one rank only (one GPU): its sum proves nothing
# across ranks.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
env=/opt/hvd/env
hosts=""
np=""
controller=gloo
out=""
facts=1
while [ $# -gt 0 ]; do
    case "$1" in
        --env) env=$2; shift 2 ;;
        -H) hosts=$2; shift 2 ;;
        -np) np=$2; shift 2 ;;
        --controller) controller=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --no-facts) facts=0; shift ;;
        -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
        *) echo "run_gpu_checks: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
[ -n "$out" ] || out=$(mktemp -d /tmp/hvd-gpu-checks.XXXXXX)
mkdir -p "$out"
fail=0
step() { printf '\n== %s\n' "$*"; }

step "1. node facts (tests/gpu/collect_facts.py --check)"
if [ "$facts" -eq 0 ]; then
    echo "left out (--no-facts): no role recorded facts on this machine; the facts are printed, not judged"
    python3 "$here/collect_facts.py" --env "$env" >"$out/facts.json" || true
elif python3 "$here/collect_facts.py" --env "$env" --check >"$out/facts.json"; then
    echo "ok: driver, CUDA, cuDNN, NCCL, PyTorch and Horovod agree"
else
    fail=1
fi
python3 - "$out/facts.json" <<'EOF' || true
import json, sys
f = json.load(open(sys.argv[1]))
d = f["driver"]
print(f"driver loaded={d['loaded'] or '-'} installed={','.join(d['installed']) or '-'} gpus={d['gpu_count']} "
      f"cc={d['cuda_cc_list'] or '-'}")
for g in d["gpus"]:
    print("  gpu", " ".join(f"{k}={v}" for k, v in sorted(g.items())))
print(f"cuda={f['cuda']['version'] or '-'} cudnn={f['cudnn']['version'] or '-'} nccl={f['nccl']['version'] or '-'} "
      f"(code {f['nccl']['version_code']}) torch={f['env'].get('torch', '-')} torch_cuda={f['env'].get('torch_cuda', '-')} "
      f"torch_nccl={f['env'].get('torch_nccl', '-')} horovod_nccl_built={f['env'].get('horovod_nccl_built', '-')}")
EOF

step "2. horovodrun --check-build lists NCCL"
"$env/bin/horovodrun" --check-build >"$out/check-build.txt" 2>&1 || fail=1
cat "$out/check-build.txt"
grep -q '\[X\] NCCL' "$out/check-build.txt" || { echo "FAIL: Horovod was built without NCCL"; fail=1; }

step "3. NCCL allreduce through Horovod on the GPUs"
if [ -z "$hosts" ]; then
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
    [ "$gpus" -gt 0 ] || { echo "FAIL: nvidia-smi lists no GPU"; exit 1; }
    hosts="localhost:$gpus"
fi
if [ -z "$np" ]; then
    np=0
    for slot in $(echo "$hosts" | tr ',' '\n' | sed -n 's/.*:\([0-9]\+\)$/\1/p'); do np=$((np + slot)); done
fi
echo "horovodrun -np $np -H $hosts --$controller (NCCL_DEBUG=INFO)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if ! NCCL_DEBUG=INFO timeout 900 "$env/bin/horovodrun" -np "$np" -H "$hosts" "--$controller" \
        "$env/bin/python" "$here/allreduce_nccl.py" >"$out/allreduce.log" 2>&1; then
    echo "FAIL: horovodrun exited non-zero"
    fail=1
fi
grep 'hvd-gpu rank=' "$out/allreduce.log" | sed 's/^.*hvd-gpu /  /' || true
good=$(grep -c 'hvd-gpu rank=.* ok=1 ' "$out/allreduce.log" || true)
[ "$good" -eq "$np" ] || { echo "FAIL: $good of $np ranks reported a correct GPU allreduce"; fail=1; }
grep -q 'NCCL INFO' "$out/allreduce.log" || { echo "FAIL: NCCL never initialized (no 'NCCL INFO' line)"; fail=1; }
grep -m3 -E 'NCCL INFO (NCCL version|Using network|Channel 00)' "$out/allreduce.log" | sed 's/^/  /' || true
incomplete=0
if [ "$np" -lt 2 ]; then
    echo "INCOMPLETE: one rank: the sum proves nothing across ranks (one GPU here; NCCL refuses two ranks on one GPU)"
    incomplete=1
fi

step "4. health: nvidia-smi, NVLink, the kernel log, IB and NCCL's transport judged by hvdcluster's rules"
python3 "$here/health_check.py" --nccl-log "$out/allreduce.log" | tee "$out/health.txt" || fail=1

step "result"
echo "logs in $out"
if [ "$fail" -ne 0 ]; then
    echo "FAIL: see above and $out"
    exit 1
fi
if [ "$incomplete" -ne 0 ]; then
    echo "INCOMPLETE: every step that ran passed; one rank cannot prove an allreduce across ranks"
    exit 3
fi
echo "PASS: $np ranks, NCCL allreduce correct on every GPU"
exit 0
