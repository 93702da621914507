"""The quotas' values (docs/quotas.md): an owner's caps checked, the server's flag parsed over
the defaults, and the errors carrying what a client needs (the cap, when to retry)."""

from __future__ import annotations

import pytest

from outlive.domain.errors import InvalidInput
from outlive.domain.quotas import (
    DEFAULT_QUOTAS,
    HistoryTooLarge,
    QuotaExceeded,
    parse_quota_caps,
    parse_quotas_text,
)


def test_the_defaults_are_documented_and_far_above_a_person():
    assert DEFAULT_QUOTAS.to_dict() == {
        "running": 1000, "queued": 10_000, "creates_per_minute": 600,
        "history_bytes": 16 * 1024 * 1024, "end_user_running": 64, "end_user_queued": 1000,
        "end_user_creates_per_minute": 60}


def test_the_servers_flag_replaces_defaults_cap_by_cap():
    q = parse_quotas_text(" running=64, end_user_queued=5 ")
    assert (q.running, q.end_user_queued, q.queued) == (64, 5, 10_000)
    assert parse_quotas_text(None) == parse_quotas_text("") == DEFAULT_QUOTAS
    for bad in ("running", "running=", "running=-1", "running=1.5", "speed=1", "running=٣"):
        with pytest.raises(InvalidInput):
            parse_quotas_text(bad)


def test_owner_caps_are_checked():
    assert parse_quota_caps(None) is None and parse_quota_caps({}) is None
    assert parse_quota_caps({"queued": 0}) == {"queued": 0}
    for bad in ({"queued": None}, {"queued": 10**13}, {"x": 1}, "running=1"):
        with pytest.raises(InvalidInput):
            parse_quota_caps(bad)


def test_the_errors_say_the_cap_and_when_to_retry():
    e = QuotaExceeded("creates_per_minute", 600, retry_after=12.2)
    assert (e.http_status, e.code, e.details) == (
        429, "QUOTA_EXCEEDED", {"quota": "creates_per_minute", "limit": 600, "retry_after": 13})
    assert "retry_after" not in QuotaExceeded("queued", 5).details
    h = HistoryTooLarge(100, 90)
    assert (h.http_status, h.code, h.details) == (
        413, "HISTORY_TOO_LARGE", {"limit_bytes": 100, "history_bytes": 90})
