"""A local conda channel for the tests, built offline with rattler-build from the recipes in tests/conda/recipes.

    python3 tests/conda_channel.py          # builds (or reuses) the channel, prints its folder

CPython comes from the upstream tarball Debian's python3.11 source package carries (tests/debsrc.py), pip from the
wheel that tarball bundles, hvd-probe from its recipe alone. The channel is cached in the test cache under a key made
of the recipes' bytes and the tarball's sha256, so a second run reuses it; `rattler.index.index_fs` writes its
repodata. rattler runs in a child process that ends with os._exit (py-rattler can crash at interpreter exit after its
work is done): success is judged from what it wrote.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RECIPES = HERE / "conda" / "recipes"
ORDER = ["python", "pip", "hvd-probe"]  # pip is built against the python built first

sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "collections"))  # ansible_collections/hvd/cluster: the checkout
from ansible_collections.hvd.cluster.plugins.module_utils.hvd_files import sha256_of  # noqa: E402
from tests.debsrc import cache_lock, orig_tarball, test_cache  # noqa: E402


def key(tarball_sha256: str) -> str:
    digest = hashlib.sha256(tarball_sha256.encode())
    for recipe in sorted(RECIPES.rglob("*")):
        if recipe.is_file():
            digest.update(recipe.relative_to(RECIPES).as_posix().encode() + b"\0" + recipe.read_bytes())
    return digest.hexdigest()[:16]


def _child(out: str, work: str) -> None:
    """In the child: build every recipe into `out`, then index it."""
    import rattler.index  # noqa: PLC0415
    import rattler_build  # noqa: PLC0415

    for name in ORDER:
        rattler_build.build_recipes([str(RECIPES / name / "recipe.yaml")], output_dir=out,
                                    channel=[Path(out).as_uri()], no_include_recipe=True, test="skip")
    import asyncio  # noqa: PLC0415

    asyncio.run(rattler.index.index_fs(channel_directory=Path(out)))


def build() -> Path:
    """The channel folder (built once per key, then reused); raises with the build's output when it fails."""
    tarball = orig_tarball("python3.11")
    tar_sha = sha256_of(tarball)
    with cache_lock("conda-channel"):
        return _build(tarball, tar_sha)


def _build(tarball: Path, tar_sha: str) -> Path:
    dest = test_cache() / "conda-channel" / key(tar_sha)
    if (dest / ".complete").is_file():
        return dest
    part = dest.with_name(dest.name + f".part-{os.getpid()}")
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir(parents=True)
    env = {**os.environ, "HVD_PYTHON_TARBALL": str(tarball), "HVD_PYTHON_SHA256": tar_sha,
           "CPU_COUNT": str(os.cpu_count() or 2)}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, __file__, "--child", str(part)], env=env, capture_output=True, text=True)
    wrote = {name: sorted(part.rglob(f"{name}-*.conda")) for name in ORDER}
    indexed = (part / "noarch" / "repodata.json").is_file() and (part / "linux-64" / "repodata.json").is_file()
    if not all(wrote.values()) or not indexed:
        shutil.rmtree(part, ignore_errors=True)
        raise RuntimeError(f"conda channel build failed (rc {proc.returncode}, wrote {wrote}, indexed {indexed}):\n"
                           + (proc.stdout + proc.stderr)[-6000:])
    for leftover in ("bld", "src_cache"):
        shutil.rmtree(part / leftover, ignore_errors=True)
    (part / ".complete").write_text(json.dumps({"seconds": round(time.monotonic() - started, 1)}) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    part.rename(dest)
    return dest


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        try:
            _child(sys.argv[2], sys.argv[2])
        except BaseException as error:  # noqa: BLE001 - reported, then the child ends without interpreter teardown
            print(f"conda channel child: {error!r}", file=sys.stderr, flush=True)
            os._exit(1)
        sys.stdout.flush()
        os._exit(0)
    print(build())
