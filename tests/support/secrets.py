"""The one server key every test store and every child process of the tests seals webhook
secrets with (`OUTLIVE_SECRET_KEY` in `processes.child_env`), so a secret one writes the
others open, as on a deployment where every process is given the same key."""

from __future__ import annotations

import base64

from outlive.domain.secret_box import SecretBox, parse_key

__all__ = ["TEST_SECRET_KEY", "shared_box"]

TEST_SECRET_KEY = base64.urlsafe_b64encode(bytes(range(32))).decode().rstrip("=")


def shared_box() -> SecretBox:
    return SecretBox([parse_key(TEST_SECRET_KEY)], hint="tests: use tests.support.secrets")
