"""`new_id`: 26 Crockford base32 characters of a 48-bit time and an 80-bit counter, sortable."""

from __future__ import annotations

import random
import time

import pytest

from outlive.domain import model
from outlive.domain.model import new_id

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def spelled(value: int) -> str:
    """The reference spelling: five bits per character, most significant first."""
    return "".join(CROCKFORD[(value >> (5 * i)) & 31] for i in reversed(range(26)))


def test_ids_spell_time_and_counter_in_crockford_base32(monkeypatch: pytest.MonkeyPatch) -> None:
    ms = 1_764_590_000_123
    monkeypatch.setattr(model, "_last_ms", ms)
    monkeypatch.setattr(model, "_last_rand", (1 << 80) - 2)
    monkeypatch.setattr(time, "time_ns", lambda: ms * 1_000_000)
    prefix, body = new_id("msg").split("_")
    assert prefix == "msg" and body == spelled((ms << 80) | ((1 << 80) - 1))
    assert new_id("msg") == "msg_" + spelled(ms << 80)  # the counter wraps within its 80 bits


def test_ids_sort_by_creation() -> None:
    ids = [new_id("x") for _ in range(2000)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(len(i) == 28 and set(i[2:]) <= set(CROCKFORD) for i in ids)


def test_the_spelling_covers_every_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    for _ in range(500):
        ms, rand = random.getrandbits(48), random.getrandbits(80)
        monkeypatch.setattr(model, "_last_ms", ms)
        monkeypatch.setattr(model, "_last_rand", rand - 1)
        monkeypatch.setattr(time, "time_ns", lambda ms=ms: ms * 1_000_000)
        assert new_id("t") == "t_" + spelled((ms << 80) | rand)
