"""Webhooks, the pure part: event names, payloads, Standard Webhooks signing, target rules.

A delivery is signed the Standard Webhooks way (https://www.standardwebhooks.com): the
headers `webhook-id` (the message id, the same on every retry, so a receiver can dedupe),
`webhook-timestamp` (Unix seconds of this attempt) and `webhook-signature`
(`v1,` + base64 HMAC-SHA256 of `"{id}.{timestamp}.{body}"`, keyed with the bytes the secret
encodes after its `whsec_` prefix). Whether a host is a private target is decided here from
the addresses it resolves to; resolving is the caller's I/O.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import secrets
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from .errors import InvalidInput
from .model import TERMINAL, Status

__all__ = [
    "ATTENTION_EVENT",
    "BUDGET_EVENT",
    "EVENTS",
    "SCHEDULE_EVENT",
    "SECRET_PREFIX",
    "check_events",
    "check_secret",
    "check_url",
    "ended_event",
    "is_private",
    "new_secret",
    "payload",
    "redacted",
    "sign",
    "signature_headers",
]

SECRET_PREFIX = "whsec_"
ATTENTION_EVENT = "session.attention"
BUDGET_EVENT = "session.budget_reached"
SCHEDULE_EVENT = "schedule.fired"
EVENTS = frozenset({f"session.{s.value}" for s in TERMINAL}
                   | {ATTENTION_EVENT, BUDGET_EVENT, SCHEDULE_EVENT})
"""`session.succeeded|failed|cancelled` (the session ended), `session.attention` (what
the session waits on a person for changed, including back to nothing) and
`session.budget_reached` (a run stopped at a budget: which limit, whose, what was used) and
`schedule.fired` (a schedule fired: which, its fire time, what the fire did)."""
_MAX_URL = 2000


def ended_event(status: Status) -> str:
    return f"session.{status.value}"


def new_secret() -> str:
    """`whsec_` + base64 of 24 random bytes: shown once, kept by the receiver to verify."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode("ascii")


def _key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)


def check_secret(secret: str) -> str:
    """A secret given by the owner must be `whsec_` + base64 of 24 to 64 bytes."""
    if not secret.startswith(SECRET_PREFIX):
        raise InvalidInput("a webhook secret starts with whsec_ followed by base64")
    try:
        key = _key(secret)
    except ValueError as exc:
        raise InvalidInput("a webhook secret is whsec_ followed by base64") from exc
    if not 24 <= len(key) <= 64:
        raise InvalidInput("a webhook secret encodes 24 to 64 bytes")
    return secret


def check_events(events: Sequence[str]) -> list[str]:
    if not events:
        raise InvalidInput("name at least one event: " + ", ".join(sorted(EVENTS)))
    unknown = [e for e in events if e not in EVENTS]
    if unknown:
        raise InvalidInput(f"unknown webhook events {unknown}; use {', '.join(sorted(EVENTS))}")
    return sorted(set(events))


def check_url(url: str) -> str:
    """Only absolute http(s) URLs with a host (where they point is checked separately)."""
    parts = urlsplit(url)
    if len(url) > _MAX_URL or parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput("a webhook URL is an absolute http:// or https:// URL")
    return url


_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")


def _embedded(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address reaches through a translation or a tunnel: IPv4-
    mapped (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`), NAT64 (`64:ff9b::a.b.c.d`),
    6to4 (`2002:AABB:CCDD::`) and Teredo (its server and its client)."""
    out: list[ipaddress.IPv4Address] = []
    if ip.ipv4_mapped is not None:
        out.append(ip.ipv4_mapped)
    if ip in _NAT64 or (int(ip) >> 32 == 0 and int(ip) > 1):
        out.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    if ip.sixtofour is not None:
        out.append(ip.sixtofour)
    if ip.teredo is not None:
        out.extend(ip.teredo)
    return out


def is_private(addresses: Iterable[str]) -> bool:
    """Whether any address is loopback, private, link-local or otherwise not public, itself
    or through the IPv4 address it embeds (NAT64, 6to4, Teredo, IPv4-mapped): a target there
    could reach what only the server can (its metadata service, its database). An address
    that does not parse counts as private: nothing unknown is let through."""
    for text in addresses:
        try:
            ip = ipaddress.ip_address(text.split("%", 1)[0])
        except ValueError:
            return True
        reached: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = [ip]
        if isinstance(ip, ipaddress.IPv6Address):
            if ip in _NAT64_LOCAL:  # a local NAT64 prefix: where it leads is not knowable
                return True
            reached += _embedded(ip)
        if any(not a.is_global or a.is_multicast for a in reached):
            return True
    return False


def redacted(url: str) -> str:
    """The URL as logs and traces show it: scheme, host and port only (a path or a query may
    carry a secret of the receiver's)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}/…" if parts.path not in ("", "/") or parts.query \
        else f"{parts.scheme}://{host}{port}/"


def payload(event: str, session_id: str, data: dict[str, Any], at: datetime | None = None
            ) -> str:
    """The body every endpoint receives for one event, fixed when the event happens."""
    when = (at or datetime.now(UTC)).isoformat().replace("+00:00", "Z")
    return json.dumps({"type": event, "timestamp": when,
                       "data": {"session_id": session_id, **data}}, separators=(",", ":"))


def sign(secret: str, msg_id: str, timestamp: int, body: str) -> str:
    mac = hmac.new(_key(secret), f"{msg_id}.{timestamp}.{body}".encode(), hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode("ascii")


def signature_headers(secret: str, msg_id: str, timestamp: int, body: str) -> dict[str, str]:
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(secret, msg_id, timestamp, body),
        "content-type": "application/json",
    }
