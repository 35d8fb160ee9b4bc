"""Whether two processes of one user on this node may read each other's memory with process_vm_readv (CMA), as
Open MPI's single-copy path between ranks on a node does: prints "cma", or "refused: <errno name>" (a container
without CAP_SYS_PTRACE under Docker's seccomp profile; Yama's ptrace_scope 2 or 3). The reader is the child, the
target its parent, which allows any reader the way Open MPI's ranks do (PR_SET_PTRACER_ANY): under ptrace_scope 1
this reads as the ranks would, not as a parent reading its own child. Standard library only; run by hvd_openmpi
with the node's python3 as the login user (tests/cluster/test_cma_probe.py runs it in a container)."""

import ctypes
import errno
import os
import sys


class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def main():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(0x59616D61, ctypes.c_ulong(-1), 0, 0, 0)  # PR_SET_PTRACER, PR_SET_PTRACER_ANY (Yama; else no-op)
    token = b"hvdcluster-cma-probe"
    here = ctypes.create_string_buffer(token)
    reading, writing = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(reading)
        got = ctypes.create_string_buffer(len(token))
        local = IoVec(ctypes.cast(got, ctypes.c_void_p), len(token))
        remote = IoVec(ctypes.cast(here, ctypes.c_void_p), len(token))
        n = libc.process_vm_readv(os.getppid(), ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        code = ctypes.get_errno()
        said = "cma" if n == len(token) and got.raw == token else "refused: " + errno.errorcode.get(code, str(code))
        os.write(writing, said.encode())
        os._exit(0)
    os.close(writing)
    said = b""
    while True:
        part = os.read(reading, 64)
        if not part:
            break
        said += part
    os.waitpid(child, 0)
    sys.stdout.write((said.decode() or "refused: no answer") + "\n")


main()
