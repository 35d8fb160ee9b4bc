"""Benchmark (prints figures, asserts nothing): how big an offline bundle is, and what converging from one costs.

  CPU stack      `hvdcluster bundle` on one connected node (torch 2.13 CPU + Horovod): time and size by folder.
                 Then two cold `up`s of 2 bare nodes each (fresh containers of the same image, same stack): one
                 connected (apt and pip from their sources, env and wheel from the warm controller cache), one with
                 `--bundle` (everything from the bundle).
  GPU compile    the extra a bundle of the GPU compile stack carries (CUDA 11.8 from Debian non-free with g++-11,
                 the driver's user space, torch 2.0.1 with its CUDA 11.7 wheels - molecule/gpu's stack): measured in a
                 fresh container of the node image by that node's own apt (`--print-uris`: every package it would
                 download beyond what the CPU bundle's node has, with sizes) and pip (`pip download`, then the
                 folder's size).

Run from the checkout after tests/setup.sh:  .venv/bin/python bench/bundle_figures.py [--gpu-only]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchargs import arguments  # noqa: E402
from tests.lab.cluster import Lab  # noqa: E402
from tests.lab.images import build_image, docker  # noqa: E402
from tests.lab.stacks import cpu_stack  # noqa: E402

STACK = cpu_stack()
HVDCLUSTER = str(Path(sys.executable).parent / "hvdcluster")
GPU_APT = ["nvidia-cuda-toolkit", "g++-11", "libcuda1", "libnvidia-ml1", "nvidia-smi"]
GPU_PIP = ["torch==2.0.1", "setuptools<70"]


def run(lab: Lab, *args: str) -> tuple[float, dict]:
    start = time.monotonic()
    proc = subprocess.run([HVDCLUSTER, *args, "--json"], cwd=lab.workdir, capture_output=True, text=True)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"hvdcluster {' '.join(args)} failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
    return seconds, json.loads(proc.stdout)


def mib(count: float) -> str:
    return f"{count / 2**20:.1f} MiB"


def cpu_bundle(tmp: Path) -> Path:
    lab = Lab("benchb", 1, tmp / "src", stack=STACK)
    lab.up()
    try:
        out = tmp / "bundle"
        seconds, doc = run(lab, "bundle", "hosts.yaml", "-o", str(out))
        folders = ", ".join(f"{k} {mib(v)}" for k, v in sorted(doc["by_folder"].items()))
        print(f"CPU bundle: {doc['files']} files, {mib(doc['bytes'])} ({folders}); gathered in {seconds:.1f} s "
              "(the resolver's converge included)", flush=True)
        again, doc = run(lab, "bundle", "hosts.yaml", "-o", str(out))
        print(f"CPU bundle, second run: {again:.1f} s, {len(doc['fetched'])} files fetched", flush=True)
        return out
    finally:
        lab.down()


def cold_ups(tmp: Path, bundle: Path) -> None:
    for label, extra, network in (("connected", [], {}), ("--bundle", ["--bundle", str(bundle)], None)):
        lab = Lab("benchb", 2, tmp / label.strip("-"), slots=1, stack=STACK)
        if network is None:  # the bundle is the nodes' only source: no wheelhouse, no CA bundle
            lab.wheelhouse = False
        lab.up()
        try:
            if network is None:
                text = lab.hosts_yaml.read_text()
                lab.hosts_yaml.write_text("\n".join(line for line in text.splitlines()
                                                    if not line.startswith("network:")) + "\n")
            seconds, doc = run(lab, "up", "hosts.yaml", *extra)
            print(f"cold up of 2 bare nodes, {label}: {seconds:.1f} s "
                  f"(controller sent {mib(doc['transfers']['controller_bytes'])} of artifacts)", flush=True)
        finally:
            lab.down()


def gpu_extra(tmp: Path) -> None:
    name = "hvdc-benchb-gpu"
    docker("rm", "-f", name, check=False)
    docker("run", "-d", "--name", name, "--label", "hvdcluster.lab=benchb", "hvdcluster/node:debian12")
    try:
        ca = os.environ.get("PIP_CERT")
        script = [
            "set -e; export DEBIAN_FRONTEND=noninteractive",
            # Debian's own sources, non-free added as molecule/gpu does (the node's sources, components widened)
            "sed -i 's/^Components: main$/Components: main contrib non-free non-free-firmware/' "
            "/etc/apt/sources.list.d/debian.sources 2>/dev/null || true",
            "sed -i -E 's/^(deb .* main)$/\\1 contrib non-free non-free-firmware/' /etc/apt/sources.list 2>/dev/null || true",
            "apt-get update -qq",
            "apt-get install -y -qq --no-install-recommends python3-venv ca-certificates >/dev/null",
            f"apt-get install -y --no-install-recommends --print-uris -qq {' '.join(GPU_APT)} "
            "| awk '{s+=$3} END {print \"apt\", NR, s}'",
        ]
        if ca:
            docker("cp", ca, f"{name}:/root/ca.crt")
        out = docker("exec", name, "sh", "-c", "; ".join(script))
        _, count, size = out.strip().splitlines()[-1].split()
        print(f"GPU compile stack, apt: {count} more packages, {mib(int(size))} "
              f"({', '.join(GPU_APT)} with their dependencies)", flush=True)
        cert = "--cert /root/ca.crt" if ca else ""
        out = docker("exec", name, "sh", "-c",
                     f"python3 -m venv /root/v && /root/v/bin/pip download -q {cert} -d /root/w "
                     f"{' '.join(repr(p) for p in GPU_PIP)} && du -sb /root/w && ls /root/w | wc -l")
        size, count = out.split()[0], out.split()[-1]
        print(f"GPU compile stack, pip: {count} files, {mib(int(size))} ({', '.join(GPU_PIP)} with their dependencies: "
              "the CUDA 11.7 runtime, cuDNN, cuBLAS and NCCL wheels)", flush=True)
    finally:
        docker("rm", "-f", name, check=False)


def main() -> None:
    arguments(__doc__)  # -h/--help: the docstring, before any lab is started
    build_image()
    with tempfile.TemporaryDirectory(prefix="hvd-bench-") as tmp:
        if "--gpu-only" not in sys.argv:
            bundle = cpu_bundle(Path(tmp))
            cold_ups(Path(tmp), bundle)
        gpu_extra(Path(tmp))


if __name__ == "__main__":
    main()
