"""hvdcluster post-flight: every rank adds rank+1; the sum must be size*(size+1)/2 on every rank.

Then the allreduce's own throughput: a float32 tensor of BYTES (argv[1], default 16 MiB) on the rank's GPU where
there is one (NCCL), else in host memory, summed ITERS times (argv[2], default 5) after one warm-up; rank 0 prints
the slowest rank's time as algorithm and bus bandwidth, as nccl-tests defines them (busbw = algbw * 2(n-1)/n for
an allreduce: https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md).
"""

import socket
import sys
import time

size_bytes = int(sys.argv[1]) if len(sys.argv) > 1 else 16 << 20
iters = int(sys.argv[2]) if len(sys.argv) > 2 else 5

try:
    import torch
    import horovod.torch as hvd

    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum).item()
    device = "cpu"
    if torch.cuda.is_available():
        torch.cuda.set_device(hvd.local_rank())
        device = "cuda"
    payload = torch.ones(size_bytes // 4, dtype=torch.float32, device=device)

    def reduce_once():
        hvd.allreduce(payload, op=hvd.Sum)
        if device == "cuda":
            torch.cuda.synchronize()

    def slowest(seconds):
        return hvd.allreduce(torch.tensor([seconds]), op=hvd.Max).item()
except ImportError:
    import tensorflow as tf
    import horovod.tensorflow as hvd

    hvd.init()
    total = float(hvd.allreduce(tf.constant([float(hvd.rank() + 1)]), op=hvd.Sum).numpy()[0])
    device = "gpu" if tf.config.list_physical_devices("GPU") else "cpu"
    payload = tf.ones([size_bytes // 4], dtype=tf.float32)

    def reduce_once():
        hvd.allreduce(payload, op=hvd.Sum).numpy()

    def slowest(seconds):
        return float(hvd.allreduce(tf.constant([seconds]), op=hvd.Max).numpy()[0])

expected = hvd.size() * (hvd.size() + 1) / 2
print(f"hvd-verify rank={hvd.rank()} size={hvd.size()} host={socket.gethostname()} sum={total:g} expected={expected:g}",
      flush=True)
if total != expected:
    sys.exit(1)

reduce_once()  # warm-up: buffers, connections
start = time.perf_counter()
for _ in range(iters):
    reduce_once()
seconds = slowest(time.perf_counter() - start) / iters
if hvd.rank() == 0:
    algbw = size_bytes / seconds / 1e9
    busbw = algbw * 2 * (hvd.size() - 1) / hvd.size()
    print(f"hvd-verify-throughput size={hvd.size()} device={device} bytes={size_bytes} iters={iters} "
          f"seconds={seconds:.6f} algbw_gbs={algbw:.6g} busbw_gbs={busbw:.6g}", flush=True)
