#!/usr/bin/env python3
"""A minimal Compactor webhook receiver (stdlib only): verifies the signature, answers hooks.

Run:  COMPACTOR_WEBHOOK_SECRET=s3cret python examples/webhook_receiver.py --port 8787
and point the workers at it: COMPACTOR_HOOKS_WEBHOOK_URL=http://127.0.0.1:8787/hooks
                             COMPACTOR_HOOKS_WEBHOOK_SECRET=s3cret

Every request carries ``X-Compactor-Timestamp`` (unix seconds) and ``X-Compactor-Signature:
sha256=<hex>``, the HMAC-SHA256 of ``<timestamp>.<raw body>`` under the shared secret. A request
with a bad signature or a timestamp older than five minutes is refused with 401 and never
reaches the handler. The demo handler below adds one context line to every compaction and
refuses to compact sessions whose id starts with ``keep-``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import hmac
import json
import os
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Handler = Callable[[str, dict[str, Any]], "dict[str, Any] | None"]
MAX_SKEW_S = 300


def verify(secret: bytes, timestamp: str, body: bytes, signature: str, *, now: float | None = None) -> bool:
    """True if ``signature`` signs ``timestamp.body`` and the timestamp is recent."""
    try:
        sent = int(timestamp)
    except ValueError:
        return False
    if abs((time.time() if now is None else now) - sent) > MAX_SKEW_S:
        return False
    expected = hmac.new(secret, timestamp.encode("ascii") + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest("sha256=" + expected, signature)


def demo_handler(event: str, payload: dict[str, Any]) -> dict[str, Any] | None:
    session_id = payload.get("sessionId") or ""
    if event == "session_before_compact" and session_id.startswith("keep-"):
        return {"cancel": True}
    if event == "session_compacting":
        return {"context": [f"Session {session_id} belongs to the demo platform."]}
    if event in ("session_compact", "session_tree"):
        print(f"{event}: {json.dumps(payload)[:200]}")
    return None


def make_server(secret: bytes, handler: Handler = demo_handler, *, host: str = "127.0.0.1",
                port: int = 0) -> ThreadingHTTPServer:
    """A server that verifies every request and answers with ``handler(event, payload)``."""

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            timestamp = self.headers.get("X-Compactor-Timestamp", "")
            signature = self.headers.get("X-Compactor-Signature", "")
            if not verify(secret, timestamp, body, signature):
                self._reply(401, {"error": "bad signature"})
                return
            payload = json.loads(body)
            answer = handler(payload["event"], payload)
            if answer is None:
                self.send_response(204)
                self.end_headers()
                return
            self._reply(200, answer)

        def _reply(self, status: int, data: dict[str, Any]) -> None:
            out = json.dumps(data).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            # The worker may have given up waiting (its hook timeout): nobody reads the answer.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(out)

        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            pass

    return ThreadingHTTPServer((host, port), Receiver)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8787)
    args = parser.parse_args()
    secret = os.environ.get("COMPACTOR_WEBHOOK_SECRET", "")
    if not secret:
        raise SystemExit("set COMPACTOR_WEBHOOK_SECRET to the secret the workers use")
    server = make_server(secret.encode("utf-8"), host=args.host, port=args.port)
    print(f"listening on http://{args.host}:{server.server_port}/")
    server.serve_forever()


if __name__ == "__main__":
    main()
