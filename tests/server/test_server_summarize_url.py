"""Summarize URLs (``POST /v1/summarize/<secret>``, docs/oh-my-pi.md): oh-my-pi's remote endpoint
with auth on. The secret in the path is the credential: it names the tenant of the token it was
derived from, a wrong one is the same 401 whatever it is, and the access log never shows it."""

from __future__ import annotations

import json
import logging
import logging.config

import httpx
import pytest
from llm.llm_fakes import FakeLLMServer, ok
from server.server_support import ACME, GLOBEX, TOKEN, running_api, server_settings, tenant_http

from api_client.server.summarize_url import (
    RedactSummarizeSecrets,
    access_log_config,
    redact,
    summarize_url,
    url_secret,
)
from worker.celery_app import CompactorCelery
from worker.cli import main

MODEL = "loop"
ASK = {"systemPrompt": "You summarize.", "prompt": "<conversation>\n[User]: fix it\n"
                                                  "</conversation>", "maxTokens": 300}


def spent_today(api: str, token: str) -> int:
    with tenant_http(api, token) as http:
        days = http.get("/v1/usage", params={"days": 1}).json()["days"]
    return sum(int(v) for day in days for k, v in day.items() if k.endswith("Tokens")
               and isinstance(v, int))


@pytest.mark.integration
def test_a_summarize_url_summarizes_for_its_tokens_tenant(tenant_api: str,
                                                          model_server: FakeLLMServer) -> None:
    model_server.script(MODEL, ok("## Goal\nfix it", input=900, output=40))
    acme_before, globex_before = spent_today(tenant_api, ACME), spent_today(tenant_api, GLOBEX)
    with httpx.Client(timeout=30) as bare:  # no Authorization header, as oh-my-pi sends it
        answer = bare.post(summarize_url(tenant_api, ACME), json=ASK)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"summary": "## Goal\nfix it"}
    assert model_server.seen[-1].body["max_tokens"] == 300
    assert spent_today(tenant_api, ACME) - acme_before == 940  # billed to acme ...
    assert spent_today(tenant_api, GLOBEX) == globex_before  # ... and to no one else


@pytest.mark.integration
def test_a_wrong_summarize_url_is_one_401_whatever_it_is(tenant_api: str,
                                                         model_server: FakeLLMServer) -> None:
    calls = model_server.count(MODEL)
    unknown = url_secret("a-token-no-server-knows-0123")
    wrong = [unknown, ACME, url_secret(ACME)[:-1], url_secret(ACME) + "x",
             url_secret(ACME) + "/more", ""]
    answers = []
    with httpx.Client(base_url=tenant_api, timeout=30) as bare:
        for secret in wrong:
            answers.append(bare.post(f"/v1/summarize/{secret}", json=ASK))
        # A valid bearer token does not open a wrong summarize URL.
        answers.append(bare.post(f"/v1/summarize/{unknown}", json=ASK,
                                 headers={"Authorization": f"Bearer {TOKEN}"}))
    for answer in answers:
        assert answer.status_code == 401, answer.text
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.json()["code"] == "unauthorized"
        assert answer.content == answers[0].content  # nothing tells one wrong URL from another
    assert model_server.count(MODEL) == calls  # no job was made


@pytest.mark.integration
def test_without_tokens_any_summarize_url_is_the_default_tenants(
        module_redis: str, worker: CompactorCelery, model_server: FakeLLMServer) -> None:
    # --insecure-no-auth on loopback: every request is the default tenant's, this one too.
    model_server.script(MODEL, ok("## Goal\nfix it"))
    with running_api(module_redis, server_settings({})) as url, \
            httpx.Client(timeout=30) as bare:
        answer = bare.post(f"{url}/v1/summarize/any-secret-at-all", json=ASK)
    assert answer.status_code == 200, answer.text


def test_each_token_has_its_own_secret_which_does_not_show_the_token() -> None:
    secrets = {url_secret(t) for t in (TOKEN, ACME, GLOBEX)}
    assert len(secrets) == 3 and all(len(s) == 43 for s in secrets)
    assert url_secret(ACME) == url_secret(ACME)
    assert not any(TOKEN[:8] in s for s in secrets)
    assert summarize_url("http://h:1/", ACME) == f"http://h:1/v1/summarize/{url_secret(ACME)}"


def test_the_access_log_shows_no_secret(capsys: pytest.CaptureFixture[str]) -> None:
    assert redact("/v1/summarize/abc?x=1") == "/v1/summarize/<redacted>"
    assert redact("/v1/summarize") == "/v1/summarize"
    logging.config.dictConfig(access_log_config())  # what `compactor serve` gives uvicorn
    access = logging.getLogger("uvicorn.access")
    secret = url_secret(ACME)
    # uvicorn's access line: client, method, path, HTTP version, status
    access.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "POST",
                f"/v1/summarize/{secret}", "1.1", 200)
    access.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "GET", "/v1/usage", "1.1", 200)
    out = capsys.readouterr().out
    assert secret not in out
    assert '"POST /v1/summarize/<redacted> HTTP/1.1" 200' in out
    assert '"GET /v1/usage HTTP/1.1" 200' in out
    assert any(isinstance(f, RedactSummarizeSecrets)
               for h in access.handlers for f in h.filters)


def test_the_cli_prints_a_tokens_url(monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COMPACTOR_TOKEN", ACME)
    assert main(["summarize-url", "--base-url", "https://compactor.example"]) == 0
    assert capsys.readouterr().out == f"https://compactor.example/v1/summarize/{url_secret(ACME)}\n"
    monkeypatch.delenv("COMPACTOR_TOKEN")
    monkeypatch.setenv("COMPACTOR_API_TOKENS", json.dumps({ACME: "acme", GLOBEX: "globex",
                                                           TOKEN: "acme"}))
    assert main(["summarize-url", "--tenant", "acme", "--base-url", "http://h:1"]) == 0
    assert capsys.readouterr().out.splitlines() == [summarize_url("http://h:1", ACME),
                                                    summarize_url("http://h:1", TOKEN)]
    assert main(["summarize-url", "--tenant", "initech"]) == 2
    assert "no token of tenant 'initech'" in capsys.readouterr().err
