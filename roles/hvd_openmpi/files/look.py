"""hvd_openmpi's look at a node, in one command where three module runs were: the mpirun and orted (prted for Open
MPI 5) a non-interactive SSH command finds on its default PATH, `ompi_info --parsable`, and cma_probe.py's answer
(its source is the first argument). Prints one JSON object: {"which": {"rc", "stdout"}, "info": {"rc", "stdout"},
"cma": {"rc", "stdout"}}; a program that cannot be started counts as rc 127. Where it is asked to judge (the third
argument "1"; not in check mode, where nothing was installed), it also says on stderr and with exit status 3 that
mpirun or orted is not on that PATH, or that the installed version is not the one asked for (the second argument, a
version or its prefix; empty for any). Standard library only; run by hvd_openmpi with the node's python3 as the
login user (as the ranks run), PATH set to the SSH default."""

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


def version(info):
    """ompi_info's own word on the installed version ("none" where it has none)."""
    for line in info["stdout"].splitlines():
        if line.startswith("ompi:version:full:"):
            return line[len("ompi:version:full:"):]
    return "none"


def problem(which, info, wanted):
    """Why the ranks could not use this Open MPI ("" when they can)."""
    if which["rc"] != 0:
        return ("mpirun/orted not on the default PATH of a non-interactive SSH command (%s): mpirun would fail with "
                '"orted: command not found" on the other nodes' % " ".join(which["stdout"].split()))
    found = version(info)
    if wanted and not (found + ".").startswith(wanted + "."):
        return "Open MPI %s is installed, %s was asked for" % (found, wanted)
    return ""


def main(argv):
    which = run(["sh", "-c", "command -v mpirun && { command -v orted || command -v prted; }"])
    info = kept(run(["ompi_info", "--parsable"]))
    print(json.dumps({"which": which, "info": info, "cma": run([sys.executable, "-I", "-c", argv[1]])}))
    wanted, judge = (list(argv[2:4]) + ["", "0"][len(argv[2:4]):])
    why = problem(which, info, wanted) if judge == "1" else ""
    if why:
        print(why, file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
