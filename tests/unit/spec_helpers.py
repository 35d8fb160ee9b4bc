"""What the hosts.yaml tests share (test_spec.py, test_spec_fields.py, test_spec_hostile.py,
test_spec_host_keys.py): the private key's shape and the certificate of tests/unit/bad_hosts/fixtures, and the
SpecError a hosts.yaml text raises."""

from __future__ import annotations

from pathlib import Path

import pytest

from hvdcluster.errors import SpecError
from hvdcluster.spec import loads

BAD_HOSTS = Path(__file__).parent / "bad_hosts"
KEY = (BAD_HOSTS / "fixtures" / "id_test").read_text()  # a private key's shape (not a real key)
CA = (BAD_HOSTS / "fixtures" / "ca.pem").read_text()  # one real self-signed certificate


def _error(text: str, path: str = "<string>") -> SpecError:
    with pytest.raises(SpecError) as caught:
        loads(text, path)
    return caught.value
