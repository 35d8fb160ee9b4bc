"""A real NCCL allreduce through Horovod on the GPUs: one rank per GPU, tensors on the device.

Run by tests/gpu/run_gpu_checks.sh through horovodrun. Every rank fills tensors of several sizes with rank+1 on its
own GPU; after hvd.allreduce(op=Sum) every element must be size*(size+1)/2 on every rank, and the result must still
live on the GPU (NCCL operates on device memory; a CPU fallback would not). Prints one line per rank:

    hvd-gpu rank=R size=N local_rank=L device=cuda:L gpu=<name> nccl=<code> ok=1 busbw_gbs=<float>
"""

import os
import socket
import sys
import time

import torch
import horovod.torch as hvd

hvd.init()
if not torch.cuda.is_available():
    print(f"hvd-gpu rank={hvd.rank()} ok=0 error=torch.cuda.is_available() is False", flush=True)
    sys.exit(1)
if not hvd.nccl_built():
    print(f"hvd-gpu rank={hvd.rank()} ok=0 error=Horovod was built without NCCL", flush=True)
    sys.exit(1)

torch.cuda.set_device(hvd.local_rank())
device = torch.device("cuda", hvd.local_rank())
size = hvd.size()
expected = size * (size + 1) / 2
ok = True
errors = []

# Several sizes: tiny (latency path), odd-sized, and 64 MiB (bandwidth path, fused buffers bypassed).
for count in (1, 1000003, 16 * 1024 * 1024):
    for dtype in (torch.float32, torch.float16):
        x = torch.full((count,), float(hvd.rank() + 1), dtype=dtype, device=device)
        y = hvd.allreduce(x, op=hvd.Sum, name=f"check.{count}.{dtype}")
        torch.cuda.synchronize()
        if y.device != device:
            ok = False
            errors.append(f"result of {count}x{dtype} came back on {y.device}")
        if not torch.all(y == expected).item():
            ok = False
            errors.append(f"{count}x{dtype}: got {y[:4].tolist()}..., want {expected}")

# Bus bandwidth of a 64 MiB float32 allreduce, as nccl-tests defines it: bytes * 2(n-1)/n / time.
x = torch.ones(16 * 1024 * 1024, dtype=torch.float32, device=device)
for _ in range(3):
    hvd.allreduce(x, op=hvd.Sum, name="warmup")
torch.cuda.synchronize()
start = time.perf_counter()
iterations = 10
for i in range(iterations):
    hvd.allreduce(x, op=hvd.Sum, name=f"bw.{i}")
torch.cuda.synchronize()
elapsed = (time.perf_counter() - start) / iterations
busbw = x.numel() * x.element_size() * (2 * (size - 1) / size) / elapsed / 1e9 if size > 1 else 0.0

print(f"hvd-gpu rank={hvd.rank()} size={size} local_rank={hvd.local_rank()} host={socket.gethostname()} "
      f"device={device} gpu={torch.cuda.get_device_name(device).replace(' ', '_')} nccl={int(hvd.nccl_built())} "
      f"ok={int(ok)} busbw_gbs={busbw:.2f} pid={os.getpid()}"
      + (f" errors={'; '.join(errors)}" if errors else ""), flush=True)
sys.exit(0 if ok else 1)
