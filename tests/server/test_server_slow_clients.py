"""Slow clients (docs/security.md "Slow clients (slowloris)"): ``compactor serve``'s protocol
closes a connection whose head or body does not arrive in time, refuses a head over the bound
(400), and never cuts a request that has been read. Over real sockets, with uvicorn's httptools
protocol (what serves when httptools imports) and its h11 one (the fallback)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import uvicorn
from conftest import free_port

from api_client.server import slow_clients
from api_client.server.settings import ServerSettings
from api_client.server.slow_clients import uvicorn_options

HEAD_S, BODY_S, HOLD_S, MAX_HEAD = 0.4, 0.8, 1.5, 2048
HEAD = b"POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 4\r\n"


async def _app(scope: dict[str, object], receive: object, send: object) -> None:
    """Reads the body; ``/hold`` answers only after every deadline has passed."""
    assert scope["type"] == "http"
    more = True
    while more:
        message = await receive()  # type: ignore[operator]
        more = message.get("more_body", False)
    if scope["path"] == "/hold":
        await asyncio.sleep(HOLD_S)
    await send({"type": "http.response.start", "status": 200,  # type: ignore[operator]
                "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})  # type: ignore[operator]


@pytest.fixture(params=["httptools", "h11"])
def server(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    if request.param == "h11":
        monkeypatch.setattr(slow_clients, "_HTTPTOOLS", None)
    settings = ServerSettings(api_header_timeout_s=HEAD_S, api_body_timeout_s=BODY_S,
                              api_keepalive_timeout_s=1, api_max_header_bytes=MAX_HEAD)
    options = uvicorn_options(settings)
    assert options["http"].__name__ == ("TimedH11Protocol" if request.param == "h11"
                                        else "TimedHttpToolsProtocol")
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(_app, host="127.0.0.1", port=port, lifespan="off",
                                           log_level="warning", **options))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(15)


@contextmanager
def _connection(port: int) -> Iterator[socket.socket]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        yield sock


def _read_all(sock: socket.socket) -> bytes:
    """What the server sends until it closes the connection (10 s at most)."""
    got = b""
    while chunk := sock.recv(65536):
        got += chunk
    return got


def _closed_after(sock: socket.socket, started: float) -> tuple[bytes, float]:
    return _read_all(sock), time.monotonic() - started


def test_a_head_that_does_not_arrive_closes_the_connection(server: int) -> None:
    with _connection(server) as sock:
        started = time.monotonic()
        sock.sendall(HEAD)  # no blank line: the head never ends
        answer, elapsed = _closed_after(sock, started)
    assert answer == b"" and HEAD_S * 0.9 <= elapsed < 5


def test_a_body_that_does_not_arrive_closes_the_connection(server: int) -> None:
    with _connection(server) as sock:
        started = time.monotonic()
        sock.sendall(HEAD + b"\r\nab")  # 2 bytes of 4
        answer, elapsed = _closed_after(sock, started)
    assert answer == b"" and BODY_S * 0.9 <= elapsed < 5


def test_a_request_read_whole_is_never_cut_and_the_connection_keeps_alive(server: int) -> None:
    with _connection(server) as sock:
        sock.sendall(HEAD.replace(b"/x", b"/hold") + b"\r\nabcd")
        first = sock.recv(4096)
        assert first.startswith(b"HTTP/1.1 200") and first.endswith(b"ok")
        sock.sendall(HEAD + b"\r\nabcd")  # the same connection, once more
        second = sock.recv(4096)
        assert second.startswith(b"HTTP/1.1 200") and second.endswith(b"ok")


def test_a_head_trickling_past_the_bound_is_400(server: int) -> None:
    with _connection(server) as sock:
        sock.sendall(HEAD)
        for _ in range(MAX_HEAD // 64 + 2):
            try:
                sock.sendall(b"X-Filler: " + b"a" * 52 + b"\r\n")
            except (BrokenPipeError, ConnectionResetError):
                break
        answer = _read_all(sock)
    assert answer.startswith(b"HTTP/1.1 400")


# httptools only: h11 (the fallback when httptools does not import) bounds only a head it has
# not parsed whole.
@pytest.mark.parametrize("server", ["httptools"], indirect=True)
def test_a_whole_head_over_the_bound_is_400(server: int) -> None:
    with _connection(server) as sock:
        sock.sendall(HEAD + b"X-Filler: " + b"a" * MAX_HEAD + b"\r\n\r\nabcd")
        answer = _read_all(sock)
    assert answer.startswith(b"HTTP/1.1 400")
