"""hvd_openmpi's look at a node, in one command where three module runs were: the mpirun and orted (prted for Open
MPI 5) a non-interactive SSH command finds on its default PATH, `ompi_info --parsable`, and cma_probe.py's answer
(its source is the first argument). Prints one JSON object: {"which": {"rc", "stdout"}, "info": {"rc", "stdout"},
"cma": {"rc", "stdout"}}; a program that cannot be started counts as rc 127. Standard library only; run by
hvd_openmpi with the node's python3 as the login user (as the ranks run), PATH set to the SSH default."""

import json
import subprocess
import sys


def run(argv):
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"rc": 127, "stdout": "", "stderr": str(exc)}
    return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr[-2000:]}


# The lines of `ompi_info --parsable` hvd_openmpi reads (its version, hwloc, the MPI API, the configuration); the
# rest (every component and parameter, about 20 KB) would only travel to the controller and into the run's log.
KEPT = ("ompi:version:", "mca:hwloc:", "mpi-api:", "ompi:config")


def kept(result):
    result["stdout"] = "".join(line for line in result["stdout"].splitlines(True) if line.startswith(KEPT))
    return result


print(json.dumps({
    "which": run(["sh", "-c", "command -v mpirun && { command -v orted || command -v prted; }"]),
    "info": kept(run(["ompi_info", "--parsable"])),
    "cma": run([sys.executable, "-I", "-c", sys.argv[1]]),
}))
