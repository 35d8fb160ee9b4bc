"""Fast tier: lint, syntax and the role conventions every role must keep."""

from __future__ import annotations

import ast
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import BIN, ROOT, tool

ROLES = sorted(p for p in (ROOT / "roles").iterdir() if p.is_dir())
# Roles that are building blocks of other roles, not steps of the converge: no playbook or tag of their own.
SHARED_ROLES = {"hvd_gpu_component", "hvd_fanout"}
# Roles with a playbook of their own that is not a converge step (site.yml does not import it).
OUTSIDE_SITE = {"hvd_bundle"}  # hvdcluster bundle: gathers an offline bundle on one connected node
# Playbooks of no role that only read the nodes for a command of their own: no converge step either.
READ_ONLY_OUTSIDE_SITE = {"health.yml"}  # hvdcluster health (plugins/modules/hvd_health_read.py)
PLAYBOOKS = sorted((ROOT / "playbooks").glob("*.yml"))


def _plays() -> list[tuple[str, dict]]:
    """Every play of every playbook (not the imports of site.yml), with its playbook's file name."""
    return [(p.name, play) for p in PLAYBOOKS for play in yaml.safe_load(p.read_text()) if "hosts" in play]


def run(*cmd: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)


def test_yamllint_is_clean() -> None:
    proc = run(tool("yamllint"), "-s", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ansible_lint_production_profile_is_clean() -> None:
    proc = run(tool("ansible-lint"), "--offline", "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("playbook", PLAYBOOKS, ids=lambda p: p.name)
def test_playbook_passes_syntax_check(playbook: Path) -> None:
    proc = run(tool("ansible-playbook"), "--syntax-check", "-i", "inventories/sample", str(playbook))
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_role_documents_every_default_in_its_argument_specs(role: Path) -> None:
    """Every default is an option of an entry point (main's, or another's, such as hvd_fanout's cache), and every
    option of main has a default."""
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    options = {name for entry in specs.values() for name in (entry.get("options") or {})}
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {}
    assert set(defaults) <= options and set(specs["main"].get("options", {})) <= set(defaults)


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_role_variables_carry_the_role_prefix(role: Path) -> None:
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {}
    private = yaml.safe_load((role / "vars" / "main.yml").read_text()) if (role / "vars" / "main.yml").exists() else {}
    assert all(name.startswith(role.name + "_") for name in defaults)
    assert all(name.startswith(f"__{role.name}_") for name in private or {})


@pytest.mark.parametrize("role", [r for r in ROLES if r.name in SHARED_ROLES], ids=lambda p: p.name)
def test_shared_role_is_used_by_roles_that_have_playbooks(role: Path) -> None:
    users = [r.name for r in ROLES if r != role and any(
        f"name: hvd.cluster.{role.name}" in path.read_text() for path in (r / "tasks").glob("*.yml"))]
    assert users and not (ROOT / "playbooks" / (role.name.removeprefix("hvd_") + ".yml")).exists()


def _role_entry(play: dict, role: str) -> dict:
    """How a role's playbook runs it: the role's argument check for every node in one task (hvd_role_args, run once,
    tagged always) then an `import_role` with Ansible's own per-node check off {role, tags}; or (a role with an on/off
    switch) one `include_role` task {role, tags, when}, its tag applied to the role's tasks."""
    assert "roles" not in play, play["name"]
    if len(play["tasks"]) == 2:
        check, task = play["tasks"]
        assert check["run_once"] is True and check["tags"] == ["always"], check
        assert f"hvd.cluster.{role}" in check["hvd.cluster.hvd_role_args"]["roles"], check
        imported = task["ansible.builtin.import_role"]
        assert imported == {"name": f"hvd.cluster.{role}", "rolespec_validate": False}, task
        assert set(task) == {"name", "tags", "ansible.builtin.import_role"}, task
        return {"role": imported["name"], "tags": task["tags"]}
    (task,) = play["tasks"]
    include = task["ansible.builtin.include_role"]
    assert include == {"name": f"hvd.cluster.{role}", "apply": {"tags": task["tags"]}}, task
    assert set(task) == {"name", "when", "tags", "ansible.builtin.include_role"}, task
    return {"role": include["name"], "tags": task["tags"], "when": task["when"]}


@pytest.mark.parametrize("role", [r for r in ROLES if r.name not in SHARED_ROLES], ids=lambda p: p.name)
def test_role_has_its_own_playbook_tagged_with_its_name(role: Path) -> None:
    playbook = ROOT / "playbooks" / (role.name.removeprefix("hvd_") + ".yml")
    plays = yaml.safe_load(playbook.read_text())
    entry = _role_entry(plays[0], role.name)
    assert entry["tags"] == [role.name]
    # a role with an on/off switch is included only where it is on (off: skipped whole, its argument check too)
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {}
    assert ("when" in entry) == (f"{role.name}_enabled" in defaults), entry
    site = (ROOT / "playbooks" / "site.yml").read_text()
    assert (f"import_playbook: {playbook.name}" in site) != (role.name in OUTSIDE_SITE)


def test_every_playbook_is_a_converge_step_or_named_outside_it() -> None:
    site = yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text())
    steps = {entry["ansible.builtin.import_playbook"] for entry in site}
    outside = {role.removeprefix("hvd_") + ".yml" for role in OUTSIDE_SITE} | READ_ONLY_OUTSIDE_SITE
    assert not steps & outside
    assert {p.name for p in PLAYBOOKS} == steps | outside | {"site.yml"}


@pytest.mark.parametrize("name", sorted(READ_ONLY_OUTSIDE_SITE))
def test_a_read_only_playbook_runs_no_role_and_no_sudo_under_its_own_tag(name: str) -> None:
    for play in yaml.safe_load((ROOT / "playbooks" / name).read_text()):
        assert play["become"] is False and "roles" not in play
        assert play["tags"] == ["hvd_" + name.removesuffix(".yml")]


def test_every_play_that_becomes_says_who_needs_sudo_the_same_way() -> None:
    """The play header's sudo rule is written in each playbook (Ansible reads a playbook's group_vars/ only for the
    top playbook, so a shared variable there would be lost to a playbook imported from molecule's converge or an
    operator's own playbook): every play says false or exactly the same rule."""
    rule = "{{ hvd_become | default((ansible_user | default('root')) != 'root') }}"
    plays = _plays()
    assert plays
    assert [(name, play["become"]) for name, play in plays if play["become"] not in (False, rule)] == []


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_commands_declare_when_they_change_something(role: Path) -> None:
    for path in (role / "tasks").glob("*.yml"):
        for task in yaml.safe_load(path.read_text()) or []:
            module = next((k for k in task if k.startswith("ansible.builtin.") and k.split(".")[-1] in
                           ("command", "shell")), None)
            if module is None:
                continue
            args = task[module] if isinstance(task[module], dict) else {}
            assert "changed_when" in task or "creates" in args, f"{path.name}: {task.get('name')}"


def _block_scalars(node: yaml.Node):
    """Every scalar of a composed YAML document written as a block (``|`` or ``>``)."""
    if isinstance(node, yaml.ScalarNode):
        if node.style in ("|", ">"):
            yield node
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            yield from _block_scalars(item)
    elif isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            yield from _block_scalars(key)
            yield from _block_scalars(value)


def test_no_template_in_a_block_scalar_writes_an_escape_that_ansible_leaves_as_two_characters() -> None:
    """A block scalar hands Jinja its backslashes as they are, and ansible-core 2.19 leaves a '\\n' in a template
    as a backslash and an n (hvd_horovod's build key once reached the node so and never matched again): a newline in
    a template belongs in a double-quoted YAML string, where YAML makes it one."""
    # a quoted '\\n' in a template (a regex's \\t or \\1 is meant as the two characters, and stays)
    escape = re.compile(r"\{\{(?:(?!\}\}).)*['\"]\\n['\"](?:(?!\}\}).)*\}\}", re.S)
    found = []
    for path in [*ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("roles/*/vars/*.yml"),
                 *ROOT.glob("roles/*/defaults/*.yml"), *ROOT.glob("roles/*/handlers/*.yml"), *PLAYBOOKS]:
        for document in yaml.compose_all(path.read_text()):
            found += [f"{path.relative_to(ROOT)}:{node.start_mark.line + 1}" for node in _block_scalars(document)
                      if document is not None and escape.search(node.value)]
    assert not found, found


def test_host_key_checking_is_never_turned_off() -> None:
    pattern = re.compile(r"StrictHostKeyChecking[= ]+no|host_key_checking *= *(false|no)", re.I)
    for path in [*ROOT.glob("roles/**/*.yml"), *ROOT.glob("playbooks/*.yml"), ROOT / "ansible.cfg",
                 *ROOT.glob("src/hvdcluster/**/*.py"), *ROOT.glob("molecule/**/*.yml")]:
        assert not pattern.search(path.read_text()), path


def test_the_horovod_role_default_sdist_sha256_is_the_one_the_matrix_pins() -> None:
    """Hand-written inventories get the role default; `hvdcluster up` writes the matrix's: they must agree."""
    from hvdcluster import compat

    defaults = yaml.safe_load((ROOT / "roles" / "hvd_horovod" / "defaults" / "main.yml").read_text())
    version = defaults["hvd_horovod_version"]
    assert compat.sdist_sha256(version) and compat.sdist_sha256(version) in defaults["hvd_horovod_sdist_sha256"]


def test_the_nccl_tests_role_default_release_is_the_newest_the_matrix_lists() -> None:
    """Hand-written inventories get the role default release; `hvdcluster up` writes the resolver's: they must agree."""
    from hvdcluster import compat

    defaults = yaml.safe_load((ROOT / "roles" / "hvd_nccl_tests" / "defaults" / "main.yml").read_text())
    rows = compat.load_matrix()["nccl_tests"]
    assert defaults["hvd_nccl_tests_version"] == compat.resolve(
        {"driver": "535", "nccl_tests": {"url": "/x", "sha256": "0" * 64}}).stack["nccl_tests"]["version"]
    assert defaults["hvd_nccl_tests_version"] in [row["version"] for row in rows]


def test_the_gpu_component_wheel_hashes_are_the_ones_the_matrix_pins() -> None:
    """Hand-written inventories get the role default table of NVIDIA wheel sha256s: it is compat.yaml's, row for row."""
    from hvdcluster import compat

    defaults = yaml.safe_load((ROOT / "roles" / "hvd_gpu_component" / "defaults" / "main.yml").read_text())
    assert defaults["hvd_gpu_component_wheel_sha256"] == compat.nvidia_wheel_sha256()
    assert all(len(d) == 64 for digests in compat.nvidia_wheel_sha256().values() for d in digests)


def test_no_role_stages_work_under_a_world_writable_folder() -> None:
    """Work goes to the private /var/lib/hvdcluster (hvd_workdir), never a predictable name in /tmp or /var/tmp."""
    pattern = re.compile(r"(?<![\w/])(/var/tmp|/tmp|/dev/shm)/")
    for path in [*ROOT.glob("roles/**/*.yml"), *ROOT.glob("roles/**/*.py"), *ROOT.glob("plugins/**/*.py")]:
        text = path.read_text()
        assert not pattern.search(text), f"{path}: {pattern.search(text).group(0)}"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_role_has_a_readme(role: Path) -> None:
    assert (role / "README.md").is_file(), f"roles/{role.name} has no README.md: run python tests/role_docs.py --write"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_role_readmes_are_generated_from_argument_specs(role: Path) -> None:
    from tests import role_docs

    readme = role / "README.md"
    current = readme.is_file() and readme.read_text() == role_docs.render(role)
    assert current, (
        f"roles/{role.name}/README.md differs from its meta/argument_specs.yml and meta/facts.yml: "
        f"run python tests/role_docs.py --write\n{role_docs.diff(role)}")


def test_role_readme_shows_every_entry_point_and_marks_required_options(tmp_path: Path) -> None:
    from tests import role_docs

    role = tmp_path / "roles" / "hvd_demo"
    (role / "meta").mkdir(parents=True)
    (role / "meta" / "argument_specs.yml").write_text(
        "argument_specs:\n"
        "  extra:\n    short_description: The extra steps.\n"
        "    options:\n      hvd_demo_lines: {type: list, elements: str, required: true, description: Lines.}\n"
        "  main:\n    short_description: A demo.\n"
        "    options:\n"
        "      hvd_demo_mode: {type: str, choices: [a, b], default: a, description: 'Mode | kind.'}\n"
        "      hvd_demo_opaque: {type: raw, description: No default anywhere.}\n")
    (role / "meta" / "facts.yml").write_text("facts: {}\nexample: {hvd_demo_mode: b}\n")

    text = role_docs.render(role)

    assert text.index("### `main`") < text.index("### `extra`")
    assert "include_role: {name: hvd.cluster.hvd_demo, tasks_from: extra}" in text
    assert "| `hvd_demo_lines` | list of str | **required** |  | Lines. |" in text
    assert "| `hvd_demo_mode` | str | `a` | `a`, `b` | Mode \\| kind. |" in text
    assert "| `hvd_demo_opaque` | raw |  |  | No default anywhere. |" in text
    assert "This role records no local facts" in text and "    hvd_demo_mode: b" in text
    assert text == role_docs.render(role)  # deterministic


# Distribution name -> the module it is imported as. ansible-core has no import here: it is the engine ansible-runner
# starts (ansible-playbook), declared for its version floor.
IMPORT_NAMES = {"ansible-runner": "ansible_runner", "pyyaml": "yaml", "packaging": "packaging",
                "clustershell": "ClusterShell"}
ENGINE = {"ansible-core"}


def test_every_runtime_dependency_is_imported_by_the_product() -> None:
    """A declared dependency nothing uses is weight every install carries (paramiko was one; jinja2 comes with
    ansible-core and is used only there): each one is imported by src/, or is the engine."""
    import tomllib

    declared = {re.split(r"[<>=!~\[ ;]", dep, maxsplit=1)[0].lower()
                for dep in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]}
    assert declared - ENGINE == set(IMPORT_NAMES), "map each new dependency to its import name"
    source = "\n".join(path.read_text() for path in (ROOT / "src").rglob("*.py"))
    for dist, module in IMPORT_NAMES.items():
        assert re.search(rf"^\s*(?:import|from) {module}\b", source, re.M), f"{dist}: declared, never imported"


# The roles that build once into the controller cache, and the task file their builder node runs.
CACHED_BUILDS = {"hvd_pyenv": ["build-venv.yml", "build-conda.yml"], "hvd_horovod": ["build.yml"],
                 "hvd_openmpi": ["build.yml"], "hvd_nccl_tests": ["build.yml"],
                 "hvd_pyxis": ["build.yml"]}


def test_one_cached_build_flow_takes_every_build_lease() -> None:
    """Key, lease, verify, build, publish and fan out are written once (hvd_fanout's cache, release and built entry
    points): no other role's tasks take a lease, and each building role goes through them."""
    leasing = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("roles/*/tasks/*.yml") if "hvd_lease" in p.read_text())
    assert leasing == ["roles/hvd_fanout/tasks/cache.yml", "roles/hvd_fanout/tasks/release.yml"]
    for role in CACHED_BUILDS:
        text = "".join(p.read_text() for p in (ROOT / "roles" / role / "tasks").glob("*.yml"))
        assert all(f"tasks_from: {entry}" in text for entry in ("cache", "release", "built")), role


def _included(role: Path, name: str, seen: set[str]) -> set[str]:
    """``name`` and every tasks file it includes (include_tasks/import_tasks of a literal file), transitively."""
    if name in seen:
        return seen
    seen.add(name)
    for task in yaml.safe_load((role / "tasks" / name).read_text()) or []:
        for block in (task, *task.get("block", []), *task.get("always", []), *task.get("rescue", [])):
            for key in ("ansible.builtin.include_tasks", "ansible.builtin.import_tasks"):
                target = block.get(key) if isinstance(block, dict) else None
                if isinstance(target, str) and "{{" not in target:
                    _included(role, target, seen)
    return seen


@pytest.mark.parametrize("role", sorted(CACHED_BUILDS))
def test_a_cached_builds_key_covers_its_own_recipe(role: str) -> None:
    """The key of a cached build digests the task files its builder runs (and every file they include), so a
    changed recipe is built again instead of a cache entry built by the old one being reused."""
    path = ROOT / "roles" / role
    text = "".join(p.read_text() for p in (path / "tasks").glob("*.yml"))
    recipe = re.search(r"recipe: \"\{\{ query\('ansible\.builtin\.file', \*\((\[.*?\])", text)
    assert recipe, f"{role}: no recipe in its key"
    named = set(re.findall(r"'([\w.-]+\.yml)'", recipe.group(1)))
    named |= {f"build-{manager}.yml" for manager in ("venv", "conda")} if "hvd_pyenv_manager" in recipe.group(1) else set()
    for build in CACHED_BUILDS[role]:
        assert _included(path, build, set()) <= named, (role, build, named)


def test_ansible_test_sanity_passes_on_the_built_collection(tmp_path: Path) -> None:
    """Every sanity test of ansible-test (pep8, pylint, validate-modules, import, ansible-doc, ...) on the collection
    as ansible-galaxy builds it. The one code its ignore files hold is validate-modules' GPLv3 header: the project is
    Apache-2.0 (galaxy.yml), which ansible-core's own check does not know."""
    from tests import ansible_test_run as ansible_test  # noqa: PLC0415 - only here

    ansible_test.seed_pip_bootstrap()
    root = ansible_test.installed_collection(tmp_path)
    proc = ansible_test.run(root, "sanity")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    ignored = {line.split()[1] for p in (root / "tests" / "sanity").glob("ignore-*.txt")
               for line in p.read_text().splitlines() if line.strip()}
    assert ignored == {"validate-modules:missing-gplv3-license"}


def test_ansible_test_units_run_the_collections_own_unit_tests(tmp_path: Path) -> None:
    """tests/unit/plugins (the collection's own tests: its modules run as Ansible runs them, module_utils, the filters'
    policy, plays through ansible-playbook) under ansible-test units, in the installed collection: they need nothing but
    the collection and ansible-core. Every test function there runs, by its name in ansible-test's JUnit reports."""
    from xml.etree import ElementTree  # noqa: PLC0415 - only here

    from tests import ansible_test_run as ansible_test  # noqa: PLC0415 - only here

    ansible_test.seed_pip_bootstrap()
    root = ansible_test.with_unit_tests(ansible_test.installed_collection(tmp_path))
    proc = ansible_test.run(root, "units", "--venv")  # its own venv: pytest-xdist and its pins
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    # Passed and skipped both count as run (a failure fails above): the tests that read the real recordings of
    # ../shared/fixtures-gpu skip there, the folder not being next to the installed copy (support.py NO_SHARED), as do
    # the comparisons with Ansible's own modules, which the module tests are not given there. The summary lines: the
    # modules' run, module_utils' and the controller's.
    counts = [dict((word, int(n)) for n, word in re.findall(r"(\d+) (passed|skipped)", line))
              for line in re.findall(r"^=+ (.* in [\d.]+s.*) =+$", proc.stdout, re.M)]
    ran = sum(c.get("passed", 0) + c.get("skipped", 0) for c in counts)
    skipped = sum(c.get("skipped", 0) for c in counts)
    outcomes: dict[tuple[str, str], int] = {}  # (file, test function): its runs, one a parameter set
    for report in (root / "tests" / "output" / "junit").glob("*-units.xml"):
        for case in ElementTree.parse(report).iter("testcase"):
            key = (case.get("file", ""), case.get("name", "").split("[", 1)[0])
            outcomes[key] = outcomes.get(key, 0) + 1
    mine = {(str(p.relative_to(ROOT)), name) for p in (ROOT / "tests" / "unit" / "plugins").rglob("test_*.py")
            for name in re.findall(r"^def (test_\w+)", p.read_text(), re.M)}
    assert mine and not mine - set(outcomes), f"not run by ansible-test units: {sorted(mine - set(outcomes))}"
    assert ran == sum(outcomes.values()) >= len(mine), (
        f"{ran} run ({skipped} of them skipped) for {len(mine)} test functions: {proc.stdout[-3000:]}")


# One home for each small rule several parts apply (issue 55): the rule, the file that holds it and what defines it
# there, the files that must use it (and how they call it), and what a second copy of it would look like anywhere
# else in the product (src/, plugins/, roles/, playbooks/) and in the benches and container suites (tests/cluster).
ONE_HOME = {
    "members and their slots": (
        "plugins/module_utils/hvd_members.py", ["def member(", "def slots("],
        {"src/hvdcluster/inventory/variables.py": "member_rules.member(", "src/hvdcluster/launch.py": "member_rules.slots(",
         "plugins/filter/hvd_cluster.py": "member_rules.member("},
        None),
    "horovodrun's and mpirun's -H list": (
        "plugins/module_utils/hvd_members.py", ["def host_list("],
        {"src/hvdcluster/launch.py": "member_rules.host_list(", "src/hvdcluster/bandwidth.py": "member_rules.host_list(",
         "plugins/filter/hvd_cluster.py": "member_rules.host_list(",
         "roles/hvd_verify/vars/main.yml": "hvd.cluster.hvd_host_list"},
        r"""join\(f["']\{[^}]+\}:\{[^}]+\}["'] for|~ ?['"]:['"] ?~"""),
    "a version's release numbers and major": (
        "plugins/module_utils/hvd_limits.py", ["def release(", "def major("],
        {"src/hvdcluster/compat/rules.py": "hvd_limits import", "plugins/filter/hvd_preflight.py": "hvd_limits import",
         "plugins/filter/hvd_gpu.py": "hvd_limits import release"},
        None),
    "a GPU model's matrix row": (
        "plugins/module_utils/hvd_limits.py", ["def gpu_row("],
        {"src/hvdcluster/compat/matrix.py": "hvd_limits.gpu_row(", "plugins/filter/hvd_preflight.py": "gpu_row("},
        r"re\.search\([^)]*(match|gpu)[^)]*re\.IGNORECASE"),
    "the NVIDIA driver's branch": (
        "plugins/filter/hvd_gpu.py", ["def hvd_driver_branch("],
        {"roles/hvd_nvidia_driver/vars/main.yml": "hvd.cluster.hvd_driver_branch",
         "roles/hvd_nvidia_driver/tasks/main.yml": "hvd.cluster.hvd_driver_branch"},
        r"""split\(['"]\.['"]\)\[0\]"""),
    "NVIDIA's PCI vendor id": (
        "plugins/module_utils/hvd_defaults.py", ["NVIDIA_PCI_VENDOR = "],
        {"plugins/module_utils/hvd_fabric.py": "NVIDIA_PCI_VENDOR", "plugins/module_utils/hvd_host.py": "nvidia_pci(",
         "roles/hvd_nvidia_driver/tasks/main.yml": "'nvidia_pci_vendor'"},
        r"""['"]\^?0x10de\$?['"]"""),
    "the CPU lab's stack (the tests' and benches' PyTorch)": (
        "tests/lab/stacks.py", ["def cpu_stack(", "TORCH = "],
        {"bench/up_scaling.py": "cpu_stack(", "tests/cluster/test_train.py": "cpu_stack("},
        r"""['"]torch==2\.13"""),
}
ONE_HOME_SCOPE = ("src", "plugins", "roles", "playbooks", "bench", "tests/cluster")


@pytest.mark.parametrize("rule", sorted(ONE_HOME))
def test_each_small_rule_has_one_home_that_its_users_call(rule: str) -> None:
    home, defines, users, copy = ONE_HOME[rule]
    text = (ROOT / home).read_text()
    assert all(definition in text for definition in defines), f"{rule}: {home} no longer defines {defines}"
    for user, call in users.items():
        assert call in (ROOT / user).read_text(), f"{rule}: {user} does not use {home} ({call!r})"
    if copy is None:
        return
    pattern = re.compile(copy)
    seconds = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
               for top in ONE_HOME_SCOPE for path in sorted((ROOT / top).rglob("*"))
               if path.suffix in (".py", ".yml", ".j2", ".sh") and path.is_file() and path.relative_to(ROOT) != Path(home)
               for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1) if pattern.search(line)]
    assert not seconds, f"{rule}: a second copy beside {home}:\n" + "\n".join(seconds)


# bench/'s modules the benchmarks share, not benchmarks themselves.
BENCH_HELPERS = {"against.py", "benchargs.py", "kernel_node.py"}
BENCHES = sorted(p.name for p in (ROOT / "bench").glob("*.py") if p.name not in BENCH_HELPERS)


@pytest.mark.parametrize("bench", BENCHES)
def test_a_benchmark_says_what_it_measures_on_help_and_starts_nothing(bench: str, tmp_path: Path) -> None:
    """`python bench/X.py --help` prints the script's docstring and exits 0 before it starts a lab or builds anything:
    Docker is pointed at a socket that does not exist, so a script that reached for it would fail."""
    proc = subprocess.run([str(BIN / "python"), str(ROOT / "bench" / bench), "--help"], cwd=tmp_path,
                          env={**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    first = (ast.get_docstring(ast.parse((ROOT / "bench" / bench).read_text())) or "").strip().splitlines()[0]
    assert first and first in proc.stdout, proc.stdout[-2000:]


MAX_LINES = 500
# The files that stay longer, each with its reason: every other source file is split by subject before it grows past
# MAX_LINES (tests/unit's test_cli.py became test_cli.py, test_cli_run_check.py, test_cli_lock.py and
# test_up_fast_path.py, with the helpers they share in cli_fakes.py).
LONG_FILES = {
    "tests/cluster/test_up.py": ("one container suite, one 3-node cluster converged once for all its tests "
                                 "(a second file would build a second cluster per run)"),
}
# What the tests and the product read as data, not source: the bad hosts.yaml corpus, the inventory the rendering is
# compared with, recorded tool outputs, the version matrix and the example hosts.yaml.
NOT_SOURCE = ("tests/unit/bad_hosts/", "tests/unit/expected/", "tests/unit/fixtures/", "tests/unit/plugins/fixtures/",
              "src/hvdcluster/data/")


def test_every_source_file_stays_within_500_lines_but_the_long_files_named_with_their_reason() -> None:
    """Every tracked .py, .yml, .yaml and .sh file (git ls-files) holds at most MAX_LINES lines, but LONG_FILES, each
    named with why it stays whole; an entry of LONG_FILES that is no longer over the limit is a stale exception."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    lines = {path: len((ROOT / path).read_text(errors="replace").splitlines()) for path in tracked.split("\0")
             if path.endswith((".py", ".yml", ".yaml", ".sh")) and not path.startswith(NOT_SOURCE)
             and (ROOT / path).is_file() and not (ROOT / path).is_symlink()}
    over = [f"{path}: {count} lines, over {MAX_LINES}: split it by subject (or name it in LONG_FILES with its reason)"
            for path, count in sorted(lines.items()) if count > MAX_LINES and path not in LONG_FILES]
    stale = [f"{path}: in LONG_FILES, but {f'{lines[path]} lines' if path in lines else 'not tracked'}: drop it there"
             for path in sorted(LONG_FILES) if lines.get(path, 0) <= MAX_LINES]
    assert not over + stale, "\n".join(over + stale)
