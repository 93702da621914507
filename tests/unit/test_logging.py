"""The server's log setup: httpx's per-request INFO lines (the full URL of every webhook and
model server request, whose path may hold a receiver's secret) are not logged."""

from __future__ import annotations

import logging

from outlive.config import configure_logging


def test_httpx_request_lines_are_not_logged_at_info() -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        configure_logging("INFO")
        for name in ("httpx", "httpcore"):
            assert not logging.getLogger(name).isEnabledFor(logging.INFO), name
        assert logging.getLogger("outlive.webhooks").isEnabledFor(logging.INFO)
        configure_logging("DEBUG")  # asking for more does not bring them back either
        assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
        for name in ("httpx", "httpcore"):
            logging.getLogger(name).setLevel(logging.NOTSET)
