"""API keys: how they are made and how they are stored (only the hash ever reaches the Store).

A key is `olk_` followed by 32 URL-safe random characters (192 bits of entropy), so a plain
SHA-256 is enough: there is nothing to brute-force that a slow hash would protect.
"""

from __future__ import annotations

import hashlib
import secrets

__all__ = ["KEY_PREFIX", "hash_key", "looks_like_key", "new_key"]

KEY_PREFIX = "olk_"
_RANDOM_CHARS = 32


def new_key() -> str:
    """A fresh API key. Show it once; store `hash_key(key)`."""
    # token_urlsafe(24) gives exactly 32 characters of [A-Za-z0-9_-].
    return KEY_PREFIX + secrets.token_urlsafe(_RANDOM_CHARS * 3 // 4)


def hash_key(key: str) -> str:
    """The stored form of a key: the SHA-256 of its UTF-8 bytes, lower-case hex."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def looks_like_key(value: str) -> bool:
    """Cheap shape check before any lookup (not a security boundary)."""
    return 0 < len(value) <= 200 and value.isprintable()
