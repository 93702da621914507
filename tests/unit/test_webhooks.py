"""The pure part of webhooks: which targets are private, what a secret, URL and event list
must be, the signature against a value computed by hand, and the retry schedule."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from outlive.domain import InvalidInput
from outlive.domain.webhooks import (
    check_events,
    check_secret,
    check_url,
    is_private,
    new_secret,
    redacted,
    sign,
)
from outlive.runtime.settings import RuntimeSettings
from outlive.runtime.webhooks import backoff


@pytest.mark.parametrize(("addresses", "private"), [
    (["93.184.216.34"], False),
    (["2606:2800:220:1:248:1893:25c8:1946"], False),
    (["127.0.0.1"], True),
    (["10.1.2.3"], True),
    (["192.168.0.10"], True),
    (["172.16.5.4"], True),
    (["169.254.169.254"], True),  # cloud metadata
    (["::1"], True),
    (["fe80::1%eth0"], True),
    (["fd00::1"], True),
    (["::ffff:127.0.0.1"], True),  # IPv4-mapped loopback
    (["0.0.0.0"], True),
    (["93.184.216.34", "10.0.0.1"], True),  # any private address refuses the name
    # through a translation or a tunnel (the probe's bypasses, then public ones that pass)
    (["64:ff9b::a9fe:a9fe"], True),  # NAT64 of 169.254.169.254
    (["64:ff9b::7f00:1"], True),  # NAT64 of 127.0.0.1
    (["64:ff9b:1::5db8:d822"], True),  # a local-use NAT64 prefix: unknowable, refused
    (["2002:a9fe:a9fe::1"], True),  # 6to4 of 169.254.169.254
    (["2002:c0a8:0001::1"], True),  # 6to4 of 192.168.0.1
    (["2001:0:4136:e378:8000:63bf:3fff:fdd2"], True),  # Teredo
    (["::7f00:1"], True),  # IPv4-compatible 127.0.0.1
    (["::ffff:a9fe:a9fe"], True),  # IPv4-mapped metadata, written in hex
    (["64:ff9b::5db8:d822"], False),  # NAT64 of 93.184.216.34
    (["2002:5db8:d822::1"], False),  # 6to4 of 93.184.216.34
    (["not an address"], True),  # what does not parse is not let through
])
def test_private_targets(addresses, private):
    assert is_private(addresses) is private


def test_urls_are_redacted_to_their_origin():
    assert redacted("https://hooks.example.com/T0/B1/secret?token=x") == (
        "https://hooks.example.com/…")
    assert redacted("http://[2606:2800::1]:8080/") == "http://[2606:2800::1]:8080/"
    assert redacted("http://example.com") == "http://example.com/"


def test_secrets_urls_and_events_are_checked():
    secret = new_secret()
    assert check_secret(secret) == secret and len(base64.b64decode(secret[6:])) == 24
    for bad in ("abc", "whsec_!!!", "whsec_" + base64.b64encode(b"short").decode()):
        with pytest.raises(InvalidInput):
            check_secret(bad)
    for bad in ("ftp://x.example/", "/relative", "http:///nohost", "javascript:alert(1)"):
        with pytest.raises(InvalidInput):
            check_url(bad)
    assert check_events(["session.failed", "session.failed"]) == ["session.failed"]
    for bad in ([], ["session.created"]):
        with pytest.raises(InvalidInput):
            check_events(bad)


def test_the_signature_is_hmac_sha256_over_id_timestamp_body():
    key = bytes(range(32))
    secret = "whsec_" + base64.b64encode(key).decode()
    mac = hmac.new(key, b'msg_1.1700000000.{"a":1}', hashlib.sha256).digest()
    assert sign(secret, "msg_1", 1700000000, '{"a":1}') == "v1," + base64.b64encode(
        mac).decode()


def test_backoff_doubles_up_to_its_cap():
    s = RuntimeSettings(webhook_backoff=1.0, webhook_backoff_max=10.0)
    delays = [backoff(n, s) for n in range(1, 7)]
    for got, want in zip(delays, [1, 2, 4, 8, 10, 10], strict=True):
        assert want * 0.9 <= got <= want * 1.1
