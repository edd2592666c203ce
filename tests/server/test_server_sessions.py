"""The HTTP API's sessions, auth, body limit and probes, over real sockets against a real Redis
(uvicorn in this process; tests/server/conftest.py)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import free_port
from server.server_support import TOKEN, running_api, server_settings

REPO = Path(__file__).resolve().parents[2]
DEMO = (REPO / "worker" / "data" / "demo-session.jsonl").read_text(encoding="utf-8")
PROBLEM = "application/problem+json"


def sid() -> str:
    return f"s-{uuid.uuid4().hex[:10]}"


def problem(response: httpx.Response, status: int, code: str) -> dict[str, object]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body: dict[str, object] = response.json()
    assert body["code"] == code and body["status"] == status
    return body


def test_every_route_but_the_probes_and_the_document_wants_the_token(api: str) -> None:
    for path in ("/livez", "/readyz", "/openapi.json"):
        assert httpx.get(api + path).status_code == 200
    missing = httpx.get(f"{api}/v1/sessions/x")
    problem(missing, 401, "unauthorized")
    assert missing.headers["www-authenticate"].startswith("Bearer")
    wrong = httpx.post(f"{api}/v1/summarize", json={"prompt": "x"},
                       headers={"Authorization": f"Bearer {TOKEN}x"})
    assert problem(wrong, 401, "unauthorized")["detail"] == "unknown bearer token"
    problem(httpx.get(f"{api}/v1/events", headers={"Authorization": "Basic abc"}),
            401, "unauthorized")
    # Refused from the headers: no body of a caller without a token is read.
    problem(httpx.put(f"{api}/v1/sessions/x/jsonl", content=b"x" * 20_000_000), 401,
            "unauthorized")


def test_the_bearer_scheme_is_documented_not_resolved_per_request(
        http: httpx.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """BearerAuth checks the token before routing; the routes' HTTPBearer dependency only
    writes the scheme into the document (resolving it per request cost CPU: issue 42)."""
    from fastapi.security import HTTPBearer

    async def resolved(*_: object, **__: object) -> None:
        raise AssertionError("the bearer dependency ran")

    monkeypatch.setattr(HTTPBearer, "__call__", resolved)
    name = sid()
    assert http.post("/v1/sessions", json={"sessionId": name}).status_code == 201
    assert http.get(f"/v1/sessions/{name}").status_code == 200
    document = http.get("/openapi.json").json()
    assert document["paths"]["/v1/sessions/{session_id}/compact"]["post"]["security"] == [
        {"HTTPBearer": []}]
    assert document["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"


def test_create_without_a_body_is_a_new_uuid(http: httpx.Client) -> None:
    created = http.post("/v1/sessions")  # no body at all: docs/http-api.md, a new UUID
    assert created.status_code == 201, created.text
    fresh = created.json()["sessionId"]
    assert str(uuid.UUID(fresh)) == fresh and created.headers["location"] == f"/v1/sessions/{fresh}"
    assert http.get(f"/v1/sessions/{fresh}").json()["entries"] == []


def test_error_bodies_are_compact_json(api: str, http: httpx.Client) -> None:
    """401 (answered before routing) is written like every other problem: compact JSON."""
    unauthorized = httpx.get(f"{api}/v1/sessions/x")
    not_found = http.get(f"/v1/sessions/{sid()}")
    for response in (unauthorized, not_found):
        body = response.json()
        assert response.content == json.dumps(body, separators=(",", ":")).encode(), body
    assert (unauthorized.status_code, not_found.status_code) == (401, 404)


def test_create_read_export_delete(http: httpx.Client) -> None:
    name = sid()
    created = http.post("/v1/sessions", json={"sessionId": name, "cwd": "/repo", "title": "t"})
    assert created.status_code == 201 and created.json() == {"sessionId": name}
    assert created.headers["location"] == f"/v1/sessions/{name}"
    problem(http.post("/v1/sessions", json={"sessionId": name}), 409, "session_exists")
    fresh = http.post("/v1/sessions", json={}).json()["sessionId"]
    assert uuid.UUID(fresh)
    view = http.get(f"/v1/sessions/{name}").json()
    assert view == {"sessionId": name, "revision": 1, "leafId": None, "entries": []}
    exported = http.get(f"/v1/sessions/{name}/jsonl")
    assert exported.headers["content-type"].startswith("application/x-ndjson")
    assert '"cwd":"/repo"' in exported.text and '"title":"t"' in exported.text
    assert http.delete(f"/v1/sessions/{name}").status_code == 204
    problem(http.delete(f"/v1/sessions/{name}"), 404, "session_not_found")
    problem(http.get(f"/v1/sessions/{name}"), 404, "session_not_found")
    problem(http.get("/v1/sessions/a%20b"), 400, "invalid_id")


def test_jsonl_import_is_byte_for_byte_and_refuses_a_bad_file_whole(http: httpx.Client) -> None:
    name = sid()
    put = http.put(f"/v1/sessions/{name}/jsonl", content=DEMO.encode())
    assert put.status_code == 201 and put.json() == {"sessionId": name}
    assert http.get(f"/v1/sessions/{name}/jsonl").text.splitlines()[1:] == DEMO.splitlines()[1:]
    problem(http.put(f"/v1/sessions/{name}/jsonl", content=DEMO.encode()), 409,
            "session_exists")
    replaced = http.put(f"/v1/sessions/{name}/jsonl", params={"replace": "true"},
                        content=DEMO.encode())
    assert replaced.status_code == 200
    lines = DEMO.splitlines()
    broken = "\n".join([*lines[:3], "{not json", *lines[3:]]) + "\n"
    body = problem(http.put(f"/v1/sessions/{sid()}/jsonl", content=broken.encode()), 422,
                   "session_format")
    assert body["line"] == 4


def test_entries_keep_their_ids_and_say_the_revision(http: httpx.Client) -> None:
    name = http.post("/v1/sessions", json={"sessionId": sid()}).json()["sessionId"]
    first = {"type": "message", "id": "pi-0001", "parentId": None, "timestamp": "2025-01-01T00:"
             "00:00.000Z", "message": {"role": "user", "content": "fix it", "timestamp": 1}}
    bare = {"role": "assistant", "content": [{"type": "text", "text": "on it"}],
            "provider": "p", "model": "m", "timestamp": 2}
    appended = http.post(f"/v1/sessions/{name}/entries", json={"entries": [first, bare]})
    assert appended.status_code == 200
    body = appended.json()
    assert body["entryIds"][0] == "pi-0001" and len(body["entryIds"]) == 2
    assert body["revision"] == 2
    view = http.get(f"/v1/sessions/{name}").json()
    assert view["leafId"] == body["entryIds"][1] and view["revision"] == 2
    assert view["entries"][1]["parentId"] == "pi-0001"
    context = http.get(f"/v1/sessions/{name}/context").json()
    assert [m["role"] for m in context["messages"]] == ["user", "assistant"]
    assert context["leafId"] == view["leafId"]
    problem(http.post(f"/v1/sessions/{name}/entries", json={"entries": [first]}), 409,
            "entry_exists")
    problem(http.post(f"/v1/sessions/{name}/entries", json={"entries": [{"role": "toolResult",
            "content": []}]}), 422, "message_schema")
    problem(http.post(f"/v1/sessions/{name}/entries", json={"entries": "x"}), 422,
            "validation_error")
    problem(http.post(f"/v1/sessions/{name}/entries", content=b"{x",
                      headers={"content-type": "application/json"}), 400, "invalid_json")
    problem(http.post(f"/v1/sessions/{sid()}/entries", json={"entries": [bare]}), 404,
            "session_not_found")


@pytest.fixture(scope="module")
def small_api(module_redis: str) -> Iterator[str]:
    with running_api(module_redis, server_settings(api_max_body_bytes=4096)) as url:
        yield url


def test_a_body_over_the_limit_is_413_declared_or_streamed(small_api: str) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    url = f"{small_api}/v1/sessions/{sid()}/jsonl"
    declared = httpx.put(url, content=DEMO.encode(), headers=auth)
    assert problem(declared, 413, "body_too_large")["detail"].startswith(
        "the request body is over 4,096 bytes")

    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked transfer
        for start in range(0, 20_000, 1000):
            yield DEMO.encode()[start:start + 1000]

    problem(httpx.put(url, content=chunks(), headers=auth), 413, "body_too_large")
    small = httpx.post(f"{small_api}/v1/sessions", json={}, headers=auth)
    assert small.status_code == 201


def test_without_tokens_on_loopback_and_readiness_without_redis(module_redis: str) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    with running_api(dead, server_settings(tokens={})) as url:
        assert httpx.get(url + "/livez").status_code == 200
        problem(httpx.get(url + "/readyz"), 503, "broker_unavailable")
        problem(httpx.get(url + "/v1/sessions/x"), 503, "broker_unavailable")  # no token needed
    with running_api(module_redis, server_settings(tokens={})) as url:
        assert httpx.post(url + "/v1/sessions", json={}).status_code == 201
