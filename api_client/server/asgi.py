"""The ASGI app of ``compactor serve``: the asyncio client's operations over HTTP.

FastAPI on uvicorn: FastAPI validates every body with the pydantic models of
:mod:`api_client.server.schemas` and writes the same models into ``/openapi.json``, so the
document other tools build on (``docs/openapi.json``) is generated, never hand-kept. The app
holds one :class:`AsyncCompactionClient` and nothing else: any number of replicas serve alike.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.routing import compile_path

from api_client import AsyncCompactionClient, ClientSettings, CompactorError
from api_client.server import (
    event_stream,
    job_routes,
    model_routes,
    session_routes,
    usage_routes,
    worker_routes,
)
from api_client.server.app_route import AppRoute
from api_client.server.auth import DEFAULT_TENANT, TokenTable
from api_client.server.body_limit import BodyLimit
from api_client.server.fanout import WAITERS_CODE, Fanout
from api_client.server.guards import GUARD_CODES, TenantGuards
from api_client.server.inflight import OVERLOADED_CODE, InFlightLimit
from api_client.server.openapi_doc import complete
from api_client.server.problems import (
    MEDIA_TYPE,
    PROBLEMS,
    error_body,
    problem_body,
    retry_after_s,
)
from api_client.server.server_state import BearerAuth, ServerState, server_state
from api_client.server.settings import ServerSettings

__all__ = ["API_VERSION", "create_app", "problem_codes"]

log = logging.getLogger("api_client.server")

API_VERSION = "1.0.0"  # of the HTTP API (the routes and bodies), not of the package
_PROBLEM = {"content": {MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/ProblemBody"}}},
            "description": "a problem (RFC 9457): `code` says which"}
# 400: a body FastAPI could not parse (not UTF-8, or nested deeper than the JSON parser goes).
_HTTP_CODES = {400: "invalid_json", 401: "unauthorized", 404: "not_found",
               405: "method_not_allowed", 413: "body_too_large"}
# Codes only the HTTP layer answers (the others are the error tree's: problems.PROBLEMS).
_OWN_CODES = ("invalid_json", "validation_error", "internal_error")
# A host and port, an IPv4 or an [IPv6] address in an error's text (a Redis client error names
# the server it could not reach): no body names one (docs/security.md).
_ADDRESS = re.compile(r"\[[0-9A-Fa-f:.]+\](?::\d+)?|\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?"
                      r"|\b[A-Za-z][\w.-]*:\d{2,5}\b")


def problem_codes() -> set[str]:
    """Every ``code`` a problem body may carry."""
    return ({p.code for p in PROBLEMS.values()} | set(_HTTP_CODES.values()) | set(_OWN_CODES)
            | set(GUARD_CODES) | {WAITERS_CODE, OVERLOADED_CODE})


def _problem(status: int, body: dict[str, Any], headers: dict[str, str] | None = None
             ) -> JSONResponse:
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE, headers=headers)


async def _on_compactor_error(_: Request, err: Exception) -> JSONResponse:
    status, body = error_body(err)
    if status >= 500 and _ADDRESS.search(body["detail"]):  # the log keeps the address
        log.warning("%s", err)
        body["detail"] = _ADDRESS.sub("<host>", body["detail"])
    wait = retry_after_s(err) if status == 429 else None  # every 429 says when (docs/security.md)
    return _problem(status, body, None if wait is None else {"Retry-After": str(wait)})


async def _on_validation(_: Request, err: Exception) -> JSONResponse:
    assert isinstance(err, RequestValidationError)
    problems = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type")}
                for e in err.errors()]
    if any(p["type"] == "json_invalid" for p in problems):
        return _problem(400, problem_body(400, "invalid_json", "the body is not JSON"))
    detail = "; ".join(f"{'.'.join(map(str, p['loc']))}: {p['msg']}" for p in problems)
    if any(p["type"] == "extra_forbidden" for p in problems):  # a setting it does not know
        return _problem(400, problem_body(400, "invalid_request", detail, errors=problems))
    return _problem(422, problem_body(422, "validation_error", detail, errors=problems))


async def _on_http(request: Request, err: Exception) -> JSONResponse:
    assert isinstance(err, HTTPException)
    code = _HTTP_CODES.get(err.status_code, f"http_{err.status_code}")
    headers = dict(err.headers or {})
    if err.status_code == 405:  # Starlette names the first route's method only
        headers["Allow"] = ", ".join(_allowed(request))
    return _problem(err.status_code, problem_body(err.status_code, code, str(err.detail)),
                    headers)


def _allowed(request: Request) -> list[str]:
    """The methods the document lists for the request's path (its routes' methods)."""
    paths: dict[str, dict[str, Any]] = request.app.openapi()["paths"]
    path = request.url.path
    return sorted(method.upper() for template, operations in paths.items()
                  if compile_path(template)[0].match(path) for method in operations)


async def _on_crash(_: Request, err: Exception) -> JSONResponse:
    # The text may quote a request's content: the log keeps it, the caller gets the type.
    log.error("request failed: %s", err, exc_info=err)
    return _problem(500, problem_body(500, "internal_error",
                                      f"internal error ({type(err).__name__})"))


def _probes(app: FastAPI) -> None:
    @app.get("/livez", tags=["probes"])
    async def livez() -> dict[str, str]:
        """The process serves requests (no Redis call): restart it when this fails."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["probes"], responses={503: _PROBLEM})
    async def readyz(request: Request) -> dict[str, str]:
        """Redis answers PING: route requests elsewhere while this fails."""
        await server_state(request).client.ping()  # BrokerUnavailableError: 503
        return {"status": "ready"}


def _document_problems(app: FastAPI, auth: bool) -> None:
    """Every error response refers to ProblemBody; FastAPI lists only models a route returns.
    The rest FastAPI cannot see (codes, id patterns, Retry-After): openapi_doc.complete."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = complete(generate(), problem_codes(), auth=auth)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _include_flat(app: FastAPI, router: APIRouter) -> None:
    """``app.include_router(router)``, the routes added to the app's own router: FastAPI keeps
    an included router as one route of the app and matches a request against its routes twice
    (once to find the router, again to find the route), which cost more CPU than any of our own
    middleware. Same routes, same document."""
    for route in router.routes:
        assert isinstance(route, APIRoute)
        app.router.add_api_route(
            route.path, route.endpoint, response_model=route.response_model,
            status_code=route.status_code, tags=route.tags, dependencies=route.dependencies,
            summary=route.summary, description=route.description,
            response_description=route.response_description, responses=route.responses,
            deprecated=route.deprecated, methods=route.methods, operation_id=route.operation_id,
            response_model_include=route.response_model_include,
            response_model_exclude=route.response_model_exclude,
            response_model_by_alias=route.response_model_by_alias,
            response_model_exclude_unset=route.response_model_exclude_unset,
            response_model_exclude_defaults=route.response_model_exclude_defaults,
            response_model_exclude_none=route.response_model_exclude_none,
            include_in_schema=route.include_in_schema, response_class=route.response_class,
            name=route.name, callbacks=route.callbacks, openapi_extra=route.openapi_extra,
            route_class_override=AppRoute)


def create_app(settings: ServerSettings | None = None,
               client_settings: ClientSettings | None = None) -> FastAPI:
    """The app; its client is made at start-up (in the server's event loop) and closed at the
    end. Start checks (tokens, loopback) are the caller's: :func:`serving.serve`."""
    server = settings or ServerSettings()
    tokens = TokenTable.parse(server.api_tokens)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        base = client_settings or ClientSettings()
        # One client per tenant a token names: each names only its tenant's keys.
        clients = {tenant: AsyncCompactionClient(base, tenant=tenant)
                   for tenant in tokens.tenants()}
        try:
            await clients[DEFAULT_TENANT].warm()
        except CompactorError as err:  # /readyz says so until Redis answers
            log.warning("Redis not reachable at start: %s", err)
        # One reader of the process for every long poll and event stream (server.fanout).
        fanout = Fanout(base, [client.layout for client in clients.values()],
                        server.api_waiters_max)
        fanout.start()
        app.state.compactor = {tenant: ServerState(client, server, tokens, fanout)
                               for tenant, client in clients.items()}
        try:
            yield
        finally:
            await fanout.aclose()
            for client in clients.values():
                await client.aclose()

    app = FastAPI(title="Compactor", version=API_VERSION, lifespan=lifespan,
                  docs_url=None, redoc_url=None, openapi_url="/openapi.json",
                  responses={"4XX": _PROBLEM, "5XX": _PROBLEM},
                  # operationId = the handler's name (create_session): stable for generators.
                  generate_unique_id_function=lambda route: route.name,
                  description="Sessions, compaction jobs and their events over HTTP; "
                              "docs/http-api.md \"The HTTP API\".")
    # Starlette matches a request against the routes in their order: the two platforms call on
    # every turn come first (compact, job_routes' first; append, session_routes' first).
    for module in (job_routes, session_routes, event_stream, model_routes, usage_routes,
                   worker_routes):
        _include_flat(app, module.router)
    _probes(app)
    _document_problems(app, auth=bool(tokens.entries))
    app.add_exception_handler(CompactorError, _on_compactor_error)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(HTTPException, _on_http)
    app.add_exception_handler(Exception, _on_crash)
    app.add_middleware(BodyLimit, max_bytes=server.api_max_body_bytes)
    app.add_middleware(TenantGuards, settings=server, local_only=not tokens.entries)
    app.add_middleware(BearerAuth, tokens=tokens)  # outermost: no body is read before it
    # Outside it all, reading nothing: an overloaded process sheds load first (429).
    app.add_middleware(InFlightLimit, limit=server.api_inflight_max)
    return app
