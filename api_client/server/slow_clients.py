"""Slow clients (slowloris): uvicorn's HTTP protocol with a read deadline on each request's head
and body, and a bound on the head (docs/security.md, docs/deploying.md).

uvicorn closes a keep-alive connection that stays idle (``timeout_keep_alive``), but it waits
for ever on a head or a body that trickles in: a thousand such connections hold a thousand
descriptors. Here a connection whose request head is not complete ``api_header_timeout_s`` after
it opened (or after the previous response, plus the keep-alive time), or whose body is not
complete ``api_body_timeout_s`` after its head, is closed, and a head over
``api_max_header_bytes`` is refused (400). A request that has been read (a long poll, an event
stream) is never cut by these.

The protocol is uvicorn's httptools one (llhttp, in C) when httptools imports, else its h11 one
(pure Python, about three times the CPU per request; uvicorn bounds the head itself there).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from api_client.server.settings import ServerSettings

__all__ = ["TimedH11Protocol", "timed_protocol", "uvicorn_options"]

log = logging.getLogger("api_client.server")
_REFUSED = "Invalid HTTP request received."  # uvicorn's own 400 text


class _Deadlines:
    """The timer of a connection's head or body (one at a time)."""

    header_timeout_s = 10.0
    body_timeout_s = 60.0
    _timer: asyncio.TimerHandle | None = None
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport

    def _arm(self, delay_s: float, due: Callable[[], None]) -> None:
        self._disarm()
        self._timer = self.loop.call_later(delay_s, due)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _close(self, what: str) -> None:
        log.info("closed a connection whose %s did not arrive in time", what)
        self.transport.close()


class TimedH11Protocol(_Deadlines, H11Protocol):
    _reading_body = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.header_timeout_s, self._head_due)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        state = self.conn.their_state
        if state is h11.SEND_BODY and not self._reading_body:
            self._reading_body = True
            self._arm(self.body_timeout_s, self._body_due)
        elif state not in (h11.IDLE, h11.SEND_BODY):  # read whole: the app has it
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._reading_body = False
        if not self.transport.is_closing():  # the next head, after the keep-alive wait
            self._arm(self.timeout_keep_alive + self.header_timeout_s, self._head_due)

    def _head_due(self) -> None:
        if self.conn.their_state is h11.IDLE:
            self._close("request head")

    def _body_due(self) -> None:
        if self.conn.their_state is h11.SEND_BODY:
            self._close("request body")


def _httptools_protocol() -> type[Any] | None:
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:
        return None

    class TimedHttpToolsProtocol(_Deadlines, HttpToolsProtocol):
        """The parser's callbacks say where a request is: its head (from the connection or the
        previous request's end to ``on_headers_complete``), its body (to
        ``on_message_complete``), or read whole."""

        max_head_bytes = 16 * 1024
        _in_head = True
        _in_body = False
        _head_bytes = 0  # bytes received while a head was incomplete

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm(self.header_timeout_s, self._head_due)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._in_head:
                self._head_bytes += len(data)
            super().data_received(data)
            if (self._in_head and self._head_bytes > self.max_head_bytes
                    and not self.transport.is_closing()):
                log.warning("refused a request head over %d bytes", self.max_head_bytes)
                self.send_400_response(_REFUSED)

        def on_headers_complete(self) -> None:
            size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
            if size > self.max_head_bytes:  # a whole head in one read: raised as a parse error
                raise ValueError(f"request head over {self.max_head_bytes} bytes")
            self._in_head, self._in_body, self._head_bytes = False, True, 0
            self._arm(self.body_timeout_s, self._body_due)
            super().on_headers_complete()

        def on_message_complete(self) -> None:  # read whole: the app has it
            self._in_head, self._in_body = True, False
            self._disarm()
            super().on_message_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():  # the next head, after the keep-alive wait
                self._arm(self.timeout_keep_alive + self.header_timeout_s, self._head_due)

        def _head_due(self) -> None:
            if self._in_head and (self.cycle is None or self.cycle.response_complete):
                self._close("request head")

        def _body_due(self) -> None:
            if self._in_body:
                self._close("request body")

    return TimedHttpToolsProtocol


_HTTPTOOLS = _httptools_protocol()


def timed_protocol(settings: ServerSettings) -> type[Any]:
    """The protocol class with the settings' deadlines and head bound."""
    deadlines = {"header_timeout_s": settings.api_header_timeout_s,
                 "body_timeout_s": settings.api_body_timeout_s}
    if _HTTPTOOLS is None:
        return type("TimedH11Protocol", (TimedH11Protocol,), deadlines)
    return type("TimedHttpToolsProtocol", (_HTTPTOOLS,),
                {**deadlines, "max_head_bytes": settings.api_max_header_bytes})


def uvicorn_options(settings: ServerSettings) -> dict[str, Any]:
    """What ``compactor serve`` gives uvicorn against slow clients."""
    return {"http": timed_protocol(settings),
            "timeout_keep_alive": settings.api_keepalive_timeout_s,
            "h11_max_incomplete_event_size": settings.api_max_header_bytes}
