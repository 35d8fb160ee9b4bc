"""Each role's README.md, generated from its meta/argument_specs.yml and meta/facts.yml.

    python tests/role_docs.py --write   # (re)write roles/<role>/README.md for every role
    python tests/role_docs.py --check   # exit 1 naming each README that is missing or out of date

The READMEs are never edited by hand: change the spec (or meta/facts.yml: the facts the role records and the
example's variables) and run --write. tests/test_static.py fails when a README differs from `render(role_dir)`.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
WRITE = "python tests/role_docs.py --write"
MAX_DEFAULT = 60  # characters of a rendered default before it is shortened
ELLIPSIS = "…"
COLLECTION = "hvd.cluster"  # the roles are the hvd.cluster collection's (galaxy.yml): playbooks name them by FQCN
INCLUDE_MODULES = {f"{prefix}{verb}_role" for prefix in ("", "ansible.builtin.", "ansible.legacy.")
                   for verb in ("include", "import")}


class RoleDocError(Exception):
    """A role's spec or facts file the README cannot be made from (carries the file and what is wrong)."""

    def __init__(self, path: Path, message: str) -> None:
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        super().__init__(f"{shown}: {message}")


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads Ansible's tags (!unsafe, !vault) as the plain value under them."""


def _untagged(loader: yaml.SafeLoader, _suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_mapping(node, deep=True)


_Loader.add_multi_constructor("!", _untagged)


class _Dumper(yaml.SafeDumper):
    """Double quotes where a string needs quoting (as the roles write them), sequences indented under their key."""

    def choose_scalar_style(self) -> str:
        style = super().choose_scalar_style()
        return '"' if style == "'" else style

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _load(path: Path) -> Any:
    try:
        return yaml.load(path.read_text(), Loader=_Loader)
    except yaml.YAMLError as exc:
        raise RoleDocError(path, f"not valid YAML: {exc}") from exc


def _mapping(value: Any, path: Path, what: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RoleDocError(path, f"{what} must be a mapping")
    return value


# --- values and text ---------------------------------------------------------------------------------------------

def _flow(value: Any) -> str:
    if isinstance(value, str):
        value = " ".join(value.split())  # a folded Jinja expression reads as one line
    text = yaml.dump(value, Dumper=_Dumper, default_flow_style=True, width=10**9, allow_unicode=True, sort_keys=False)
    return text.removesuffix("\n").removesuffix("\n...").strip()


def inline(value: Any, limit: int = MAX_DEFAULT) -> str:
    """`value` as one line of YAML flow, shortened to about `limit` characters (lists and dicts by their items)."""
    text = _flow(value)
    if len(text) <= limit:
        return text
    if isinstance(value, list):
        shown: list[str] = []
        for item in value:
            if len(", ".join([*shown, inline(item, limit), ELLIPSIS])) + 2 > limit:
                break
            shown.append(inline(item, limit))
        return "[" + ", ".join([*shown, ELLIPSIS]) + "]"
    if isinstance(value, dict):
        full = [f"{_flow(k)}: {inline(v, limit)}" for k, v in value.items()]
        if len(", ".join(full)) + 2 <= limit:
            return "{" + ", ".join(full) + "}"
        shown = []
        for key in value:
            if len(", ".join([*shown, f"{_flow(key)}: {ELLIPSIS}", ELLIPSIS])) + 2 > limit:
                break
            shown.append(f"{_flow(key)}: {ELLIPSIS}")
        if len(shown) < len(value):
            shown.append(ELLIPSIS)
        return "{" + ", ".join(shown) + "}"
    return text[: limit - 1].rstrip() + ELLIPSIS


def _code(text: str) -> str:
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _prose(value: Any) -> str:
    """A spec description (string or list of strings) as one Markdown line: no raw HTML, emphasis or strike."""
    if isinstance(value, list):
        value = " ".join(str(v) for v in value)
    text = " ".join(str(value or "").split())
    for char in "\\*<~":
        text = text.replace(char, "\\" + char)
    return text


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _paragraphs(value: Any) -> list[str]:
    items = value if isinstance(value, list) else [value] if value else []
    return [_prose(item) for item in items]


# --- what the role's files say -----------------------------------------------------------------------------------

def _entry_points(role_dir: Path) -> dict[str, dict]:
    path = role_dir / "meta" / "argument_specs.yml"
    if not path.is_file():
        raise RoleDocError(path, "missing: every role documents its variables in meta/argument_specs.yml")
    specs = _mapping(_mapping(_load(path), path, "the file").get("argument_specs"), path, "argument_specs")
    if "main" not in specs:
        raise RoleDocError(path, "argument_specs has no `main` entry point")
    ordered = {"main": specs["main"], **{name: spec for name, spec in specs.items() if name != "main"}}
    return {name: _mapping(spec, path, f"argument_specs.{name}") for name, spec in ordered.items()}


def _facts_file(role_dir: Path) -> tuple[Path, dict]:
    path = role_dir / "meta" / "facts.yml"
    if not path.is_file():
        raise RoleDocError(path, "missing: declare the facts the role records (`facts: {}` for none) and an `example:`")
    data = _mapping(_load(path), path, "the file")
    unknown = sorted(set(data) - {"facts", "note", "example"})
    if unknown:
        raise RoleDocError(path, f"unknown key(s) {', '.join(unknown)} (facts, note, example)")
    return path, data


def _rows(options: dict, defaults: dict, prefix: str = "") -> list[tuple[str, dict, Any, bool]]:
    """(name, option, default, has_default) for every option, suboptions as parent.child after their parent."""
    rows = []
    for name, option in options.items():
        option = option or {}
        if "default" in option:
            default, has_default = option["default"], True
        elif not prefix and name in defaults:
            default, has_default = defaults[name], True
        else:
            default, has_default = None, False
        rows.append((prefix + name, option, default, has_default))
        rows += _rows(option.get("options") or {}, {}, f"{prefix}{name}.")
    return rows


def _type(option: dict) -> str:
    kind = option.get("type", "str")
    return f"{kind} of {option['elements']}" if option.get("elements") else str(kind)


def _table(options: dict, defaults: dict) -> list[str]:
    if not options:
        return ["No variables."]
    lines = ["| Variable | Type | Default | Choices | Description |", "|---|---|---|---|---|"]
    for name, option, default, has_default in _rows(options, defaults):
        if option.get("required"):
            shown = "**required**"
        else:
            shown = _code(inline(default)) if has_default else ""
        choices = ", ".join(_code(_flow(choice)) for choice in option.get("choices") or [])
        cells = [_code(name), _type(option), shown, choices, _prose(option.get("description"))]
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return lines


def _plays(path: Path) -> list[dict]:
    try:
        data = _load(path)
    except RoleDocError:
        return []
    return [play for play in data or [] if isinstance(play, dict)] if isinstance(data, list) else []


def _playbooks_running(role: str, root: Path) -> list[tuple[str, str]]:
    """(playbook path, play name) of every play in playbooks/ that lists the role, or includes it among its tasks (a
    role with an on/off switch: one include_role behind it)."""
    found = []
    for path in sorted((root / "playbooks").glob("*.yml")):
        for play in _plays(path):
            names = [entry if isinstance(entry, str) else (entry or {}).get("role", (entry or {}).get("name"))
                     for entry in play.get("roles") or []]
            names += [args.get("name") for args in _includes(play.get("tasks") or [])]
            if f"{COLLECTION}.{role}" in names:
                found.append((path.relative_to(root).as_posix(), str(play.get("name") or "")))
    return found


def _includes(node: Any) -> list[dict]:
    """Every include_role / import_role argument mapping in a tasks file (blocks included)."""
    found = []
    if isinstance(node, list):
        for item in node:
            found += _includes(item)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key in INCLUDE_MODULES and isinstance(value, dict):
                found.append(value)
            elif isinstance(value, (list, dict)):
                found += _includes(value)
    return found


def _included_by(role: str, root: Path) -> list[str]:
    """Other roles that include this one: "hvd_x" for main, "hvd_x (tasks_from: repo)" otherwise."""
    users = set()
    for other in sorted(p for p in (root / "roles").iterdir() if p.is_dir() and p.name != role):
        for path in sorted((other / "tasks").glob("**/*.yml")):
            try:
                tasks = _load(path)
            except RoleDocError:
                continue
            for args in _includes(tasks):
                if args.get("name") == f"{COLLECTION}.{role}":
                    entry = str(args.get("tasks_from") or "main").removesuffix(".yml").removesuffix(".yaml")
                    users.add(other.name if entry == "main" else f"{other.name} (`tasks_from: {entry}`)")
    return sorted(users)


# --- the README --------------------------------------------------------------------------------------------------

def _facts_section(data: dict, path: Path) -> list[str]:
    facts = _mapping(data.get("facts"), path, "facts")
    lines = ["## Facts", ""]
    if not facts:
        lines += ["This role records no local facts (`ansible_local`).", ""]
    for name, fact in facts.items():
        fact = _mapping(fact, path, f"facts.{name}")
        where = f"`ansible_local.{name}`, read from `/etc/ansible/facts.d/{name}.fact` (JSON)."
        lines += [" ".join(filter(None, [_cell(where), _prose(fact.get("description"))])), ""]
        keys = _mapping(fact.get("keys"), path, f"facts.{name}.keys")
        lines += [f"- `{key}`: {_prose(text)}" for key, text in keys.items()] + ([""] if keys else [])
    if data.get("note"):
        lines += [_prose(data["note"]), ""]
    return lines


def _example_section(role: str, main: dict, data: dict, path: Path, root: Path) -> list[str]:
    example = _mapping(data.get("example"), path, "example")
    options = main.get("options") or {}
    unknown = sorted(set(example) - set(options))
    if unknown:
        raise RoleDocError(path, f"example sets {', '.join(unknown)}, not an option of the main entry point")
    missing = sorted(name for name, option in options.items() if (option or {}).get("required") and name not in example)
    if missing:
        raise RoleDocError(path, f"example must set the required option(s) {', '.join(missing)}")
    playbooks = _playbooks_running(role, root)
    name = playbooks[0][1] if playbooks and playbooks[0][1] else str(main.get("short_description") or role).rstrip(".")
    play: dict[str, Any] = {"name": name, "hosts": "hvd_nodes", "become": True}
    if example:
        play["vars"] = example
    play["roles"] = [role]
    text = yaml.dump([play], Dumper=_Dumper, default_flow_style=False, width=120, allow_unicode=True, sort_keys=False)
    lines = ["## Example", "", "```yaml", "---", *text.splitlines(), "```", ""]
    if playbooks:
        lines += ["The project's own playbook for it:" if len(playbooks) == 1 else "The project's own playbooks for it:",
                  "", "```sh", *(f"ansible-playbook -i inventories/<cluster> {pb}" for pb, _ in playbooks), "```", ""]
    else:
        own = f"{role.removeprefix('hvd_')}.yml"
        lines += [f"No playbook in playbooks/ runs it; saved as `{own}`:", "",
                  "```sh", f"ansible-playbook -i inventories/<cluster> {own}", "```", ""]
    users = _included_by(role, root)
    if users:
        lines += [f"Included by {', '.join(users)}.", ""]
    return lines


def render(role_dir: Path) -> str:
    """The README.md of the role in `role_dir` (roles/<role>), as `--write` writes it."""
    role_dir = Path(role_dir)
    role, root = role_dir.name, role_dir.parent.parent
    entry_points = _entry_points(role_dir)
    facts_path, facts = _facts_file(role_dir)
    defaults_path = role_dir / "defaults" / "main.yml"
    defaults = _mapping(_load(defaults_path), defaults_path, "defaults") if defaults_path.is_file() else {}
    main = entry_points["main"]

    lines = [f"<!-- Generated by tests/role_docs.py from meta/argument_specs.yml and meta/facts.yml: edit those, "
             f"then run `{WRITE}`. -->", "", f"# {role}", ""]
    for paragraph in _paragraphs(main.get("short_description")) + _paragraphs(main.get("description")):
        lines += [paragraph, ""]

    lines += ["## Variables", "",
              "Defaults come from the entry point's spec, else from defaults/main.yml (which every entry point loads).", ""]
    for name, spec in entry_points.items():
        if name == "main":
            lines += ["### `main`", "", f"`roles: [{COLLECTION}.{role}]`, or `include_role: {{name: {COLLECTION}.{role}}}`.", ""]
        else:
            lines += [f"### `{name}`", "", f"`include_role: {{name: {COLLECTION}.{role}, tasks_from: {name}}}`.", ""]
            for paragraph in _paragraphs(spec.get("short_description")) + _paragraphs(spec.get("description")):
                lines += [paragraph, ""]
        lines += [*_table(_mapping(spec.get("options"), role_dir, f"{name}.options"), defaults), ""]

    lines += _facts_section(facts, facts_path)
    lines += _example_section(role, main, facts, facts_path, root)
    return "\n".join(lines).rstrip("\n") + "\n"


def role_dirs(root: Path = ROOT) -> list[Path]:
    return sorted(p for p in (root / "roles").iterdir() if p.is_dir())


def stale(root: Path = ROOT) -> list[str]:
    """One line per role whose README.md is missing or differs from what render() makes."""
    out = []
    for role_dir in role_dirs(root):
        readme = role_dir / "README.md"
        if not readme.is_file():
            out.append(f"roles/{role_dir.name}/README.md is missing")
        elif readme.read_text() != render(role_dir):
            out.append(f"roles/{role_dir.name}/README.md is out of date")
    return out


def diff(role_dir: Path, context: int = 40) -> str:
    """The first lines of the difference between the role's README.md and what render() makes."""
    readme = role_dir / "README.md"
    have = readme.read_text().splitlines() if readme.is_file() else []
    lines = list(difflib.unified_diff(have, render(role_dir).splitlines(), "README.md", "generated", lineterm=""))
    return "\n".join(lines[:context] + ([ELLIPSIS] if len(lines) > context else []))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate or check roles/<role>/README.md from the argument specs.")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="write every role's README.md")
    mode.add_argument("--check", action="store_true", help="exit 1 naming each README that is missing or out of date")
    args = parser.parse_args(argv)
    try:
        if args.check:
            problems = stale()
            for line in problems:
                print(f"{line}: run {WRITE}")
            return 1 if problems else 0
        for role_dir in role_dirs():
            readme = role_dir / "README.md"
            text = render(role_dir)
            if not readme.is_file() or readme.read_text() != text:
                readme.write_text(text)
                print(f"wrote roles/{role_dir.name}/README.md")
        return 0
    except RoleDocError as exc:
        print(f"role_docs: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
