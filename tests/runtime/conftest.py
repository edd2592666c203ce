"""Fixtures for the runtime tests: private Redis servers, real Celery workers (threads pool, in
this process), the thin client, the sample session, a loopback model server.

A module's worker is ``app`` (on ``module_redis``, started once per module) with the settings of
``worker_settings``; a module overrides ``worker_settings`` for its own, and ``client`` to reset
state around each test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import running_worker, runtime_settings

from api_client import CompactionClient
from worker.celery_app import CompactorCelery
from worker.cli.demo import embedded_redis
from worker.settings import WorkerSettings

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
def worker_settings(module_redis: str) -> WorkerSettings:
    """The settings of the module's worker: a module that needs others (models, hooks, deadlines)
    overrides this fixture, and ``app`` starts its worker with them."""
    return runtime_settings(module_redis)


@pytest.fixture(scope="module")
def app(worker_settings: WorkerSettings) -> Iterator[CompactorCelery]:
    """The module's worker (threads pool, in this process), shared by the module's tests."""
    with running_worker(worker_settings) as worker_app:
        yield worker_app


@pytest.fixture
def client(app: CompactorCelery, module_redis: str,
           client_for: Callable[[str], CompactionClient]) -> CompactionClient:
    """A client of the module's Redis, its worker running. A module that resets state around
    each test overrides this fixture and asks for this one by the same name."""
    return client_for(module_redis)


@pytest.fixture(scope="module")
def model() -> Iterator[ModelServer]:
    """A loopback OpenAI-compatible model server, shared by a module's tests."""
    server = ModelServer()
    yield server
    server.close()
