"""hvdcluster post-flight: every rank adds rank+1; the sum must be size*(size+1)/2 on every rank."""

import socket
import sys

try:
    import torch
    import horovod.torch as hvd

    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum).item()
except ImportError:
    import tensorflow as tf
    import horovod.tensorflow as hvd

    hvd.init()
    total = float(hvd.allreduce(tf.constant([float(hvd.rank() + 1)]), op=hvd.Sum).numpy()[0])

expected = hvd.size() * (hvd.size() + 1) / 2
print(f"hvd-verify rank={hvd.rank()} size={hvd.size()} host={socket.gethostname()} sum={total:g} expected={expected:g}",
      flush=True)
sys.exit(0 if total == expected else 1)
