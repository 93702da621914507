"""The NOTIFY payload carries every flag of a notice, the cancel bit included."""

from __future__ import annotations

import itertools

from outlive.store import Notice
from outlive.store.postgres import decode_notices, encode_notices


def test_every_combination_of_flags_survives_the_payload():
    notices = [
        Notice(f"s{i}", "o1", *flags)
        for i, flags in enumerate(itertools.product([False, True], repeat=4))
    ]
    assert decode_notices(encode_notices(notices)) == notices
