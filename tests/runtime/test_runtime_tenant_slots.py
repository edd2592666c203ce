"""Per-tenant concurrency through a real worker and a loopback model whose calls are held: a
tenant capped at one running job never has two running, its next job waits queued while another
tenant's job runs beside it, and it runs once the first ends."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import new_session, runtime_settings

from api_client import CompactionClient
from worker.settings import WorkerSettings


@pytest.fixture(scope="module")
def worker_settings(module_redis: str, model: ModelServer) -> WorkerSettings:
    return runtime_settings(module_redis, models=[model.candidate()], concurrency=3,
                            sweep_interval_s=0.2)


@pytest.fixture
def clients(client: CompactionClient, module_redis: str,
            model: ModelServer) -> Iterator[dict[str, CompactionClient]]:
    pair = {name: CompactionClient(module_redis, tenant=name) for name in ("acme", "globex")}
    yield pair
    model.release()
    for c in pair.values():
        c.close()


def _running(client: CompactionClient, job_ids: list[str]) -> int:
    return sum(client.job(j).record().state.value == "running" for j in job_ids)


def test_a_tenant_over_its_cap_waits_while_another_runs(
        clients: dict[str, CompactionClient], model: ModelServer, demo_text: str) -> None:
    acme, globex = clients["acme"], clients["globex"]
    acme.redis.hset(acme.layout.tenant_quota("acme"), "max_running", "1")
    model.stall_next(10)
    first, second = (acme.compact(new_session(acme, demo_text)) for _ in range(2))
    other = globex.compact(new_session(globex, demo_text))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not (
            other.record().state.value == "running" and _running(acme, [first.id, second.id])):
        time.sleep(0.05)
    held = model.held  # acme's first job's and globex's calls: the worker's third slot is free
    watched_until = time.monotonic() + 1.5  # several sweeps send acme's second job again
    while time.monotonic() < watched_until:
        assert _running(acme, [first.id, second.id]) == 1
        time.sleep(0.05)
    assert model.held == held and other.record().state.value == "running"
    waiting = second if first.record().state.value == "running" else first
    assert waiting.record().state.value == "queued"
    model.release()
    for handle in (first, second, other):
        assert handle.wait(30)["type"] == "compaction"
    deadline = time.monotonic() + 5  # a slot is given back right after the job's end event
    while acme.redis.exists(acme.layout.tenant_running("acme")) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not acme.redis.exists(acme.layout.tenant_running("acme"))
