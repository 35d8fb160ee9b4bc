"""hosts.yaml loading: every mistake is one SpecError at the exact line and field (the bad corpus of
tests/unit/bad_hosts), and the error's shape.

Good files and each field: test_spec_fields.py; hostile input: test_spec_hostile.py; pinned node host keys:
test_spec_host_keys.py; what they share: spec_helpers.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hvdcluster.errors import HvdError, SpecError
from hvdcluster.spec import load
from tests.unit.spec_helpers import BAD_HOSTS, _error

BAD_FILES = sorted(BAD_HOSTS.glob("*.yaml"))
EXPECT = re.compile(r"# expect: (?P<field>\S+) @ (?P<line>\d+)")
MESSAGE_PREFIX = "# message: "


def _expectation(path: Path) -> tuple[str, int, str | None]:
    lines = path.read_text(encoding="utf-8").splitlines()
    match = EXPECT.fullmatch(lines[0])
    assert match, f"{path.name}: the first line must be '# expect: <field> @ <line>'"
    message = lines[1][len(MESSAGE_PREFIX) :] if len(lines) > 1 and lines[1].startswith(MESSAGE_PREFIX) else None
    return match["field"], int(match["line"]), message


# ------------------------------------------------------------------------------------------ the bad corpus


def test_bad_corpus_covers_at_least_110_mistakes() -> None:
    assert len(BAD_FILES) >= 110


@pytest.mark.parametrize("case", BAD_FILES, ids=lambda path: path.stem)
def test_bad_hosts_file_is_rejected_at_its_field_and_line(case: Path) -> None:
    field, line, message = _expectation(case)
    with pytest.raises(SpecError) as caught:
        load(str(case))
    err = caught.value
    assert (err.field, err.line) == (field, line), str(err)
    assert str(err).startswith(f"{case}:{line}:")
    assert field in str(err)
    assert "\n" not in str(err)
    if message is not None:
        assert message in err.message, str(err)


# ------------------------------------------------------------------------------------------ error shape


def test_spec_error_is_one_located_line_with_exit_code_2() -> None:
    err = _error("cluster: lab\nhosts:\n  - address: 10.0.0.1\n    port: 0\n", "site/hosts.yaml")
    assert isinstance(err, HvdError)
    assert err.exit_code == 2
    assert (err.path, err.line, err.column, err.field) == ("site/hosts.yaml", 4, 11, "hosts[0].port")
    assert str(err) == f"site/hosts.yaml:4:11: hosts[0].port: {err.message}"


def test_spec_error_str_never_spans_lines() -> None:
    err = SpecError("h.yaml", 1, 2, "cluster", "first\nsecond\r\n  third")
    assert str(err) == "h.yaml:1:2: cluster: first second third"


def test_unknown_key_suggests_closest_valid_key() -> None:
    err = _error("cluster: lab\nssh: {usr: ubuntu}\nhosts: [10.0.0.1]\n")
    assert (err.field, err.line, err.column) == ("ssh.usr", 2, 7)
    assert "did you mean 'user'?" in err.message


def test_unknown_key_without_close_match_lists_the_allowed_keys() -> None:
    err = _error("cluster: lab\nhosts: [10.0.0.1]\nnetwork: {mirror: x}\n")
    assert err.field == "network.mirror"
    assert "allowed keys: ca_bundle, apt_proxy, pip_index, wheelhouse" in err.message


def test_unknown_stack_key_is_rejected_with_line_number() -> None:
    err = _error("cluster: lab\nhosts: [10.0.0.1]\nstack:\n  cuda: '12.4'\n  cudnn_version: '9.1'\n")
    assert (err.field, err.line) == ("stack.cudnn_version", 5)
    assert "did you mean 'cudnn'?" in err.message


def test_invalid_choice_lists_the_allowed_values() -> None:
    err = _error("cluster: lab\nhosts: [10.0.0.1]\nstack: {python: {manager: pip}}\n")
    assert err.field == "stack.python.manager"
    assert "allowed: venv, conda" in err.message


def test_boolean_is_not_accepted_as_an_integer() -> None:
    err = _error("cluster: lab\nhosts:\n  - {address: 10.0.0.1, slots: true}\n")
    assert err.field == "hosts[0].slots"
    assert "expected an integer, got boolean true" in err.message


def test_quoted_number_is_a_string_not_a_port() -> None:
    err = _error("cluster: lab\nssh: {port: '22'}\nhosts: [10.0.0.1]\n")
    assert err.field == "ssh.port"
    assert "got string '22'" in err.message


def test_float_version_is_rejected_with_a_hint_to_quote_it() -> None:
    err = _error("cluster: lab\nhosts: [10.0.0.1]\nstack: {python: {version: 3.10}}\n")
    assert err.field == "stack.python.version"
    assert err.message == 'write versions as strings ("3.10"): YAML reads 3.10 as 3.1'


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("gpu_01", "bad character '_' in label 'gpu_01'"),
        ("gpu-", "label 'gpu-' ends with a hyphen"),
        ("-gpu", "label '-gpu' starts with a hyphen"),
        ("gpu..lab", "empty label"),
        ("a" * 64, "is 64 characters long (at most 63)"),
        (".".join(["a" * 63] * 4) + ".ab", "characters long (at most 253)"),
        ("node.123", "last label '123' is all digits"),
        ("gpü", "bad character 'ü'"),
    ],
)
def test_invalid_hostname_error_gives_the_reason(name: str, reason: str) -> None:
    err = _error(f"cluster: lab\nhosts:\n  - {{name: '{name}', address: 10.0.0.1}}\n")
    assert err.field == "hosts[0].name"
    assert reason in err.message


def test_missing_required_key_points_at_the_parent_mapping() -> None:
    err = _error("# header\n\ncluster: lab\nhosts:\n  - 10.0.0.1\n  - {name: gpu02, port: 2222}\n")
    assert (err.field, err.line, err.column) == ("hosts[1].address", 6, 5)


def test_yaml_syntax_error_points_at_the_problem() -> None:
    err = _error("cluster: lab\nhosts:\n  - 10.0.0.1\n - 10.0.0.2\n")
    assert err.field == "<yaml>"
    assert err.line == 4


def test_control_character_is_a_yaml_error_with_its_position() -> None:
    err = _error("cluster: lab\nhosts: [gpu\x0701]\n")
    assert (err.field, err.line, err.column) == ("<yaml>", 2, 12)


def test_load_reports_an_unreadable_file_as_spec_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(SpecError) as caught:
        load(missing)
    assert caught.value.path == str(missing)
    assert caught.value.field == "<file>"


def test_load_reports_invalid_utf8_with_its_line(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_bytes(b"cluster: lab\nhosts: [gpu\xff]\n")
    with pytest.raises(SpecError) as caught:
        load(hosts)
    assert (caught.value.line, caught.value.column) == (2, 12)
