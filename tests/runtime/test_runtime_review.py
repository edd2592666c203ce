"""Review of the runtime's invariants: each test reproduces a path that broke one (real Redis,
real in-process worker, loopback model over HTTP)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pydantic import SecretStr
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import (
    completions,
    new_session,
    running_worker,
    runtime_settings,
)

from api_client import CompactionClient
from worker.app import CompactorCelery
from worker.llm import ModelCandidate


@pytest.fixture(scope="module")
def model() -> Iterator[ModelServer]:
    server = ModelServer()
    yield server
    server.close()


@pytest.fixture(scope="module")
def app(module_redis: str, model: ModelServer) -> Iterator[CompactorCelery]:
    candidate = ModelCandidate(provider="openai", model="loop", base_url=model.base_url,
                               api_key=SecretStr("test-key"), context_window=200_000)
    settings = runtime_settings(module_redis, models=[candidate], lease_ttl_s=1.5)
    with running_worker(settings) as worker_app:
        yield worker_app


@pytest.fixture
def client(app: CompactorCelery, module_redis: str, model: ModelServer,
           client_for: Callable[[str], CompactionClient]) -> Iterator[CompactionClient]:
    yield client_for(module_redis)
    model.release()


def _delivery(app: CompactorCelery, job_id: str) -> dict[str, Any]:
    """What the worker's delivery of ``job_id`` (task id = job id) returned."""
    result: dict[str, Any] = app.AsyncResult(job_id).get(timeout=20)
    return result


def test_a_delivery_that_lost_its_lease_leaves_the_job_to_the_new_holder(
        app: CompactorCelery, client: CompactionClient, model: ModelServer, demo_text: str) -> None:
    """The heartbeat finds another worker's lease while a model call is in flight: the call is
    aborted, and this delivery must stop without ending the job the other worker now runs (it
    used to fail the job: 'lease lost to another worker')."""
    sid = new_session(client, demo_text)
    text = client.sessions.export_jsonl(sid)
    model.stall_next(1)
    handle = client.compact(sid, reason="manual")
    assert model.in_flight.wait(10)
    # This worker stalled past its lease and a second delivery took the job over.
    client.redis.set(client.layout.job(handle.id).lease, "other-worker", px=60_000)
    assert _delivery(app, handle.id)["state"] == "abandoned"
    record = client.jobs.get(handle.id)
    assert (record.state.value, record.error) == ("running", None)
    assert completions(client, sid, handle.id) == []
    assert client.sessions.export_jsonl(sid) == text
