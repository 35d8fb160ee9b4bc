"""What the bundle tests share: a bundle folder made from files (make_bundle, test_bundle_manifest.py's too), and
for test_bundle_trust.py, test_bundle_unlisted.py and test_bundle_dir.py a bundle of packages, a wheel and an env
archive with its .sha256 (fixture ``folder``), the controller cache (fixture ``cache``), OpenSSH signing keys and
`up`'s one-line refusal."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from hvdcluster import cli

from ansible_collections.hvd.cluster.plugins.module_utils import hvd_bundle as LIB


def make_bundle(folder: Path, files: dict[str, bytes]) -> Path:
    entries = []
    for rel, data in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        entries.append({"path": rel, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data),
                        "why": f"test file {rel}"})
    (folder / "manifest.yaml").write_text(LIB.dump(entries, {"by": "test"}))
    return folder


ENV = "cache/envs/env-0123456789abcdef.tar.zst"
WHEEL = "cache/horovod/0123456789abcdef/horovod-0.28.1-cp311-cp311-linux_x86_64.whl"


def sidecar(rel: str, data: bytes) -> bytes:
    return f"{hashlib.sha256(data).hexdigest()}  {rel.rsplit('/', 1)[1]}\n".encode()


ENV_DATA = bytes(range(256)) * 64
WHEEL_DATA = b"horovod wheel " * 40
FILES = {
    "apt/zstd_1.5.4_amd64.deb": b"deb zstd " * 100,
    "apt/rsync_3.2.7_amd64.deb": b"deb rsync " * 50,
    "apt/Packages": b"Package: zstd\n\nPackage: rsync\n",
    "pypi/six-1.16.0-py2.py3-none-any.whl": b"wheel six",
    ENV: ENV_DATA,
    ENV + ".sha256": sidecar(ENV, ENV_DATA),
    WHEEL: WHEEL_DATA,
    WHEEL + ".sha256": sidecar(WHEEL, WHEEL_DATA),
}
HOSTS = "cluster: gap\nhosts: [10.0.0.1]\n"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under root, with a file's bytes (None for a folder)."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def flip(path: Path) -> None:
    """One byte changed, same size: only a hash can tell."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def keygen(path: Path, comment: str = "builder@lab") -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True)
    return path


def allowed_signers(path: Path, *keys: tuple[str, Path]) -> Path:
    lines = [f"{principal} {' '.join(key.with_suffix('.pub').read_text().split()[:2])}" for principal, key in keys]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The controller cache of these runs (HVDCLUSTER_CACHE), holding an earlier cluster's entry and archive."""
    root = tmp_path / "controller-cache"
    (root / "envs").mkdir(parents=True)
    (root / "envs" / "env-fedcba9876543210.tar.zst").write_bytes(b"another cluster's env")
    (root / "bundles").mkdir()
    (root / "bundles" / "apt-0000000000000000.tar").write_bytes(b"another bundle's repository")
    monkeypatch.setenv("HVDCLUSTER_CACHE", str(root))
    return root


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return make_bundle(tmp_path / "bundle", FILES)


def hosts_file(tmp_path: Path, folder: Path, network: str) -> Path:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(HOSTS + f"network: {{bundle: '{folder}'{', ' + network if network else ''}}}\n")
    return hosts


def up(hosts: Path, tmp_path: Path, *extra: str) -> int:
    return cli.main(["up", str(hosts), "-o", str(tmp_path / "inv"), *extra])


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def opened_in(folder: Path) -> tuple[list[str], list[bool]]:
    """The files under ``folder`` this process opens while the second item holds [True]."""
    opened: list[str] = []
    watching = [True]

    def hook(event: str, args: tuple) -> None:
        if watching[0] and event == "open" and isinstance(args[0], str) and args[0].startswith(str(folder)):
            opened.append(args[0])

    sys.addaudithook(hook)
    return opened, watching
