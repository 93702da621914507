"""A real webhook receiver process for tests (tests/support/webhook_receiver.py), and the
Standard Webhooks check written from the spec, independently of outlive's own signing."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.processes import free_port

__all__ = ["Receiver", "verify"]

_SCRIPT = Path(__file__).with_name("webhook_receiver.py")


def verify(secret: str, headers: dict[str, str], body: str) -> bool:
    """What a receiver does: HMAC-SHA256 over "{id}.{timestamp}.{body}" with the base64-decoded
    part of the secret after `whsec_`, compared with each `v1,` signature in the header."""
    key = base64.b64decode(secret.split("_", 1)[1])
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.{body}".encode()
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    given = [s.split(",", 1)[1] for s in headers["webhook-signature"].split()
             if s.startswith("v1,")]
    return any(hmac.compare_digest(expected, g) for g in given)


class Receiver:
    """`python webhook_receiver.py PORT LOG [STALL]`; `requests()` reads what it recorded."""

    def __init__(self, folder: Path, *, port: int | None = None, stall: float = 0.0) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.log = folder / f"receiver-{self.port}.jsonl"
        self.stall = stall
        self.proc: subprocess.Popen[bytes] | None = None

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, str(_SCRIPT), str(self.port), str(self.log), str(self.stall)],
            stdout=subprocess.PIPE)

    async def start(self) -> Receiver:
        """Start it and wait until it listens (a fraction of a second)."""
        self.proc = self._spawn()
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(self.proc.stdout.readline), 10)
        assert line.strip() == b"listening", line
        return self

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(5)
            if self.proc.stdout is not None:
                self.proc.stdout.close()
        self.proc = None

    def requests(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]
