"""A webhook receiver for tests, run as its own process:

    python tests/support/webhook_receiver.py PORT LOG [STALL_FIRST_SECONDS]

Every request is appended to LOG as one JSON line (`headers`, `body`) as soon as it has been
read, then answered 200 — the first one only after STALL_FIRST_SECONDS, so a test can kill
the sender while a delivery is in flight. Listens on 127.0.0.1; prints `listening` when ready.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

_lock = threading.Lock()
_seen = 0


def main() -> None:
    port, log = int(sys.argv[1]), Path(sys.argv[2])
    stall = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            global _seen
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            record: dict[str, Any] = {"path": self.path, "body": body.decode(),
                                      "headers": {k.lower(): v for k, v in self.headers.items()}}
            with _lock:
                _seen += 1
                first = _seen == 1
                with log.open("a") as f:
                    f.write(json.dumps(record) + "\n")
            if first and stall:
                time.sleep(stall)
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    print("listening", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
