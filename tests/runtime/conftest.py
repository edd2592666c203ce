"""Fixtures for the runtime tests: private Redis servers, real Celery workers (threads pool, in
this process), the thin client, the sample session, a loopback model server."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from runtime.runtime_model_server import ModelServer

from api_client import CompactionClient
from worker.demo import embedded_redis

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "worker" / "data" / "demo-session.jsonl"


@pytest.fixture(scope="session")
def demo_text() -> str:
    return DEMO.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def module_redis() -> Iterator[str]:
    """A Redis of this module's own (its worker and its sessions outlive single tests)."""
    with embedded_redis() as url:
        yield url


@pytest.fixture(scope="module")
def client_for() -> Iterator[Callable[[str], CompactionClient]]:
    clients: list[CompactionClient] = []

    def make(url: str) -> CompactionClient:
        clients.append(CompactionClient(url))
        return clients[-1]

    yield make
    for c in clients:
        c.close()




@pytest.fixture(scope="module")
def model() -> Iterator[ModelServer]:
    """A loopback OpenAI-compatible model server, shared by a module's tests."""
    server = ModelServer()
    yield server
    server.close()
