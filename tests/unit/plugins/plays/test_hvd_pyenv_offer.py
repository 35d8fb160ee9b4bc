"""hvd_pyenv's offline bundle tasks, run as the builder runs them (ansible-playbook over a local connection): the
work folder offered exactly the bundle's listed files, hashed again there (hvd_artifact state=listed), and the
env key's wheels from a bundle's list.

Under ansible-test units these run in the controller's context (this folder is neither modules/ nor
module_utils/, whose tests get Ansible's module_utils only, no ansible-playbook).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ansible_collections.hvd.cluster.tests.unit.plugins.support import ANSIBLE_PLAYBOOK, ROOT, sha


def offer(tmp_path: Path, bundle_files: list[dict], between: list | None = None) -> subprocess.CompletedProcess:
    """hvd_pyenv's offer tasks (roles/hvd_pyenv/tasks/offer.yml) run here, as the builder runs them, into a work
    folder of tmp_path; ``between``: tasks run first (a file changed after the controller's check)."""
    book = tmp_path / "offer.yml"
    book.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": [
        *(between or []),
        {"ansible.builtin.include_role": {"name": "hvd.cluster.hvd_pyenv", "tasks_from": "offer"},
         "vars": {"hvd_pyenv_bundle_files": bundle_files, "__hvd_pyenv_work": {"path": str(tmp_path / "work")}}},
    ]}]))
    (tmp_path / "work").mkdir()
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"}  # a failure's message on one line
    return subprocess.run([ANSIBLE_PLAYBOOK, "-i", "localhost,", "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}", str(book)],
                          cwd=ROOT, env=env, capture_output=True, text=True)


def bundle_files(tmp_path: Path) -> list[dict]:
    folder = tmp_path / "bundle"
    files = {"pypi/six-1.16.0-py2.py3-none-any.whl": b"six", "wheelhouse/torch-2.13.0-cp311-none-any.whl": b"torch",
             "conda/noarch/repodata.json": b"{}", "conda/linux-64/python-3.11.9-h0_0.conda": b"python"}
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    (folder / "pypi" / "evil-1.0.tar.gz").write_bytes(b"unlisted: never offered")
    return [{"src": str(folder / rel), "path": rel, "sha256": sha(data)} for rel, data in files.items()]


def test_the_builder_is_offered_exactly_the_bundles_listed_files_hashed_again_there(tmp_path: Path) -> None:
    listed = bundle_files(tmp_path)
    proc = offer(tmp_path, listed)
    assert proc.returncode == 0, proc.stdout[-4000:]
    work = tmp_path / "work"
    assert sorted(str(p.relative_to(work)) for p in work.rglob("*") if p.is_file()) == [
        "allowed-sha256.txt", "channel/linux-64/python-3.11.9-h0_0.conda", "channel/noarch/repodata.json", "lock.py",
        "wheels/six-1.16.0-py2.py3-none-any.whl", "wheels/torch-2.13.0-cp311-none-any.whl"]
    assert (work / "allowed-sha256.txt").read_text().split() == sorted(f["sha256"] for f in listed)


def test_a_listed_file_changed_after_the_controllers_check_is_refused_on_the_builder(tmp_path: Path) -> None:
    listed = bundle_files(tmp_path)
    wheel = Path(listed[0]["src"])
    swap = {"ansible.builtin.copy": {"dest": str(wheel), "content": "SIX", "mode": "0644"}}  # same size
    proc = offer(tmp_path, listed, between=[swap])
    assert proc.returncode != 0
    assert f"{tmp_path}/work/wheels/six-1.16.0-py2.py3-none-any.whl: sha256 {sha(b'SIX')}, expected {sha(b'six')}" \
        in proc.stdout, proc.stdout[-4000:]
    assert not (tmp_path / "work" / "lock.py").exists()  # nothing after the check ran


def test_the_env_keys_wheels_from_a_bundles_list_are_those_its_wheelhouse_folder_gave(tmp_path: Path) -> None:
    """An env cached from a bundle made with a wheelhouse keeps its key: the key's `wheels` (hvd_pyenv's main.yml)
    from hvd_pyenv_bundle_files' wheelhouse/ entries equals what listing that folder gives (the role's fileglob
    listing, __hvd_pyenv_wheels in its vars: only the folder's own wheels, sdists and zips), and what the find task
    it replaced gave (the expression before)."""
    import yaml

    tasks = yaml.safe_load((ROOT / "roles" / "hvd_pyenv" / "tasks" / "main.yml").read_text())
    [key] = [t for t in tasks if t["name"] == "Compute the environment key from everything that affects it"]
    wheels = key["vars"]["__hvd_pyenv_inputs"]["wheels"]
    listing = yaml.safe_load((ROOT / "roles" / "hvd_pyenv" / "vars" / "main.yml").read_text())["__hvd_pyenv_wheels"]
    before = "{{ (__hvd_pyenv_wheels.files | default([])) | map(attribute='path') | map('basename') | sort }}"
    names = ["torch-2.13.0-cp311-cp311-linux_x86_64.whl", "apex-0.1.tar.gz", "z-1.0.zip"]
    found = {"files": [{"path": f"/srv/bundle/wheelhouse/{n}"} for n in names]}
    wheelhouse = tmp_path / "wheelhouse"
    (wheelhouse / "sub").mkdir(parents=True)
    for name in [*names, "README.txt", "sub/other-1.0-py3-none-any.whl"]:
        (wheelhouse / name).write_text(name)
    listed = [{"src": f"/srv/bundle/{top}/{n}", "path": f"{top}/{n}", "sha256": "0" * 64}
              for top in ("wheelhouse", "pypi") for n in names[:2]] + [
        {"src": "/srv/bundle/wheelhouse/z-1.0.zip", "path": "wheelhouse/z-1.0.zip", "sha256": "1" * 64},
        {"src": "/srv/bundle/conda/noarch/x.conda", "path": "conda/noarch/x.conda", "sha256": "2" * 64}]
    cases = {"before": (before, found, "", []), "folder": (wheels, listing, str(wheelhouse), []),
             "bundle": (wheels, listing, str(wheelhouse), listed), "none": (wheels, listing, "", [])}
    book = tmp_path / "key.yml"
    book.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"ansible.builtin.debug": {"msg": "KEY " + name + " {{ __w | to_json }}"},
         "vars": {"__w": expr, "__hvd_pyenv_wheels": wheels_var, "hvd_pyenv_wheelhouse": folder,
                  "hvd_pyenv_bundle_files": files}}
        for name, (expr, wheels_var, folder, files) in cases.items()]}]))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
    proc = subprocess.run([ANSIBLE_PLAYBOOK, "-i", "localhost,", "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}", str(book)],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:]
    said = dict(line.split("KEY ", 1)[1].rstrip('"').split(" ", 1) for line in proc.stdout.splitlines() if "KEY " in line)
    assert said["before"] == said["folder"] == said["bundle"] == json.dumps(sorted(names)), said
    assert said["none"] == "[]"
