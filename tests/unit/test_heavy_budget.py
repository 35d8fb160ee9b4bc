"""CI's budget for the heavy set (tests/conftest.py heavy_budget_spent, HVD_HEAVY_BUDGET_MIN): a heavy test that
would start after the budget is skipped with a reason that says how to run it; without the variable (README's test
command, tests/run.sh --heavy) nothing is ever skipped."""

from __future__ import annotations

import pytest

from tests import conftest


def test_without_a_budget_no_heavy_test_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HVD_HEAVY_BUDGET_MIN", raising=False)
    assert conftest.heavy_budget_spent(conftest.STARTED + 10 * 3600) is None


def test_a_heavy_test_starts_before_the_budget_is_spent_and_is_skipped_after(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HVD_HEAVY_BUDGET_MIN", "45")
    assert conftest.heavy_budget_spent(conftest.STARTED + 44.9 * 60) is None
    why = conftest.heavy_budget_spent(conftest.STARTED + 46 * 60)
    assert why == ("the heavy set's time budget is spent (46 of HVD_HEAVY_BUDGET_MIN=45 minutes): run it whole with "
                   "tests/run.sh --heavy")
