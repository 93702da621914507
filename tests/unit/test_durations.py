"""Durations on the command line and in the environment (`--retain 30d`, `--compact-after 5m`)."""

from __future__ import annotations

import pytest

from outlive.config import parse_duration


@pytest.mark.parametrize(("text", "seconds"), [
    ("30d", 30 * 86400.0), ("12h", 43200.0), ("5m", 300.0), ("45s", 45.0), ("90", 90.0),
    ("1.5h", 5400.0), ("2w", 14 * 86400.0), (" 10M ", 600.0), ("0s", 0.0),
])
def test_durations_in_units(text: str, seconds: float):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", [None, "", "off", "never", "Forever", "none"])
def test_forever(text: str | None):
    assert parse_duration(text) is None


@pytest.mark.parametrize("text", ["soon", "d", "-5m", "5x", "1e400h", "nan"])
def test_nonsense_is_refused_with_the_accepted_forms(text: str):
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)
