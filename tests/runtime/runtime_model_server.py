"""A loopback OpenAI-compatible chat server for the runtime tests, with a stall switch.

``stall`` holds requests until ``release()`` (or the client hangs up); ``stall_next(n)`` holds
only the next ``n``. Answers are fixed summaries; ``requests`` counts calls, ``prompts`` keeps
each call's prompt (its last message), ``in_flight`` is set while a held request waits.
``latency_s`` delays every answer (a slow model), ``answered`` counts the answers sent.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ModelServer:
    def __init__(self) -> None:
        self.requests = 0
        self.prompts: list[str] = []
        self.held = 0
        self.answered = 0
        self.latency_s = 0.0
        self._to_hold = 0
        self.in_flight = threading.Event()
        self._release = threading.Event()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                try:
                    body = json.loads(raw)
                except ValueError:  # a worker killed mid-request (the crash tests) sent half
                    self.close_connection = True
                    return
                server._serve(self, body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def candidate(self) -> Any:
        """The model-layer candidate pointing at this server."""
        from pydantic import SecretStr

        from worker.llm import ModelCandidate

        return ModelCandidate(provider="openai", model="loop", base_url=self.base_url,
                              api_key=SecretStr("test-key"), context_window=200_000)

    def stall_next(self, n: int = 1) -> None:
        with self._lock:
            self._to_hold = n
            self._release.clear()
            self.in_flight.clear()

    def release(self) -> None:
        with self._lock:
            self._to_hold = 0
        self._release.set()

    def _serve(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        prompt = str(body["messages"][-1]["content"])
        with self._lock:
            self.requests += 1
            self.prompts.append(prompt)
            hold = self._to_hold > 0
            if hold:
                self._to_hold -= 1
                self.held += 1
        if hold:
            self.in_flight.set()
            self._release.wait(120)
        if self.latency_s:
            time.sleep(self.latency_s)  # the model's own time, not a test's wait
        reply = {
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant",
                                     "content": "## Goal\nLoopback summary of "
                                                f"{len(prompt)} chars."}}],
            "usage": {"prompt_tokens": len(prompt) // 4, "completion_tokens": 9},
        }
        data = json.dumps(reply).encode()
        try:
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
            with self._lock:
                self.answered += 1
        except OSError:
            pass  # the worker hung up (cancelled or killed)

    def close(self) -> None:
        self.release()
        self.httpd.shutdown()
        self.httpd.server_close()
