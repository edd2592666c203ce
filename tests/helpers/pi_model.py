"""A loopback OpenAI-compatible model for pi and Compactor's workers, over real HTTP.

pi (``"api": "openai-completions"``) streams: the answer comes as SSE chunks ending with a usage
chunk, and pi reads ``usage.prompt_tokens`` to decide when to compact, so the usage reported is
the request's size (characters / 4, pi's own estimate): the conversation crosses pi's threshold
when its text does, as with a real provider. Compactor's workers call the same endpoint without
streaming and get one JSON body.

Every request is recorded (:class:`Call`: who sent it, its tokens, its body) so a test can read
what pi sent next and a benchmark can count the tokens each side spent. ``latency_s`` is what
every call waits before answering; ``overflow_next(n)`` answers the next ``n`` chat requests of
pi with a context-overflow error in OpenAI's shape.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Call", "StreamingModel", "message_text"]

# pi's summarization calls open with this system prompt (compaction/utils.js): how a call of
# pi's built-in compaction is told from a turn of the conversation.
PI_SUMMARY_PROMPT = "You are a context summarization assistant"
# Each side's summaries say whose they are: a test reads in pi's session which one it holds.
SUMMARIES = {source: (f"## Goal\nFix the importer ({who}).\n\n## Progress\n### Done\n"
                      "- [x] parser reads amounts\n\n## Next Steps\n1. run the tests")
             for source, who in (("compactor", "Compactor summary"),
                                 ("pi-summary", "pi's own summary"))}
OVERFLOW = ("This model's maximum context length is 40000 tokens. However, your messages "
            "resulted in 52000 tokens. Please reduce the length of the messages.")


def message_text(message: dict[str, Any]) -> str:
    """The text of one chat message (string content or a list of text parts)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


@dataclass
class Call:
    """One request: ``source`` is ``pi`` (a conversation turn), ``pi-summary`` (pi's built-in
    compaction or branch summary) or ``compactor`` (a worker's call)."""

    source: str
    prompt_tokens: int
    completion_tokens: int
    body: dict[str, Any] = field(repr=False)
    started: float = 0.0
    answered: str = "ok"

    def text(self) -> str:
        return "\n".join(message_text(m) for m in self.body.get("messages", []))


class StreamingModel:
    """The server; ``base_url`` ends in ``/v1``; ``close()`` stops it."""

    def __init__(self, latency_s: float = 0.0, reply_chars: int = 2000) -> None:
        self.latency_s = latency_s
        self.reply_chars = reply_chars
        self.calls: list[Call] = []
        self._busy = 0  # requests received and not answered yet
        self._overflows = 0
        self._lock = threading.Lock()
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                model._answer(self, body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def overflow_next(self, count: int = 1) -> None:
        with self._lock:
            self._overflows = count

    def of(self, source: str) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.source == source]

    def wait_idle(self, timeout: float = 30) -> None:
        """Wait until every request received has its answer (a worker's late call counts)."""
        deadline = time.monotonic() + timeout
        while self._busy and time.monotonic() < deadline:
            time.sleep(0.05)

    def tokens(self, source: str) -> int:
        """Input plus output tokens of the answered calls of ``source``."""
        return sum(c.prompt_tokens + c.completion_tokens for c in self.of(source)
                   if c.answered == "ok")

    def _answer(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        with self._lock:
            self._busy += 1
        try:
            self._respond(handler, self._record(body))
        finally:
            with self._lock:
                self._busy -= 1

    def _respond(self, handler: BaseHTTPRequestHandler, call: Call) -> None:
        body = call.body
        time.sleep(self.latency_s)
        if call.answered == "overflow":
            error = {"error": {"message": OVERFLOW, "type": "invalid_request_error",
                               "code": "context_length_exceeded"}}
            _send(handler, 400, "application/json", json.dumps(error).encode())
            return
        text = self._reply(call)
        call.completion_tokens = len(text) // 4
        if body.get("stream"):
            _send(handler, 200, "text/event-stream", _sse(body, text, call))
        else:
            _send(handler, 200, "application/json", json.dumps({
                "id": "loop", "object": "chat.completion", "model": body.get("model", "m"),
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": text}}],
                "usage": _usage(call)}).encode())

    def _record(self, body: dict[str, Any]) -> Call:
        messages = body.get("messages", [])
        first = message_text(messages[0]) if messages else ""
        source = ("compactor" if not body.get("stream")
                  else "pi-summary" if first.startswith(PI_SUMMARY_PROMPT) else "pi")
        prompt = sum(len(message_text(m)) for m in messages) // 4
        call = Call(source, prompt, 0, body, time.monotonic())
        with self._lock:
            if source == "pi" and self._overflows > 0:
                self._overflows -= 1
                call.answered = "overflow"
            self.calls.append(call)
        return call

    def _reply(self, call: Call) -> str:
        if call.source != "pi":
            return SUMMARIES[call.source]
        turn = len(self.of("pi"))
        words = "the parser splits amounts by locale and the importer reads each line "
        return f"Answer {turn}: " + (words * (self.reply_chars // len(words) + 1))[
            :self.reply_chars]


def _usage(call: Call) -> dict[str, int]:
    return {"prompt_tokens": call.prompt_tokens, "completion_tokens": call.completion_tokens,
            "total_tokens": call.prompt_tokens + call.completion_tokens}


def _sse(body: dict[str, Any], text: str, call: Call) -> bytes:
    """The stream pi reads: the text in a few chunks, the finish reason, then the usage chunk
    (``stream_options.include_usage``), then ``[DONE]``."""
    def chunk(choices: list[dict[str, Any]], **extra: Any) -> str:
        return "data: " + json.dumps({"id": "loop", "object": "chat.completion.chunk",
                                      "created": int(time.time()),
                                      "model": body.get("model", "m"),
                                      "choices": choices, **extra}) + "\n\n"

    step = max(1, len(text) // 4)
    parts = [chunk([{"index": 0, "delta": {"role": "assistant", "content": text[i:i + step]},
                     "finish_reason": None}]) for i in range(0, len(text), step)]
    parts.append(chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}]))
    parts.append(chunk([], usage=_usage(call)))
    parts.append("data: [DONE]\n\n")
    return "".join(parts).encode()


def _send(handler: BaseHTTPRequestHandler, status: int, kind: str, payload: bytes) -> None:
    # Head and body in one write (a split write waits for the client's delayed ACK).
    head = (f"HTTP/1.1 {status} {'OK' if status == 200 else 'Bad Request'}\r\n"
            f"Content-Type: {kind}\r\nContent-Length: {len(payload)}\r\n\r\n").encode()
    handler.wfile.write(head + payload)
