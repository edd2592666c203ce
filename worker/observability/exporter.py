"""The worker's exporter: ``/metrics`` with every scrape-time gauge, ``/livez`` and ``/readyz``
(docs/operations.md), started by the Celery wiring in the main process."""

from __future__ import annotations

from typing import Any

import redis

from api_client.contract.keys import ANY_TENANT, KeyLayout
from api_client.contract.routing import QUEUES
from worker.llm.cooldown import RedisCooldownStore
from worker.observability import metrics
from worker.observability.cooldown_gauge import CooldownCollector
from worker.observability.health import worker_health
from worker.observability.queue_depth import QueueDepthCollector
from worker.observability.session_gauge import SessionGaugeCollector
from worker.observability.tenant_gauge import TenantQueueCollector
from worker.settings import WorkerSettings

__all__ = ["start_metrics"]


def start_metrics(settings: WorkerSettings) -> None:
    """Serve /metrics, /livez and /readyz (main process; before a prefork pool forks)."""
    depth = QueueDepthCollector(settings.client.resolved_broker_url, QUEUES,
                                prefix=KeyLayout(settings.client.key_prefix).broker)
    health = worker_health()
    # Probes must answer within their timeout: a client of their own with short timeouts.
    sessions = redis.Redis.from_url(settings.client.redis_url, socket_timeout=2,
                                    socket_connect_timeout=2)
    health.dependencies = {"redis": sessions.ping, "broker": depth.read}
    assert settings.metrics_port
    metrics.start(settings.metrics_port, address=str(settings.metrics_address),
                  multiprocess_mode=settings.pool == "prefork",
                  collectors=[depth, _cooldown_gauge(settings, sessions),
                              *_session_gauge(settings, sessions),
                              *_tenant_gauge(settings, sessions)],
                  live=health.live, ready=health.ready, tenants=settings.metrics_tenants)


def _session_gauge(settings: WorkerSettings, client: Any) -> list[Any]:
    """Stored sessions and bytes, every tenant's; not on a Redis Cluster (one SCAN walks one
    node)."""
    if settings.client.redis_cluster:
        return []
    return [SessionGaugeCollector(client, KeyLayout(settings.client.key_prefix, ANY_TENANT))]


def _tenant_gauge(settings: WorkerSettings, client: Any) -> list[Any]:
    """Named tenants' queued and running jobs; not on a Redis Cluster (a plain client)."""
    if settings.client.redis_cluster:
        return []
    return [TenantQueueCollector(client, KeyLayout(settings.client.key_prefix),
                                 settings.metrics_tenants)]


def _cooldown_gauge(settings: WorkerSettings, client: Any) -> Any:
    store = RedisCooldownStore(client, prefix=settings.llm_cooldown_prefix)
    return CooldownCollector(store, {c.cooldown_key: c.label for c in settings.models})
