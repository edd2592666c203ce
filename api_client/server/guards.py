"""What keeps one tenant from slowing the others, and ``--insecure-no-auth`` on this machine
(docs/security.md).

:class:`TenantGuards` is ASGI middleware inside the bearer check (the tenant is known) and
outside the body limit (nothing of a refused request's body is read). Per tenant:

- a request rate: a token bucket per tenant, in this process (``COMPACTOR_API_RATE_PER_S``,
  ``COMPACTOR_API_RATE_BURST``). In process, not in Redis: a bucket in Redis would cost a round
  trip per request on the very Redis the limit protects, and a flood must be refused without
  touching it. The limit is per replica: N replicas admit N times the rate;
- open event streams (``COMPACTOR_API_SSE_STREAMS_MAX``): each holds a socket and a task of
  the process while open; past the cap a new stream is 429 before any header, so a stream never
  starts with 200 and then drops for want of a resource.

Over either: 429 ``rate_limited`` / ``too_many_streams`` with ``Retry-After``. The probes
(``/livez``, ``/readyz``, ``/openapi.json``) are not counted. A request over the rate gets its
429 after ``COMPACTOR_API_RATE_PAUSE_S`` (1 s), out of the process's in-flight count while it
waits: refused at once, a flood that retries at once (a closed loop on 64 connections) made
thousands of 429s a second and took the event loop from everyone (another tenant's p95 10 ms
alone, 155 ms under it; 38 ms with the pause).

Without tokens (``--insecure-no-auth``, loopback only) any web page the user opens could reach
the server: a request whose ``Host`` is not a loopback name (DNS rebinding) is 421
``host_not_allowed``; a state change (POST, PUT, PATCH, DELETE) from another site (its
``Origin`` or ``Sec-Fetch-Site`` says so) is 403 ``cross_origin``, and one with a form or plain
text body (what a page may send without a preflight) is 415 ``unsupported_media_type``.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from api_client.server.auth import DEFAULT_TENANT, is_loopback
from api_client.server.inflight import release
from api_client.server.problems import MEDIA_TYPE, problem_body
from api_client.server.settings import ServerSettings

__all__ = ["GUARD_CODES", "StreamSlots", "TenantGuards", "TokenBuckets", "is_event_stream",
           "local_refusal", "loopback_host"]

GUARD_CODES = ("rate_limited", "too_many_streams", "host_not_allowed", "cross_origin",
               "unsupported_media_type")
_UNGUARDED = frozenset({"/livez", "/readyz", "/openapi.json"})
_STATE_CHANGES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# The bodies a page may send to another site without a CORS preflight.
_SIMPLE_TYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data",
                           "text/plain"})
_STREAM_RETRY_S = 5


@dataclass
class TokenBuckets:
    """One token bucket per tenant: ``rate`` tokens a second, at most ``burst`` held."""

    rate: float
    burst: int
    clock: Callable[[], float] = time.monotonic
    _held: dict[str, tuple[float, float]] = field(default_factory=dict)  # tokens, at
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, tenant: str) -> float:
        """0 when a request of ``tenant`` may go (a token taken), else the seconds until one
        is there. A rate of 0 admits everything."""
        if self.rate <= 0:
            return 0.0
        now = self.clock()
        with self._lock:
            tokens, at = self._held.get(tenant, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at) * self.rate)
            if tokens >= 1:
                self._held[tenant] = (tokens - 1, now)
                return 0.0
            self._held[tenant] = (tokens, now)
            return (1 - tokens) / self.rate


@dataclass
class StreamSlots:
    """Open event streams per tenant, at most ``limit`` each (0: no limit)."""

    limit: int
    open: dict[str, int] = field(default_factory=dict)

    def acquire(self, tenant: str) -> bool:
        held = self.open.get(tenant, 0)
        if self.limit and held >= self.limit:
            return False
        self.open[tenant] = held + 1
        return True

    def release(self, tenant: str) -> None:
        left = self.open.get(tenant, 1) - 1
        if left > 0:
            self.open[tenant] = left
        else:
            self.open.pop(tenant, None)


def is_event_stream(method: str, path: str) -> bool:
    return method == "GET" and (path == "/v1/events" or (
        path.startswith("/v1/sessions/") and path.endswith("/events")))


def loopback_host(host: str) -> bool:
    """Is ``host`` (a Host header or an origin's host, port allowed) a loopback name?"""
    name = host.strip().lower()
    if name.startswith("["):  # [::1] or [::1]:8080
        name, _, rest = name.partition("]")
        if rest and not (rest.startswith(":") and rest[1:].isdigit()):
            return False
    elif name.count(":") == 1:
        name, _, port = name.partition(":")
        if not port.isdigit():
            return False
    return bool(name) and is_loopback(name)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def local_refusal(scope: Scope) -> tuple[int, str, str] | None:
    """Why a request to a server without tokens is refused (status, code, detail), or None."""
    host = _header(scope, b"host")
    if host is not None and not loopback_host(host):
        return 421, "host_not_allowed", ("this server runs without tokens (--insecure-no-auth) "
                                         "and answers loopback Host names only")
    if scope["method"] not in _STATE_CHANGES:
        return None
    origin = _header(scope, b"origin")
    fetch_site = (_header(scope, b"sec-fetch-site") or "").lower()
    if fetch_site == "cross-site" or (
            origin is not None and not loopback_host(urlsplit(origin).netloc)):
        return 403, "cross_origin", "a state change from another site is refused"
    media_type = (_header(scope, b"content-type") or "").split(";")[0].strip().lower()
    if media_type in _SIMPLE_TYPES:
        return 415, "unsupported_media_type", (f"{media_type} is not accepted: send "
                                               "application/json")
    return None


async def _refuse(send: Send, status: int, code: str, detail: str,
                  retry_after_s: float | None = None) -> None:
    body = json.dumps(problem_body(status, code, detail)).encode()
    headers = [(b"content-type", MEDIA_TYPE.encode()),
               (b"content-length", str(len(body)).encode())]
    if retry_after_s is not None:
        headers.append((b"retry-after", str(max(1, math.ceil(retry_after_s))).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class TenantGuards:
    def __init__(self, app: ASGIApp, settings: ServerSettings, local_only: bool) -> None:
        self.app = app
        self.local_only = local_only
        self.buckets = TokenBuckets(settings.api_rate_per_s, settings.api_rate_burst)
        self.streams = StreamSlots(settings.api_sse_streams_max)
        self.pause_s = settings.api_rate_pause_s
        self.paused = 0  # requests over the rate waiting for their 429

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.local_only:
            refusal = local_refusal(scope)
            if refusal is not None:
                await _refuse(send, *refusal)
                return
        if scope["path"] in _UNGUARDED:
            await self.app(scope, receive, send)
            return
        tenant = str(scope.get("state", {}).get("tenant", DEFAULT_TENANT))
        wait_s = self.buckets.take(tenant)
        if wait_s > 0:
            await self._pause(scope)
            await _refuse(send, 429, "rate_limited",
                          f"over {self.buckets.rate:g} requests a second "
                          "(COMPACTOR_API_RATE_PER_S)", wait_s)
            return
        if not is_event_stream(scope["method"], scope["path"]):
            await self.app(scope, receive, send)
            return
        if not self.streams.acquire(tenant):
            await _refuse(send, 429, "too_many_streams",
                          f"{self.streams.limit} event streams are open already "
                          "(COMPACTOR_API_SSE_STREAMS_MAX)", _STREAM_RETRY_S)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.streams.release(tenant)

    async def _pause(self, scope: Scope) -> None:
        """Hold a request over the rate before its 429, out of the in-flight count."""
        if self.pause_s <= 0:
            return
        release(scope)
        self.paused += 1
        try:
            await asyncio.sleep(self.pause_s)
        finally:
            self.paused -= 1
