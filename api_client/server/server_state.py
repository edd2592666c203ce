"""What every request of the app shares (an asyncio client per tenant, the settings, the token
table) and the bearer check. The app keeps no other state: replicas are equal.

The check is ASGI middleware (:class:`BearerAuth`), so a request without a valid token is
answered 401 from its headers, before any of its body is read or parsed; the ``authorize``
dependency only puts the bearer scheme into the OpenAPI document (never resolved). A route
finds its tenant's state with :func:`server_state` (a call, not a dependency FastAPI resolves
per request)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from fastapi import Request
from fastapi.security import HTTPBearer
from starlette.types import ASGIApp, Receive, Scope, Send

from api_client import AsyncCompactionClient
from api_client.server.auth import DEFAULT_TENANT, TokenTable
from api_client.server.fanout import Fanout
from api_client.server.problems import MEDIA_TYPE, problem_body
from api_client.server.settings import ServerSettings
from api_client.server.summarize_url import PATH_PREFIX, SummarizeSecrets

__all__ = ["OPEN_PATHS", "BearerAuth", "ServerState", "authorize", "server_state"]

# What a load balancer, a probe or a client generator reads without a token.
OPEN_PATHS = frozenset({"/livez", "/readyz", "/openapi.json"})


@dataclass(frozen=True, slots=True)
class ServerState:
    """What a request's route works with: the client of the request's tenant (it names only
    that tenant's keys, so a route cannot reach another tenant's data) and the settings."""

    client: AsyncCompactionClient
    settings: ServerSettings
    tokens: TokenTable  # empty: --insecure-no-auth on loopback (checked at start)
    fanout: Fanout  # the process's one reader for long polls and event streams


def server_state(request: Request) -> ServerState:
    """The state of the request's tenant (the default tenant's on the open paths)."""
    states: dict[str, ServerState] = request.app.state.compactor
    return states[getattr(request.state, "tenant", DEFAULT_TENANT)]


class BearerAuth:
    """401 (problem+json, ``WWW-Authenticate: Bearer``) unless the request carries a configured
    token; the tenant goes into the request's state. With no token configured (the start
    checks allow that only on loopback) every request is the default tenant's."""

    def __init__(self, app: ASGIApp, tokens: TokenTable) -> None:
        self.app = app
        self.tokens = tokens
        self.summarize_secrets = SummarizeSecrets.of(tokens)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        if scope["path"].startswith(PATH_PREFIX) and scope["method"] != "POST":
            await self.app(scope, receive, send)  # 405 whatever the secret: no oracle
            return
        if scope["path"].startswith(PATH_PREFIX):  # the secret in the path is the credential
            tenant, problem = self._url_tenant(scope["path"])
        else:
            tenant, problem = self._tenant(dict(scope["headers"]).get(b"authorization"))
        if tenant is None:
            await _unauthorized(send, problem)
            return
        scope.setdefault("state", {})["tenant"] = tenant
        await self.app(scope, receive, send)

    def _url_tenant(self, path: str) -> tuple[str | None, str]:
        if not self.tokens.entries:
            return DEFAULT_TENANT, ""
        tenant = self.summarize_secrets.tenant(path)
        return tenant, "" if tenant else "unknown summarize URL (compactor summarize-url)"

    def _tenant(self, header: bytes | None) -> tuple[str | None, str]:
        if not self.tokens.entries:
            return DEFAULT_TENANT, ""
        scheme, _, token = (header or b"").decode("latin-1").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None, "no bearer token (Authorization: Bearer <token>)"
        tenant = self.tokens.tenant(token.strip())
        return tenant, "" if tenant else "unknown bearer token"


async def _unauthorized(send: Send, detail: str) -> None:
    body = json.dumps(problem_body(401, "unauthorized", detail), separators=(",", ":")).encode()
    await send({"type": "http.response.start", "status": 401,
                "headers": [(b"content-type", MEDIA_TYPE.encode()),
                            (b"content-length", str(len(body)).encode()),
                            (b"www-authenticate", b'Bearer realm="compactor"')]})
    await send({"type": "http.response.body", "body": body})


# The routers' dependency: it puts the bearer scheme into the OpenAPI document and does
# nothing more (auto_error=False: BearerAuth has answered a request without a token already).
# The app's routes do not resolve it per request (api_client.server.app_route).
authorize = HTTPBearer(auto_error=False, description="a token of COMPACTOR_API_TOKENS")
