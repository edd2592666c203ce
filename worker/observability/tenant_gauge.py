"""Each named tenant's queued and running jobs, read from Redis at scrape time
(``compactor_tenant_queued_jobs``, ``compactor_tenant_running_jobs``): which tenant floods the
queues, and whether its ``max_running`` cap holds it.

Only the tenants of ``COMPACTOR_METRICS_TENANTS`` (a bounded label: no sum over every other
tenant, which would need a walk of the keyspace per scrape): one pipeline of two ``ZCARD`` each.
A running count is kept only while a cap applies to the tenant. Every worker reports the same
values: aggregate with ``max``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client.core import GaugeMetricFamily

from api_client.contract.keys import KeyLayout

__all__ = ["TenantQueueCollector"]

log = logging.getLogger("worker.metrics")


class TenantQueueCollector:
    def __init__(self, client: Any, layout: KeyLayout, tenants: Sequence[str]) -> None:
        self.redis = client
        self.layout = layout
        self.tenants = list(tenants)

    def collect(self) -> Iterator[Any]:
        queued = GaugeMetricFamily(
            "compactor_tenant_queued_jobs",
            "Jobs of a tenant queued now (the fair order's count; named tenants only)",
            labels=["tenant"])
        running = GaugeMetricFamily(
            "compactor_tenant_running_jobs",
            "Jobs of a tenant running now, while a max_running cap applies to it",
            labels=["tenant"])
        pipe = self.redis.pipeline(transaction=False)
        for tenant in self.tenants:
            pipe.zcard(self.layout.tenant_queued(tenant))
            pipe.zcard(self.layout.tenant_running(tenant))
        try:
            counts = pipe.execute()
        except Exception as err:  # a scrape must answer; the broker gauge says Redis is down
            log.warning("tenant gauges not read: %s", err)
            return
        for i, tenant in enumerate(self.tenants):
            queued.add_metric([tenant], counts[2 * i])
            running.add_metric([tenant], counts[2 * i + 1])
        yield queued
        yield running
