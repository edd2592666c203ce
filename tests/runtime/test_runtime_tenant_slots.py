"""Per-tenant concurrency through a real worker and a loopback model whose calls are held: a
tenant capped at one running job never has two running, its next job waits queued while another
tenant's job runs beside it (put back each time the sweep sends it), and it runs once the first
ends."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import CALLS_AT_ONCE, new_session, runtime_settings

from api_client import CompactionClient
from helpers.waits import wait_until
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


def _put_back(caplog: pytest.LogCaptureFixture, job_id: str) -> int:
    """How many times a worker put ``job_id`` back (its tenant ran max_running jobs already)."""
    return sum(job_id in r.getMessage() and "put back" in r.getMessage()
               for r in list(caplog.records))


def test_a_tenant_over_its_cap_waits_while_another_runs(
        clients: dict[str, CompactionClient], model: ModelServer, demo_text: str,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="worker.service")
    acme, globex = clients["acme"], clients["globex"]
    acme.redis.hset(acme.layout.tenant_quota("acme"), "max_running", "1")
    held = model.held
    model.stall_next(10)
    first, second = (acme.compact(new_session(acme, demo_text)) for _ in range(2))
    other = globex.compact(new_session(globex, demo_text))
    both = [first.id, second.id]
    # acme's one running job and globex's job hold their model calls; the third slot is free.
    wait_until(lambda: other.record().state.value == "running" and _running(acme, both) == 1
               and model.held - held == 2 * CALLS_AT_ONCE,
               what="one acme and one globex job held")
    waiting = second if first.record().state.value == "running" else first

    def put_back_again() -> bool:  # the sweep sent it again and it was put back again
        assert _running(acme, both) == 1 and model.held - held == 2 * CALLS_AT_ONCE
        return _put_back(caplog, waiting.id) >= 2

    wait_until(put_back_again, what=f"{waiting.id} put back twice")
    assert waiting.record().state.value == "queued"
    assert other.record().state.value == "running"
    model.release()
    for handle in (first, second, other):
        assert handle.wait(30)["type"] == "compaction"
    # the slot is given back right after the job's end event
    wait_until(lambda: not acme.redis.exists(acme.layout.tenant_running("acme")),
               what="acme's running set emptied")
