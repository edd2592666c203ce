"""Slow clients (slowloris): uvicorn's h11 protocol with a read deadline on each request's head
and body (docs/security.md, docs/deploying.md).

uvicorn closes a keep-alive connection that stays idle (``timeout_keep_alive``) and refuses a
head over ``h11_max_incomplete_event_size`` (400), but it waits for ever on a head or a body
that trickles in: a thousand such connections hold a thousand descriptors. Here a connection
whose request head is not complete ``api_header_timeout_s`` after it opened (or after the
previous response, plus the keep-alive time), or whose body is not complete
``api_body_timeout_s`` after its head, is closed. A request that has been read (a long poll, an
event stream) is never cut by these.
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


class TimedH11Protocol(H11Protocol):
    header_timeout_s = 10.0
    body_timeout_s = 60.0
    _timer: asyncio.TimerHandle | None = None
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

    def _arm(self, delay_s: float, due: Callable[[], None]) -> None:
        self._disarm()
        self._timer = self.loop.call_later(delay_s, due)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _head_due(self) -> None:
        if self.conn.their_state is h11.IDLE:
            self._close("request head")

    def _body_due(self) -> None:
        if self.conn.their_state is h11.SEND_BODY:
            self._close("request body")

    def _close(self, what: str) -> None:
        log.info("closed a connection whose %s did not arrive in time", what)
        self.transport.close()


def timed_protocol(settings: ServerSettings) -> type[TimedH11Protocol]:
    """The protocol class with the settings' deadlines."""
    return type("TimedH11Protocol", (TimedH11Protocol,), {
        "header_timeout_s": settings.api_header_timeout_s,
        "body_timeout_s": settings.api_body_timeout_s})


def uvicorn_options(settings: ServerSettings) -> dict[str, Any]:
    """What ``compactor serve`` gives uvicorn against slow clients."""
    return {"http": timed_protocol(settings),
            "timeout_keep_alive": settings.api_keepalive_timeout_s,
            "h11_max_incomplete_event_size": settings.api_max_header_bytes}
