"""HTTP calls that end on time and read a bounded body: the model layer's and the webhook's.

httpx's timeouts bound each socket operation, not the call: a server that sends one byte a
second never trips a 5 s read timeout and keeps the caller's thread for as long as it likes.
Every call here runs inside ``guarded(cancel, deadline)``: the client's network backend reads
sockets in slices of at most ``SLICE_S`` and, between slices, checks the cancel token and the
wall-clock deadline. A call past its deadline raises ``httpcore.ReadTimeout`` (a cancelled one
``CallCancelled``) out of httpcore, which closes the connection; the server sees it go away.

Bodies are read with ``read_capped``: streamed, counted as they arrive (after inflating, so a
small gzip body cannot inflate into gigabytes), and abandoned at the cap with ``BodyTooLarge``.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

import httpcore
import httpx

__all__ = ["ACCEPT_ENCODING", "SLICE_S", "BodyTooLarge", "BodyUnreadable", "CallCancelled",
           "guarded", "make_client", "read_capped"]

SLICE_S = 0.1  # cancellation and the deadline are noticed within about this long
# The encodings read_capped can inflate with a bound; a server that sends another is refused.
ACCEPT_ENCODING = "gzip, deflate"


class _Cancellable(Protocol):
    def is_cancelled(self) -> bool: ...


class CallCancelled(Exception):
    """Raised inside httpcore so that it closes the connection (the caller's job stopped)."""


class BodyTooLarge(Exception):
    """The body (inflated) is longer than the cap; reading stopped there."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"body larger than {limit} bytes")
        self.limit = limit


class BodyUnreadable(Exception):
    """A content encoding we cannot inflate with a bound, or a corrupt compressed body."""


@dataclass(frozen=True)
class _Guard:
    cancel: _Cancellable | None
    deadline: float  # time.monotonic()

    def check(self) -> None:
        if self.cancel is not None and self.cancel.is_cancelled():
            raise CallCancelled()

    def remaining(self) -> float:
        return self.deadline - time.monotonic()


_GUARD: ContextVar[_Guard | None] = ContextVar("compactor_http_guard", default=None)


@contextmanager
def guarded(cancel: _Cancellable | None, deadline: float) -> Iterator[None]:
    """Calls made inside end at ``deadline`` (``time.monotonic()``) or when ``cancel`` turns."""
    token = _GUARD.set(_Guard(cancel, deadline))
    try:
        yield
    finally:
        _GUARD.reset(token)


class _GuardedStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        guard = _GUARD.get()
        if guard is None:
            return self._inner.read(max_bytes, timeout)
        end = guard.deadline if timeout is None else min(guard.deadline, time.monotonic() + timeout)
        while True:
            guard.check()
            left = end - time.monotonic()
            if left <= 0:
                raise httpcore.ReadTimeout("deadline reached while waiting for the answer")
            try:
                return self._inner.read(max_bytes, min(SLICE_S, left))
            except httpcore.ReadTimeout:
                continue  # nothing arrived in this slice; a plain socket recv can be retried

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        guard = _GUARD.get()
        if guard is not None:
            guard.check()
            timeout = _bounded(timeout, guard.remaining())
        self._inner.write(buffer, timeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _GuardedStream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


def _bounded(timeout: float | None, remaining: float) -> float:
    if remaining <= 0:
        raise httpcore.ConnectTimeout("deadline reached")
    return remaining if timeout is None else min(timeout, remaining)


class _GuardedBackend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        guard = _GUARD.get()
        if guard is not None:
            guard.check()
            timeout = _bounded(timeout, guard.remaining())
        stream = self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return _GuardedStream(stream)

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        return _GuardedStream(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _GuardedTransport(httpx.HTTPTransport):
    def __init__(self, limits: httpx.Limits) -> None:
        ssl_context = httpx.create_ssl_context()
        super().__init__(verify=ssl_context, limits=limits)
        # httpx has no public hook for httpcore's network backend; the pool it built is replaced
        # by an equivalent one whose sockets are guarded. tests/llm cover the behaviour.
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=_GuardedBackend(),
        )


def make_client(max_connections: int = 32, max_keepalive: int = 8,
                timeout_s: float = 120.0) -> httpx.Client:
    """A client whose sockets are guarded. Timeouts are passed per request; this is a backstop.
    ``max_connections`` also bounds the calls in flight: more wait for a free connection."""
    limits = httpx.Limits(max_connections=max_connections,
                          max_keepalive_connections=min(max_keepalive, max_connections),
                          keepalive_expiry=30)
    return httpx.Client(transport=_GuardedTransport(limits),
                        timeout=httpx.Timeout(timeout_s, connect=min(10.0, timeout_s)),
                        trust_env=False, follow_redirects=False,
                        headers={"accept-encoding": ACCEPT_ENCODING})


def read_capped(response: httpx.Response, limit: int) -> bytes:
    """The body of a streamed ``response``, inflated, or ``BodyTooLarge`` once it exceeds
    ``limit`` bytes (at most one network read past the cap is ever held)."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(limit)
    inflate = _inflater(response.headers.get("content-encoding", ""))
    body = bytearray()
    try:
        for raw in response.iter_raw():
            # max_length: one byte past the room left is enough to know the body is too large
            body += raw if inflate is None else inflate.decompress(raw, limit - len(body) + 1)
            if len(body) > limit:
                raise BodyTooLarge(limit)
        if inflate is not None:
            body += inflate.flush()
    except zlib.error as err:
        raise BodyUnreadable(f"corrupt compressed body: {err}") from err
    if len(body) > limit:
        raise BodyTooLarge(limit)
    return bytes(body)


def _inflater(encoding: str) -> Any:
    name = encoding.strip().lower()
    if name in ("", "identity"):
        return None
    if name in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if name == "deflate":
        return zlib.decompressobj()
    raise BodyUnreadable(f"content-encoding {encoding!r} is not supported (we ask for "
                         f"{ACCEPT_ENCODING})")
