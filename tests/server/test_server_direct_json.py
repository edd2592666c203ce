"""The routes that read their JSON body themselves (api_client/server/app_route.py): a body
they cannot take as it is goes to FastAPI's own handler, so every refusal is FastAPI's, byte for
byte; the common case skips FastAPI's parameter machinery."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import fastapi.routing
import httpx
import pytest
from server.server_support import TOKEN, running_api, server_settings, tenant_http

from api_client import ClientSettings, CompactionClient
from api_client.server import app_route
from api_client.server.asgi import create_app

JSON = {"content-type": "application/json"}
# (content, headers) of bodies each route must refuse (or take) exactly as FastAPI does.
ODD: list[tuple[bytes, dict[str, str]]] = [
    (b'{"reason": "manual"}', {}),
    (b'{"reason": "manual"}', {"content-type": "text/plain"}),
    (b'{"reason": "manual"}', {"content-type": "application/vnd.compactor+json"}),
    (b"", JSON),
    (b"{x", JSON),
    (b'{"reason": "\xff\xfe"}', JSON),
    (b"[" * 100_000, JSON),
    (b"[]", JSON),
    (b'"manual"', JSON),
    (b"null", JSON),
    (b'{"reason": 5}', JSON),
    (b'{"reason": "sometimes"}', JSON),
    (b'{"reason": "manual", "surprise": 1}', JSON),
    (b'{"entries": "x"}', JSON),
    (b'{"entries": [1]}', JSON),
    (b'{"entries": []}', {"content-type": "application/json; charset=utf-8"}),
    (b'{"entries": [], "more": true}', JSON),
]
ROUTES = ("/v1/sessions/{}/compact", "/v1/sessions/{}/entries")


@pytest.fixture(scope="module")
def both(module_redis: str) -> Iterator[tuple[str, str]]:
    """The app as served, and the same app with every body read by FastAPI."""
    direct = create_app(server_settings(), ClientSettings(redis_url=module_redis))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(app_route, "DIRECT_JSON_ROUTES", frozenset())
        plain = create_app(server_settings(), ClientSettings(redis_url=module_redis))
    with running_api(module_redis, app=direct) as direct_url, \
            running_api(module_redis, app=plain) as plain_url:
        yield direct_url, plain_url


def _answer(url: str, path: str, content: bytes, headers: dict[str, str]) -> tuple[Any, ...]:
    with tenant_http(url, TOKEN) as http:
        answer = http.post(path, content=content, headers=headers)
    return answer.status_code, answer.headers.get("content-type"), answer.content


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(("content", "headers"), ODD)
def test_a_body_is_answered_as_fastapi_answers_it(
        both: tuple[str, str], route: str, content: bytes, headers: dict[str, str]) -> None:
    path = route.format("no-such-session")  # taken bodies end in 404 session_not_found
    direct, plain = (_answer(url, path, content, headers) for url in both)
    assert direct == plain


def test_the_common_body_skips_fastapis_parameters_and_an_odd_one_does_not(
        both: tuple[str, str], module_redis: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with CompactionClient(module_redis) as client:
        client.sessions.create("direct-1")
    solved: list[object] = []
    solve = fastapi.routing.solve_dependencies

    async def counted(*args: Any, **kwargs: Any) -> Any:
        solved.append(kwargs.get("dependant"))
        return await solve(*args, **kwargs)

    monkeypatch.setattr(fastapi.routing, "solve_dependencies", counted)
    url = both[0]
    with tenant_http(url, TOKEN) as http:
        appended = http.post("/v1/sessions/direct-1/entries", json={"entries": [
            {"role": "user", "content": "next step", "timestamp": 1}]})
        assert appended.status_code == 200, appended.text
        assert appended.json()["revision"] >= 1
        compacted = http.post("/v1/sessions/direct-1/compact", json={"reason": "manual"})
        assert compacted.status_code == 202, compacted.text
        assert compacted.headers["location"] == f"/v1/jobs/{compacted.json()['jobId']}"
        assert solved == []
        refused = http.post("/v1/sessions/direct-1/compact", json={"reason": 5})
    assert refused.status_code == 422 and refused.json()["code"] == "validation_error"
    assert len(solved) == 1
    assert httpx.get(url + "/livez").status_code == 200


def test_the_routes_called_on_every_turn_are_declared_first() -> None:
    """Starlette matches a request against the routes in order (compact's was the tenth): compact
    is the first, append the first of the session routes."""
    from fastapi.routing import APIRoute

    routes = [r.name for r in create_app(server_settings()).router.routes
              if isinstance(r, APIRoute)]
    from api_client.server import job_routes

    assert routes[0] == "compact"
    assert routes.index("append_entries") == len(job_routes.router.routes)  # right after them
