"""A few steps of data-parallel training with hvd.DistributedOptimizer on synthetic data.

Every rank starts from different random weights and sees different data; after broadcasting rank 0's
weights and averaging gradients every step, every rank must end with identical parameters.
"""

import hashlib
import socket

import horovod.torch as hvd
import torch
import torch.nn.functional as F

hvd.init()
torch.manual_seed(100 + hvd.rank())  # different initial weights and data on every rank
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)


def fingerprint() -> str:
    """Exact parameter values (repr keeps every bit of a float), hashed."""
    values = ",".join(repr(v) for p in model.parameters() for v in p.detach().flatten().tolist())
    return hashlib.sha256(values.encode()).hexdigest()


start = fingerprint()

for _ in range(5):
    x = torch.randn(32, 16)
    y = x.sum(dim=1, keepdim=True)
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()

digest = fingerprint()
print(f"train rank={hvd.rank()} size={hvd.size()} local_rank={hvd.local_rank()} host={socket.gethostname()} "
      f"start={start[:16]} params={digest[:16]} loss={loss.item():.6f}", flush=True)
