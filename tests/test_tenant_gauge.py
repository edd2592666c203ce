"""The named tenants' queued and running jobs, read from a real Redis at scrape time."""

from __future__ import annotations

import redis

from api_client import CompactionClient
from api_client.contract.keys import KeyLayout
from worker.observability.tenant_gauge import TenantQueueCollector


def _samples(collector: TenantQueueCollector) -> dict[tuple[str, str], float]:
    return {(family.name, sample.labels["tenant"]): sample.value
            for family in collector.collect() for sample in family.samples}


def test_named_tenants_queued_and_running_jobs(redis_url: str) -> None:
    raw: redis.Redis[str] = redis.Redis.from_url(redis_url, decode_responses=True)
    with CompactionClient(redis_url, tenant="acme") as acme, \
            CompactionClient(redis_url, tenant="globex") as globex:
        for client, count in ((acme, 3), (globex, 1)):
            for i in range(count):
                client.compact(client.sessions.create(f"s{i}"))  # no worker: they stay queued
        raw.zadd(acme.layout.tenant_running("acme"), {"acme~s0:0123456789abcdef": 1e15})
        collector = TenantQueueCollector(raw, KeyLayout(), ["acme", "default"])
        assert _samples(collector) == {
            ("compactor_tenant_queued_jobs", "acme"): 3,
            ("compactor_tenant_queued_jobs", "default"): 0,
            ("compactor_tenant_running_jobs", "acme"): 1,
            ("compactor_tenant_running_jobs", "default"): 0,
        }  # globex is no named tenant: no series of its own


def test_a_scrape_answers_when_redis_does_not() -> None:
    down: redis.Redis[str] = redis.Redis(port=1, socket_connect_timeout=0.2)
    assert list(TenantQueueCollector(down, KeyLayout(), ["acme"]).collect()) == []
