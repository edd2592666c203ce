"""Fixtures of the model-layer tests: the loopback model server and routers built from
settings."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from llm.llm_fakes import FAST, FakeLLMServer

from worker.llm import build_summarizer
from worker.llm.router import Router
from worker.llm.settings import LlmSettings, ModelCandidate


@pytest.fixture
def llm_server() -> Iterator[FakeLLMServer]:
    server = FakeLLMServer()
    yield server
    server.close()


@pytest.fixture
def make_router() -> Iterator[Callable[..., Router]]:
    """``make_router([candidate dicts], redis_client=None, **setting overrides)`` with FAST
    defaults."""
    routers: list[Router] = []

    def make(models: list[dict[str, Any]], redis_client: Any = None, **overrides: Any) -> Router:
        settings = LlmSettings(models=[ModelCandidate.model_validate(m) for m in models],
                               **{**FAST, **overrides})
        router = build_summarizer(settings, redis_client)
        routers.append(router)
        return router

    yield make
    for router in routers:
        router.close()
