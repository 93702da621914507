"""The multi-host test bed needs root: without it the partition tests skip and say why, but
under CI=true they fail, so a CI runner without the rights cannot pass by skipping them."""

from __future__ import annotations

import pytest

from tests.support import hosts


def test_not_root_skips_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hosts.os, "geteuid", lambda: 1000)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="needs root"):
        hosts.require_root()


def test_not_root_under_ci_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hosts.os, "geteuid", lambda: 1000)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        hosts.require_root()
