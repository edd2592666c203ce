"""The one HTTP client of the model layer, with deadlines and cancellation built into the
socket reads.

Every model call runs inside ``guarded(cancel, deadline)``. The client's network backend reads
sockets in slices of at most ``SLICE_S`` and, between slices, checks the cancel token and the
attempt's deadline. A cancelled call raises out of httpcore, which closes the connection (the
server sees it go away), so a cancelled job stops its HTTP call within a fraction of a second
and a hung or trickling provider cannot hold a job past its deadline.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

from worker.llm.errors import ConnectionFailed, ModelCancelledError, ModelTimeout, Who
from worker.summary_requests import CancelToken

__all__ = ["SLICE_S", "HttpReply", "guarded", "make_client", "post_json"]

SLICE_S = 0.1  # cancellation is noticed within about this long while a call is in flight


class _CallCancelled(Exception):
    """Raised inside httpcore so that it closes the connection; mapped to ModelCancelledError."""


@dataclass(frozen=True)
class _Guard:
    cancel: CancelToken | None
    deadline: float  # time.monotonic()

    def check(self) -> None:
        if self.cancel is not None and self.cancel.is_cancelled():
            raise _CallCancelled()

    def remaining(self) -> float:
        return self.deadline - time.monotonic()


_GUARD: ContextVar[_Guard | None] = ContextVar("compactor_llm_guard", default=None)


@contextmanager
def guarded(cancel: CancelToken | None, deadline: float) -> Iterator[None]:
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
                raise httpcore.ReadTimeout("deadline reached while waiting for the model")
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


def make_client(max_connections: int = 32) -> httpx.Client:
    """The shared client. Timeouts are always passed per request; this default is a backstop."""
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=8,
                          keepalive_expiry=30)
    return httpx.Client(transport=_GuardedTransport(limits),
                        timeout=httpx.Timeout(120.0, connect=10.0),
                        trust_env=False, follow_redirects=False)


@dataclass(frozen=True)
class HttpReply:
    status: int
    reason: str
    headers: httpx.Headers
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def post_json(client: httpx.Client, url: str, payload: dict[str, Any], *, headers: dict[str, str],
              timeout_s: float, connect_timeout_s: float, cancel: CancelToken | None,
              provider: str, model: str) -> HttpReply:
    """POST one JSON body; transport failures become typed errors, any HTTP status is returned."""
    body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
    all_headers = {"content-type": "application/json", "accept": "application/json", **headers}
    timeout = httpx.Timeout(timeout_s, connect=min(connect_timeout_s, timeout_s))
    who: Who = {"provider": provider, "model": model}
    try:
        with guarded(cancel, time.monotonic() + timeout_s):
            response = client.post(url, content=body, headers=all_headers, timeout=timeout)
    except _CallCancelled as err:
        raise ModelCancelledError(**who) from err
    except httpx.TimeoutException as err:
        raise ModelTimeout(f"Request timed out after {timeout_s:g} s ({type(err).__name__})",
                           **who) from err
    except httpx.HTTPError as err:
        raise ConnectionFailed(f"Connection error: {type(err).__name__}: {err}", **who) from err
    return HttpReply(response.status_code, response.reason_phrase, response.headers,
                     response.content)
