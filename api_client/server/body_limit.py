"""A request body limit (``COMPACTOR_API_MAX_BODY_BYTES``): 413 before the body is read.

A declared ``Content-Length`` over the limit is answered at once; a chunked body is counted as
it arrives and refused at the chunk that crosses the limit (:class:`BodyTooLarge` is an
HTTPException, so FastAPI's body parsing lets it through to the app's problem handler).
"""

from __future__ import annotations

import json

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api_client.server.problems import MEDIA_TYPE, problem_body

__all__ = ["BodyLimit", "BodyTooLarge"]


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is over {limit:,} bytes "
                              "(COMPACTOR_API_MAX_BODY_BYTES)")


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        await self.app(scope, counted, send)

    async def _refuse(self, send: Send) -> None:
        body = json.dumps(problem_body(413, "body_too_large",
                                       BodyTooLarge(self.max_bytes).detail)).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", MEDIA_TYPE.encode()),
                                (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})
