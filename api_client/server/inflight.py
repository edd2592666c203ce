"""How many requests one server process works on at once (docs/http-api.md "Many waiters").

A process runs one request's Python at a time: past a few hundred requests in flight, each
waits behind the others long enough for its Redis replies to sit unread past the per-command
timeout, and answers 503 although Redis is fine. :class:`InFlightLimit` (ASGI, outermost)
answers a request over ``COMPACTOR_API_INFLIGHT_MAX`` at once with 429 ``overloaded`` and
``Retry-After``, before anything of it is read. Waiting requests are not counted: long polls and
event streams have their own cap (``COMPACTOR_API_WAITERS_MAX``), and the summarize routes wait
for a model; nor are the probes.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send

from api_client.server.problems import MEDIA_TYPE, problem_body

__all__ = ["OVERLOADED_CODE", "RELEASE", "InFlightLimit", "release"]

OVERLOADED_CODE = "overloaded"
RELEASE = "compactor.inflight_release"  # scope state: the request leaves the count
_OPEN = frozenset({"/livez", "/readyz", "/openapi.json"})
_WAITING_PREFIXES = ("/v1/summarize", "/v1/chat/completions", "/v1/events")


def waits(scope: Scope) -> bool:
    """Whether the request may be held until something happens (not counted here)."""
    path: str = scope["path"]
    if path in _OPEN or path.startswith(_WAITING_PREFIXES):
        return True
    if scope["method"] != "GET":
        return False
    if path.startswith("/v1/sessions/") and path.endswith("/events"):
        return True
    return path.startswith("/v1/jobs/") and b"wait=" in scope.get("query_string", b"")


class InFlightLimit:
    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit  # 0: no limit
        self.held = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.limit or waits(scope):
            await self.app(scope, receive, send)
            return
        if self.held >= self.limit:
            await _overloaded(send, self.limit)
            return
        self.held += 1
        counted = [True]

        def release() -> None:
            if counted[0]:
                counted[0] = False
                self.held -= 1

        # An inner layer lets the request go from the count while it only waits (the rate
        # limit's pause: api_client/server/guards.py).
        scope.setdefault("state", {})[RELEASE] = release
        try:
            await self.app(scope, receive, send)
        finally:
            release()


def release(scope: Scope) -> None:
    """The request leaves its process's in-flight count (it only waits from now on)."""
    let_go = scope.get("state", {}).get(RELEASE)
    if let_go is not None:
        let_go()


async def _overloaded(send: Send, limit: int) -> None:
    body = json.dumps(problem_body(429, OVERLOADED_CODE, (
        f"this server process works on {limit} requests already (COMPACTOR_API_INFLIGHT_MAX): "
        "retry, or ask another one")), separators=(",", ":")).encode()
    await send({"type": "http.response.start", "status": 429,
                "headers": [(b"content-type", MEDIA_TYPE.encode()),
                            (b"content-length", str(len(body)).encode()),
                            (b"retry-after", b"1")]})
    await send({"type": "http.response.body", "body": body})
