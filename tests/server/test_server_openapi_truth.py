"""Each mismatch Schemathesis found between the OpenAPI document and the server (issue 39 item
5), reproduced on its own: what the server sends and what the document declares agree
(tests/server/test_server_openapi_fuzz.py runs Schemathesis itself)."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError
from server.server_support import running_api, server_settings

from api_client import AgentSettings
from api_client.contract.keys import check_session_id, split_job_id
from api_client.server.asgi import problem_codes
from api_client.server.schemas import ChatCompletionRequest, SummarizeRequest

REPO = Path(__file__).resolve().parents[2]
DOCUMENT: dict[str, Any] = json.loads((REPO / "docs" / "openapi.json").read_text("utf-8"))
PROBLEM = "application/problem+json"


def _problem(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    assert response.json()["code"] == code


def _parameter(path: str, method: str, name: str) -> dict[str, Any]:
    found = [p for p in DOCUMENT["paths"][path][method]["parameters"] if p["name"] == name]
    assert len(found) == 1
    schema: dict[str, Any] = found[0]["schema"]
    return schema


def test_the_document_declares_every_code_and_the_id_patterns_the_server_checks() -> None:
    enum = DOCUMENT["components"]["schemas"]["ProblemBody"]["properties"]["code"]["enum"]
    assert set(enum) == problem_codes() and "invalid_json" in enum
    assert not any(code.startswith("http_") for code in enum)
    session = re.compile(_parameter("/v1/sessions/{session_id}", "get", "session_id")["pattern"])
    job = re.compile(_parameter("/v1/jobs/{job_id}", "get", "job_id")["pattern"])
    for good in ("s1", "a" * 256, "0.b:c-d_e"):
        assert session.search(good) and check_session_id(good) == good
    for bad in ("", "-s", "a" * 257, "s'1", "é", "acme~s1"):
        assert not session.search(bad)
    token = "0123456789abcdef"
    for good in (f"s1:{token}", f"acme~s1:{token}", f"a:b:{token}"):
        assert job.search(good) and split_job_id(good)[1] == token
    for bad in ("s1", f"s1:{token}0", f"Acme~s1:{token}", f"s'1:{token}"):
        assert not job.search(bad)


def test_json_integers_are_integers_not_booleans_or_strings() -> None:
    assert AgentSettings.model_validate({"reserveTokens": 536.0}).reserve_tokens == 536
    assert SummarizeRequest.model_validate_json('{"prompt": "x", "maxTokens": 8.0}').max_tokens == 8
    for value in ("true", '"5"', "5.5"):
        with pytest.raises(ValidationError):
            SummarizeRequest.model_validate_json(f'{{"prompt": "x", "maxTokens": {value}}}')
        with pytest.raises(ValidationError):
            AgentSettings.model_validate_json(f'{{"reserveTokens": {value}}}')
    with pytest.raises(ValidationError):
        ChatCompletionRequest.model_validate_json('{"messages": [{"role": "user"}], "stream": 0}')


@pytest.mark.integration
def test_a_body_that_is_not_utf8_or_nests_too_deep_is_invalid_json(http: httpx.Client) -> None:
    headers = {"Content-Type": "application/json"}
    _problem(http.post("/v1/sessions", content=b'{"cwd": "\xff\xfe"}', headers=headers),
             400, "invalid_json")
    _problem(http.post("/v1/sessions", content=b"[" * 100_000, headers=headers),
             400, "invalid_json")


@pytest.mark.integration
def test_405_allows_every_method_of_the_path(http: httpx.Client) -> None:
    for path, allowed in (("/v1/sessions/s1", "DELETE, GET"), ("/v1/sessions/s1/jsonl", "GET, PUT"),
                          ("/v1/summarize/" + "x" * 43, "POST")):
        response = http.request("OPTIONS", path)
        _problem(response, 405, "method_not_allowed")
        assert response.headers["allow"] == allowed
        documented = {m.upper() for m in DOCUMENT["paths"][_template(path)]}
        assert set(allowed.split(", ")) == documented
    # A summarize URL's credential is its secret: a wrong method is 405 whatever the secret.
    base = str(http.base_url).rstrip("/")
    response = httpx.request("TRACE", f"{base}/v1/summarize/{'x' * 43}")  # no Authorization
    _problem(response, 405, "method_not_allowed")


def _template(path: str) -> str:
    if path.startswith("/v1/summarize/"):
        return "/v1/summarize/{url_secret}"
    return path.replace("/s1", "/{session_id}")


@pytest.mark.integration
def test_the_events_of_a_session_that_does_not_exist_are_404(http: httpx.Client) -> None:
    name = f"s-{uuid.uuid4().hex[:10]}"
    _problem(http.get(f"/v1/sessions/{name}/events", params={"follow": "false"}),
             404, "session_not_found")
    assert http.post("/v1/sessions", json={"sessionId": name}).status_code == 201
    assert http.get(f"/v1/sessions/{name}/events", params={"follow": "false"}).status_code == 200
    assert http.delete(f"/v1/sessions/{name}").status_code == 204
    _problem(http.get(f"/v1/sessions/{name}/events", params={"follow": "false"}),
             404, "session_not_found")
    # since= is checked though Last-Event-ID wins
    _problem(http.get("/v1/events", params={"since": "", "follow": "false"},
                      headers={"Last-Event-ID": "start"}), 400, "invalid_request")


@pytest.mark.integration
def test_without_tokens_the_served_document_asks_for_no_credential(module_redis: str) -> None:
    """--insecure-no-auth: no route wants a token and a summarize URL takes any secret; with
    tokens the server serves docs/openapi.json's security."""
    with running_api(module_redis, server_settings({})) as url:
        served = httpx.get(f"{url}/openapi.json").json()
    assert "securitySchemes" not in served["components"]
    operations = [op for path in served["paths"].values() for op in path.values()]
    assert operations and not any("security" in op for op in operations)
    secret = served["paths"]["/v1/summarize/{url_secret}"]["post"]["parameters"][0]["schema"]
    assert "pattern" not in secret
    with running_api(module_redis) as url:
        assert httpx.get(f"{url}/openapi.json").json() == DOCUMENT
