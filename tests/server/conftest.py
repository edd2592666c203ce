"""Fixtures of the HTTP API tests: per module a Redis of its own (``module_redis``, which marks
a test ``integration``), a loopback OpenAI-compatible model, a real worker (threads pool, in
this process) whose only candidate is that model, and the API on uvicorn over real sockets."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from llm.llm_fakes import FAST, FakeLLMServer, openai
from runtime.runtime_support import running_worker, runtime_settings
from server.server_support import ACME, GLOBEX, TOKEN, running_api, server_settings, wait_alive

from worker.celery_app import CompactorCelery
from worker.cli.demo import embedded_redis
from worker.llm import ModelCandidate

MODEL = "loop"


@pytest.fixture(scope="module")
def module_redis() -> Iterator[str]:
    with embedded_redis() as url:
        yield url


@pytest.fixture(scope="module")
def model_server() -> Iterator[FakeLLMServer]:
    server = FakeLLMServer()
    yield server
    server.close()


@pytest.fixture(scope="module")
def worker(module_redis: str, model_server: FakeLLMServer) -> Iterator[CompactorCelery]:
    candidate = ModelCandidate.model_validate(openai(model_server, MODEL, api_key="sk-test"))
    settings = runtime_settings(module_redis, models=[candidate], **FAST)
    with running_worker(settings) as app:
        wait_alive(module_redis)  # else a summary asked at once is answered 424 no_worker
        yield app


@pytest.fixture(scope="module")
def api(module_redis: str, worker: CompactorCelery) -> Iterator[str]:
    """The API's base URL; quick keepalives and a short long-poll cap for the tests."""
    with running_api(module_redis, server_settings(api_sse_keepalive_s=0.3,
                                                   api_max_wait_s=20.0)) as url:
        yield url


@pytest.fixture
def http(api: str, model_server: FakeLLMServer) -> Iterator[httpx.Client]:
    """A client with the token; the model answers every request with a success."""
    model_server.scripts.clear()
    with httpx.Client(base_url=api, headers={"Authorization": f"Bearer {TOKEN}"},
                      timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def tenant_api(module_redis: str, worker: CompactorCelery) -> Iterator[str]:
    """The API with tokens of three tenants: ``TOKEN`` (default), ``ACME``, ``GLOBEX``."""
    tokens = {TOKEN: "default", ACME: "acme", GLOBEX: "globex"}
    with running_api(module_redis, server_settings(tokens, api_max_wait_s=20.0)) as url:
        yield url
