"""Timing and size rules of the client side (docs/architecture.md §6), shared with the web page.

The web page repeats these numbers in JS; keep the two in step. Seconds unless stated.
"""

from __future__ import annotations

__all__ = [
    "BACKOFF_JITTER",
    "BACKOFF_MAX",
    "BACKOFF_MIN",
    "DEFAULT_URL",
    "DEGRADED_AFTER",
    "HEALTH_SAMPLE",
    "JOURNAL_LIMIT",
    "MALFORMED_LIMIT",
    "RECONCILE_INTERVAL",
    "RECONCILE_JITTER",
]

RECONCILE_INTERVAL = 60
"""The watcher re-fetches the whole session list this often…"""
RECONCILE_JITTER = 15
"""…plus a uniformly random 0 to this many seconds, so many clients do not fetch in step."""
MALFORMED_LIMIT = 5
"""This many consecutive owner events that fail to parse or validate force a full fetch."""
JOURNAL_LIMIT = 1024
"""Owner events kept while a fetch is in flight, to replay on top of it; one more and the
journal is dropped and the fetch starts over."""
HEALTH_SAMPLE = 5
"""The owner stream's state is sampled this often."""
DEGRADED_AFTER = 9
"""This many consecutive samples in state "connecting" report the stream degraded."""
BACKOFF_MIN = 0.1
"""First reconnect delay; it doubles on every failed attempt…"""
BACKOFF_MAX = 5.0
"""…up to this; it starts over after a successful connection."""
BACKOFF_JITTER = 0.5
"""Each delay is drawn uniformly from [d * (1 - BACKOFF_JITTER), d], d the nominal delay."""

DEFAULT_URL = "http://127.0.0.1:8765"
"""Where the client looks when neither `base_url` nor `OUTLIVE_URL` is given."""
