"""The Store's input checks, without a database: what is refused, with which error, and what
the accepted input becomes."""

from __future__ import annotations

from dataclasses import replace

import orjson
import pytest

from outlive.domain import InvalidInput, NewEvent, Status, TooLarge
from outlive.domain.model import MAX_TEXT_CHARS, MAX_TITLE_CHARS, Delivery
from outlive.domain.status import LeaseState
from outlive.store import _validation as v
from outlive.store._base import lifecycle
from outlive.store._lifecycle import held

SES = "ses_" + "0" * 26


@pytest.mark.parametrize("text", ["", "   ", "\n\t", "a\x00b", 5, None])
def test_text_must_be_a_non_empty_string_without_nul(text):
    with pytest.raises(InvalidInput):
        v.check_text(text)


def test_text_over_the_limit_is_too_large_not_just_invalid():
    v.check_text("x" * MAX_TEXT_CHARS)
    with pytest.raises(TooLarge, match=f"limit is {MAX_TEXT_CHARS}"):
        v.check_text("x" * (MAX_TEXT_CHARS + 1))


def test_titles_are_stripped_and_bounded():
    assert v.check_title("  a title \n") == "a title"
    assert v.check_title("t" * MAX_TITLE_CHARS) == "t" * MAX_TITLE_CHARS
    for bad in ["", "  ", "a\x00", "t" * (MAX_TITLE_CHARS + 1)]:
        with pytest.raises(InvalidInput) as info:
            v.check_title(bad)
        assert not isinstance(info.value, TooLarge)


def test_a_generated_title_is_cut_to_the_limit_rather_than_refused():
    assert v.auto_title("t" * (MAX_TITLE_CHARS + 50)) == "t" * MAX_TITLE_CHARS
    assert v.auto_title("   ") is None  # nothing to show: no title
    assert v.auto_title("\u200b\u2060\ufeff") is None
    assert v.auto_title("\u202eabc\u202c\x00\ud800") == "abc\ufffd\ufffd"


def test_titles_lose_bidi_controls_and_must_show_something():
    assert v.check_title("\u2067txt.exe\u2069 \u200e") == "txt.exe"
    assert v.check_title("a\u200bb") == "a\u200bb"  # zero-width inside a visible title stays
    for bad in ["\u200b", " \u200c\u200d ", "\u202a\u202c", "\ud800x"]:
        with pytest.raises(InvalidInput):
            v.check_title(bad)


def test_strings_and_metadata_refuse_nul_and_lone_surrogates():
    v.check_string("fine 😀 \u202e", "x")
    for bad in ["\x00", "a\ud800", "\udfff"]:
        with pytest.raises(InvalidInput, match="x must not"):
            v.check_string(bad, "x")
    v.check_metadata({"a": [1, 2.5, None, True, {"b": "😀"}]})
    for bad in [{"\ud800": 1}, {"a": {"b": ["\x00"]}}, {"a": float("nan")}, {1: "x"},
                {"a": object()}]:
        with pytest.raises(InvalidInput, match="metadata"):
            v.check_metadata(bad)
    deep: dict[str, object] = {}
    for _ in range(40):
        deep = {"d": deep}
    with pytest.raises(InvalidInput, match="nested"):
        v.check_metadata(deep)


def test_session_arguments():
    assert v.check_session_args("demo", "m", "hi", " T ", 30.0) == "T"
    assert v.check_session_args("demo", "m", None, None, None) is None
    for args in [("", "m", None, None, None), ("demo", "", None, None, None),
                 ("demo", "m", "", None, None), ("demo", "m", None, "", None),
                 ("demo", "m", None, None, 0), ("demo", "m", None, None, -1.0),
                 ("demo", "m", None, None, 30 * 86400 + 1),
                 ("demo", "m", None, None, 1e300), ("demo", "m", None, None, float("inf")),
                 ("d\x00", "m", None, None, None), ("demo", "m\ud800", None, None, None)]:
        with pytest.raises(InvalidInput):
            v.check_session_args(*args)


def test_list_arguments():
    assert v.check_list(None, 1, None) is None
    assert v.check_list("running", v.MAX_LIST_LIMIT, SES) is Status.RUNNING
    assert v.check_list(Status.QUEUED, 50, None) is Status.QUEUED
    with pytest.raises(InvalidInput, match="unknown status 'done'; use one of queued"):
        v.check_list("done", 50, None)
    for limit in [0, v.MAX_LIST_LIMIT + 1, 2.0, "5"]:
        with pytest.raises(InvalidInput, match="limit must be between 1 and 500"):
            v.check_list(None, limit, None)
    for cursor in ["", "ses_short", "ses_" + "a" * 26, "key_" + "0" * 26, SES + "0"]:
        with pytest.raises(InvalidInput, match="cursor"):
            v.check_list(None, 50, cursor)


def test_modes_a_caller_may_ask_for():
    assert [v.parse_mode(m) for m in ("steer", "queue", "interrupt", "reject")] == [
        Delivery.STEER, Delivery.QUEUE, Delivery.INTERRUPT, Delivery.REJECT]
    assert v.parse_mode(Delivery.QUEUE) is Delivery.QUEUE
    for bad in ["start", Delivery.START, "later", ""]:
        with pytest.raises(InvalidInput, match="use steer, queue, interrupt or reject"):
            v.parse_mode(bad)


def test_client_request_ids_and_owner_names_are_bounded():
    v.check_client_request_id(None)
    v.check_client_request_id("x" * 200)
    for bad in ["", "x" * 201, "a\x00", "\udc00"]:
        with pytest.raises(InvalidInput):
            v.check_client_request_id(bad)
    v.check_owner_name("x" * 100)
    for bad in ["", "x" * 101]:
        with pytest.raises(InvalidInput):
            v.check_owner_name(bad)


def test_event_types_read_windows_and_settle_statuses():
    v.check_event_types([NewEvent("stage", {}), NewEvent("session_end", {})])
    with pytest.raises(InvalidInput, match="unknown event type 'bogus'"):
        v.check_event_types([NewEvent("stage", {}), NewEvent("bogus", {})])
    v.check_read_window(0, 1)
    for after, limit in [(-1, 10), (0, 0)]:
        with pytest.raises(InvalidInput):
            v.check_read_window(after, limit)
    assert v.settle_status("failed") is Status.FAILED
    for status in ["queued", Status.RUNNING]:
        with pytest.raises(InvalidInput, match="cannot settle"):
            v.settle_status(status)
    with pytest.raises(ValueError):
        v.settle_status("done")


def test_scrub_replaces_nul_everywhere_and_keeps_clean_values_as_they_are():
    clean = {"a": ["x", {"b": "y"}], "n": 1}
    assert v.scrub(clean) is clean
    dirty = {"a": ["x\x00", {"b": "\x00y"}], "n": 1, "k": "ok"}
    out = v.scrub(dirty)
    assert out == {"a": ["x\ufffd", {"b": "\ufffdy"}], "n": 1, "k": "ok"}
    assert dirty["a"][0] == "x\x00"  # the input is not changed
    assert out["k"] is dirty["k"]
    assert v.scrub({"\ud800": ["a\udfff"]}) == {"\ufffd": ["a\ufffd"]}


def test_scrub_turns_non_finite_numbers_into_null_and_keeps_the_rest():
    assert v.scrub({"a": float("nan"), "b": [float("-inf"), 2.5, 3]}) == {
        "a": None, "b": [None, 2.5, 3]}
    clean = {"f": 1.5, "i": 2**70}
    assert v.scrub(clean) is clean


@pytest.mark.parametrize("value", [
    {"text": "snow ☃ “q”", "n": [1, 2.5, True, None, {"deep": []}], "s": ""},
    {"a": ["x\x00", {"b": "\x00y"}], "k": "ok"},
    {"\ud800": ["a\udfff"], "ok": "é"},
    {"nan": float("nan"), "l": [float("inf"), -float("inf"), 1.5, None]},
    {"text": "a \\u0000 b", "none": None},  # a backslash, not a NUL
    {"big": 2**70, "nul": "\x00"},
    {"pair": (1, "x"), "none": None},
    {1: "not a string key"},
    "plain", 3, None, [],
])
def test_scrub_json_is_scrub_and_its_json(value):
    """The one-pass check says what `scrub` says, and its JSON is that of the clean data
    (None only where orjson cannot write it); clean data is handed back as it is."""
    clean, raw = v.scrub_json(value)
    expected = v.scrub(value)
    assert repr(clean) == repr(expected)
    if expected is value:
        assert clean is value
    try:
        assert raw == orjson.dumps(expected)
    except TypeError:
        assert raw is None


@pytest.mark.parametrize("row", [
    {"status": "running", "attempt": 2, "fence": 3, "lease_worker": "w", "lease_expired": False,
     "cancel_requested_at": None, "deleted_at": None, "attention": None,
     "compact_requested_at": None, "last_input_seq": 4, "delivered_input_seq": 4,
     "awaiting_children": 0},
    {"status": "running", "attempt": 1, "fence": 1, "lease_worker": "w", "lease_expired": True,
     "cancel_requested_at": 5.0, "deleted_at": 6.0, "attention": "approval",
     "compact_requested_at": 7.0, "last_input_seq": 5, "delivered_input_seq": 4,
     "awaiting_children": 0},
    {"status": "queued", "attempt": 0, "fence": 0, "lease_worker": None,
     "lease_expired": None, "cancel_requested_at": None, "deleted_at": None,
     "attention": "approval", "compact_requested_at": None, "last_input_seq": 0,
     "delivered_input_seq": 0, "awaiting_children": 1},
])
def test_held_is_the_rows_lifecycle_with_the_lease_held(row):
    """`held` builds at once what `lifecycle` would give with the lease held."""
    assert held(row) == replace(lifecycle(row), lease=LeaseState.HELD)
