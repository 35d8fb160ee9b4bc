"""What the drift tests share (test_drift.py, test_drift_loop.py): a converged GPU node's state as playbooks/state.yml
reads it, and a cluster of such nodes."""

from __future__ import annotations

DIGEST = "3f" * 32


def state(**over):
    base = {
        "os.release": "debian 12",
        "os.kernel": "6.1.0-18-amd64",
        "pkg.openmpi-bin": "4.1.4-3",
        "pkg.libnccl2": "2.21.5-1+cuda12.4",
        "pkg.libnccl2.hold": True,
        "driver.installed": "550.54.15",
        "driver.loaded": "550.54.15",
        "gpu.count": 8,
        "cuda.version": "12.4",
        "cuda.home": "/usr/local/cuda-12.4",
        "nccl.version": "2.21.5",
        "nccl.header": "2.21.5",
        "mpi.path": "/usr/bin/mpirun",
        "mpi.version": "4.1.4",
        "env.python": "3.11.2",
        "env.key": "k" * 16,
        "env.lock": "l" * 16,
        "env.dist.torch": f"2.3.1 {DIGEST}",
        "env.files": "ok",
        "horovod.version": "0.28.1",
        "horovod.record": "r" * 16,
        "horovod.key": "h" * 16,
        "horovod.checked": "pytorch,nccl,mpi",
        "mesh.authorized": True,
        "base.ca": "ok",
        "profile.hvd-cuda.sh": "ok",
        "ldconf.hvd-openmpi.conf": "ok",
    }
    base.update(over)
    return base


def nodes(names, **over):
    return {n: state(**over) for n in names}


NODES3 = ["node1", "node2", "node3"]
