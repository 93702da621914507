"""The sealed form of a secret (`domain.secret_box`): pure, no database."""

from __future__ import annotations

import pytest

from outlive.domain.secret_box import (
    PREFIX,
    SecretBox,
    SecretKeyMissing,
    SecretUnreadable,
    key_id,
    key_of,
    new_key,
    parse_key,
)

A, B = parse_key(new_key()), parse_key(new_key())


def test_a_sealed_secret_names_its_key_and_opens_only_on_its_own_row():
    box = SecretBox([A])
    sealed = box.seal("whsec_abc", "wh_1")
    assert sealed.startswith(f"{PREFIX}{key_id(A)}:") and "abc" not in sealed
    assert key_of(sealed) == key_id(A) and key_of("whsec_abc") is None
    assert box.open(sealed, "wh_1") == "whsec_abc"
    assert box.seal("whsec_abc", "wh_1") != sealed  # a new nonce every time
    with pytest.raises(SecretUnreadable):
        box.open(sealed, "wh_2")
    tampered = sealed[:-4] + ("AAAA" if not sealed.endswith("AAAA") else "BBBB")
    with pytest.raises(SecretUnreadable):
        box.open(tampered, "wh_1")


def test_the_current_key_seals_and_older_ones_still_open():
    old = SecretBox([A]).seal("whsec_old", "wh_1")
    ring = SecretBox([B, A], hint="set IT")
    assert ring.current == key_id(B) and ring.key_ids == [key_id(B), key_id(A)]
    assert ring.open(old, "wh_1") == "whsec_old"
    assert key_of(ring.seal("whsec_new", "wh_2")) == key_id(B)
    with pytest.raises(SecretKeyMissing) as raised:
        SecretBox([B], hint="set IT").open(old, "wh_1")
    assert key_id(A) in raised.value.message and raised.value.message.endswith("; set IT")


def test_a_box_takes_the_keys_its_reload_gives_when_it_meets_an_unknown_one():
    keys = [[A]]
    box = SecretBox([A], reload=lambda: keys[0])
    later = SecretBox([B]).seal("whsec_x", "wh_1")
    keys[0] = [B, A]  # another process rotated the file
    assert box.open(later, "wh_1") == "whsec_x"
    assert box.current == key_id(B)


@pytest.mark.parametrize("text", ["", "not base64!", "c2hvcnQ=", "A" * 60])
def test_a_key_is_base64_of_32_bytes(text):
    with pytest.raises(ValueError, match="32 bytes"):
        parse_key(text)


def test_a_key_reads_in_either_base64_alphabet_with_or_without_padding():
    import base64

    raw = bytes(range(200, 232))
    for text in (base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode(),
                 base64.urlsafe_b64encode(raw).decode().rstrip("=")):
        assert parse_key(text) == raw
    assert len(key_id(raw)) == 12 and key_id(raw) != key_id(A)
