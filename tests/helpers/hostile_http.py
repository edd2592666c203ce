"""A hostile HTTP/1.1 server on loopback: answers scripted as raw byte writers, so a test can
send what no well-behaved framework would (100 MB bodies, endless streams, 1 byte a second,
JSON nested 100 000 deep, gzip bombs, an echo of the request's credentials).

``server.script(answer, ...)`` queues answers for the next requests; an empty queue answers
with ``server.default``. ``server.requests`` holds what each request sent (head and body);
``server.sent`` how many body bytes each answer wrote before it ended or the client hung up;
``server.hung_up`` is set for every answer whose client went away mid-body.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Answer", "HostileServer", "Request", "chat", "deep_json", "echo", "endless",
           "gzip_bomb", "huge", "json_answer", "trickle"]

MB = 1024 * 1024


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class _Conn:
    sock: socket.socket
    sent: int = 0
    hung_up: bool = False

    def send(self, data: bytes) -> bool:
        """False once the client has gone away."""
        try:
            self.sock.sendall(data)
        except OSError:
            self.hung_up = True
            return False
        self.sent += len(data)
        return True


Answer = Callable[[Request, _Conn], None]


@dataclass
class HostileServer:
    default: Answer | None = None
    requests: list[Request] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)
    hung_up: list[bool] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._answers: deque[Answer] = deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self._done = threading.Condition(self._lock)
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def script(self, *answers: Answer) -> None:
        with self._lock:
            self._answers.extend(answers)

    def wait_answered(self, count: int, timeout: float = 10.0) -> None:
        """Until ``count`` answers have ended (written out, or their client gone)."""
        with self._done:
            self._done.wait_for(lambda: len(self.sent) >= count, timeout)

    def close(self) -> None:
        self._stop.set()
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                sock, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        with sock:
            request = _read_request(sock)
            if request is None:
                return
            with self._lock:
                self.requests.append(request)
                answer = self._answers.popleft() if self._answers else self.default
            conn = _Conn(sock)
            (answer or json_answer({"ok": True}))(request, conn)
            with self._done:
                self.sent.append(conn.sent)
                self.hung_up.append(conn.hung_up)
                self._done.notify_all()


def _read_request(sock: socket.socket) -> Request | None:
    sock.settimeout(10)
    data = b""
    with contextlib.suppress(OSError):
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {k.strip().lower(): v.strip()
                   for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            body += chunk
        return Request(method, path, headers, body)
    return None


def _head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} X", "connection: close",
             *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


# --- answers ----------------------------------------------------------------------------------
def json_answer(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Answer:
    """A whole body at once: ``payload`` as JSON (bytes and str as they are)."""
    body = payload if isinstance(payload, bytes) else (
        payload.encode() if isinstance(payload, str) else json.dumps(payload).encode())

    def answer(request: Request, conn: _Conn) -> None:
        conn.send(_head(status, {"content-type": "application/json",
                                 "content-length": str(len(body)), **(headers or {})}))
        conn.sent = 0
        conn.send(body)
    return answer


def chat(text: str) -> dict[str, Any]:
    """An OpenAI chat completion whose message is ``text``."""
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10}}


def _stream(request: Request, conn: _Conn, pieces: Iterator[bytes], length: int | None,
            pause_s: float = 0.0) -> None:
    headers = {"content-type": "application/json"}
    headers.update({"content-length": str(length)} if length is not None
                   else {"transfer-encoding": "chunked"})
    conn.send(_head(200, headers))
    conn.sent = 0
    for piece in pieces:
        data = piece if length is not None else b"%x\r\n%s\r\n" % (len(piece), piece)
        if not conn.send(data):
            return
        if pause_s:
            time.sleep(pause_s)
    if length is None:
        conn.send(b"0\r\n\r\n")


def huge(total: int, *, chunked: bool = False) -> Answer:
    """A chat completion whose text makes the body ``total`` bytes, written 64 kB at a time."""
    head = b'{"choices":[{"index":0,"message":{"role":"assistant","content":"'
    tail = b'"}}]}'
    fill = total - len(head) - len(tail)

    def pieces() -> Iterator[bytes]:
        yield head
        left = fill
        while left > 0:
            yield b"a" * min(65536, left)
            left -= 65536
        yield tail

    return lambda request, conn: _stream(request, conn, pieces(), None if chunked else total)


def endless() -> Answer:
    """A chunked body that never ends (until the client hangs up)."""
    def pieces() -> Iterator[bytes]:
        yield b'{"choices":[{"message":{"content":"'
        while True:
            yield b"a" * 65536
    return lambda request, conn: _stream(request, conn, pieces(), None)


def trickle(body: bytes, interval_s: float = 1.0) -> Answer:
    """``body`` one byte every ``interval_s`` (a per-read timeout never fires)."""
    def answer(request: Request, conn: _Conn) -> None:
        _stream(request, conn, (body[i:i + 1] for i in range(len(body))), len(body), interval_s)
    return answer


def deep_json(depth: int, status: int = 200) -> Answer:
    """A JSON body nested ``depth`` levels deep (lists, then the error or summary keys)."""
    return json_answer(b'{"error":' * (status >= 400) + b"[" * depth + b"]" * depth
                       + b"}" * (status >= 400), status)


def gzip_bomb(size: int) -> Answer:
    """A gzip body that inflates to ``size`` bytes of a chat completion (~1000:1)."""
    head, tail = json.dumps(chat("\0")).encode().split(b"\\u0000")
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # gzip, built piecewise
    parts = [packer.compress(head)]
    for left in range(size, 0, -MB):
        parts.append(packer.compress(b"a" * min(MB, left)))
    body = b"".join([*parts, packer.compress(tail), packer.flush()])
    return json_answer(body, headers={"content-encoding": "gzip"})


def echo(status: int) -> Answer:
    """An error that quotes the request's credentials back, as some proxies' debug pages do."""
    def answer(request: Request, conn: _Conn) -> None:
        quoted = {k: v for k, v in request.headers.items()
                  if k in ("authorization", "x-api-key")}
        text = (f"invalid request; headers: {json.dumps(quoted)}; "
                f"Authorization: {quoted.get('authorization', '')}")
        json_answer({"error": {"message": text, "type": "invalid_request_error"}},
                    status)(request, conn)
    return answer
