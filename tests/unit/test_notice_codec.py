"""The NOTIFY payload carries every flag of a notice, the cancel bit included, and never
reaches PostgreSQL's 8,000-byte limit however many sessions one commit touches."""

from __future__ import annotations

import itertools

from outlive.domain.model import new_id
from outlive.store import Notice
from outlive.store._pg_payload import MAX_PAYLOADS, PAYLOAD_LIMIT
from outlive.store.postgres import decode_notices, encode_notices


def test_every_combination_of_flags_survives_the_payload():
    notices = [
        Notice(f"s{i}", "o1", *flags)
        for i, flags in enumerate(itertools.product([False, True], repeat=4))
    ]
    assert [n for p in encode_notices(notices) for n in decode_notices(p)] == notices
    assert len(encode_notices(notices)) == 1


def test_a_thousand_notices_split_into_payloads_under_the_limit_in_order():
    notices = [Notice(new_id("s"), new_id("o"), work=i % 2 == 0, events=True, owner=i % 3 == 0)
               for i in range(1000)]
    payloads = encode_notices(notices)
    assert 1 < len(payloads) <= MAX_PAYLOADS
    assert all(len(p.encode()) <= PAYLOAD_LIMIT for p in payloads)
    assert [n for p in payloads for n in decode_notices(p)] == notices
    # each payload is filled before the next one starts
    assert all(len(p.encode()) > PAYLOAD_LIMIT - 200 for p in payloads[:-1])


def test_past_the_payload_cap_one_rescan_notice_is_sent_instead():
    notices = [Notice(new_id("s"), new_id("o"), events=True) for _ in range(20_000)]
    payloads = encode_notices(notices)
    assert len(payloads) == 1
    assert [n.is_rescan for n in decode_notices(payloads[0])] == [True]


def test_no_notices_send_nothing():
    assert encode_notices([]) == []


def test_each_flag_goes_to_its_channel_and_a_rescan_to_both():
    from outlive.store._pg_payload import CHANNEL, WORK_CHANNEL, route_notices

    both = Notice("s1", "o1", work=True, events=True, owner=True, cancel=True)
    reads_only = Notice("s2", "o1", events=True)
    channels, payloads = route_notices([both, reads_only, Notice.rescan()])
    heard = {c: [n for c2, p in zip(channels, payloads, strict=True) if c2 == c
                 for n in decode_notices(p)] for c in (WORK_CHANNEL, CHANNEL)}
    assert heard[WORK_CHANNEL] == [Notice("s1", "o1", work=True, cancel=True), Notice.rescan()]
    assert heard[CHANNEL] == [Notice("s1", "o1", events=True, owner=True), reads_only,
                              Notice.rescan()]
    assert route_notices([]) == ([], [])
