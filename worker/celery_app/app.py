"""The Celery app, built from :class:`WorkerSettings`: its configuration, its bootsteps (the
start-up check, the sweep, the heartbeat, the stored-bytes reconcile) and its tasks.

``celery -A worker.celery_app.app worker`` finds :data:`app` (built on first access from the
environment); ``compactor worker`` does the same with a clean error for bad settings. Tests and
the demo call :func:`create_app` with their own settings.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from celery import Celery, bootsteps
from kombu.entity import Queue

from api_client.contract.keys import ANY_TENANT, KeyLayout
from api_client.contract.routing import (
    QUEUE_COMPACT,
    QUEUES,
    Route,
    broker_priority,
    queue_arguments,
    redis_transport_options,
)
from api_client.contract.settings import tls_options
from worker.celery_app.compactor_celery import CompactorCelery
from worker.celery_app.tasks import register_tasks
from worker.llm import Summarizer
from worker.observability import log_redaction, metrics
from worker.observability.exporter import start_metrics
from worker.observability.health import HealthStep, Heartbeat
from worker.service import Sweeper, build_runtime, worker_redis
from worker.settings import WorkerSettings, check_startup
from worker.store.tenant_bytes import BytesReconciler

__all__ = ["broker_transport_options", "create_app"]

def _quiet_cancel_warning() -> None:
    # Celery warns on every broker connection loss that 6.0 will cancel running late-ack tasks
    # by default; we keep them running on purpose (see ``configure``). Added after Celery's
    # logging set-up, which puts its own "always" filter for the warning first.
    warnings.filterwarnings("ignore", message=r"\s*In Celery 5.1 we introduced an optional")


def broker_transport_options(settings: WorkerSettings) -> dict[str, Any]:
    """Redis transport: the client's queue naming and key prefix plus fast recovery of a dead
    worker's job.

    A message a worker took and never acked comes back after ``visibility_timeout``; live workers
    sweep for such messages every ``unacked_restore_interval`` s (throttle 1: every sweep scans),
    so a killed worker's job is running again about one interval after the timeout.
    """
    return {
        **redis_transport_options(settings.client.key_prefix),
        "visibility_timeout": settings.visibility_timeout_s,
        "unacked_restore_interval": settings.unacked_restore_interval_s,
        "unacked_restore_throttle": 1,
        "socket_connect_timeout": 5,
        "health_check_interval": 10,
    }


def _time_limits(settings: WorkerSettings) -> dict[str, Any]:
    if settings.pool != "prefork":
        return {}  # the threads pool ignores them: the service enforces the deadline itself
    # A safety net behind the service's own checks; never a hard kill, which would leave the
    # job record running without a redelivery.
    return {"task_soft_time_limit": settings.job_deadline_s + 15}


def configure(app: Celery, settings: WorkerSettings) -> None:
    app.conf.update(
        task_serializer="json", result_serializer="json", event_serializer="json",
        accept_content=["json"], result_accept_content=["json"],
        task_acks_late=True, task_reject_on_worker_lost=True, worker_prefetch_multiplier=1,
        # A failed job is final (its record says so): ack it, never redeliver it.
        task_acks_on_failure_or_timeout=True,
        # Job records and events are the results; no one reads Celery's result keys, so no
        # worker writes them (two SET+PUBLISH per job saved). Flower reads task events.
        task_ignore_result=True,
        worker_send_task_events=True, task_send_sent_event=True,
        broker_connection_retry_on_startup=True,
        # A job keeps running through a broker outage: its lease keeps a second delivery off it,
        # and cancelling it would throw away a model call that may already have finished.
        worker_cancel_long_running_tasks_on_connection_loss=False,
        broker_transport_options=broker_transport_options(settings),
        # Celery's result keys (none are written: task_ignore_result) under the prefix too.
        result_backend_transport_options={
            "socket_connect_timeout": 5,
            "global_keyprefix": KeyLayout(settings.client.key_prefix).broker},
        result_expires=settings.client.job_ttl_s,
        task_queues=[Queue(name, routing_key=name,  # type: ignore[no-untyped-call]
                           queue_arguments=queue_arguments(settings.client.resolved_broker_url))
                     for name in QUEUES],
        task_default_queue=QUEUE_COMPACT,
        task_create_missing_queues=False,
        worker_pool=settings.pool, worker_concurrency=settings.concurrency,
        worker_hijack_root_logger=False,
        **_time_limits(settings),
        **_tls(settings),
    )


def _tls(settings: WorkerSettings) -> dict[str, Any]:
    """TLS for ``rediss://`` broker and result URLs, certificates required by default: kombu
    would otherwise connect to a ``rediss://`` broker without checking the certificate, and
    Celery's result backend refuses a URL without ``ssl_cert_reqs`` (the worker exited)."""
    conf: dict[str, Any] = {}
    broker = tls_options(settings.client.resolved_broker_url)
    if broker is not None:
        conf["broker_use_ssl"] = broker
    backend = tls_options(settings.client.resolved_result_backend)
    if backend is not None:
        conf["redis_backend_use_ssl"] = backend
    return conf


class StartupCheck(bootsteps.Step):  # type: ignore[misc]
    """Refuse to start with settings that break redelivery, or hooks that cannot load."""

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        app: CompactorCelery = worker.app
        settings: WorkerSettings = app.compactor_settings
        # This process may serve metrics already (another app of the same process started it).
        check_startup(settings, check_port=metrics.server_address() is None)
        _quiet_cancel_warning()
        if settings.metrics_enabled:
            start_metrics(settings)
        if settings.pool == "prefork":
            # Children build their own runtime after the fork; load it once here to fail early.
            build_runtime(settings, summarizer=app.summarizer).close()
        else:
            app.runtime()
        super().__init__(worker, **kwargs)


class _ThreadStep(bootsteps.StartStopStep):  # type: ignore[misc]
    """A step whose object runs a thread of the worker's main process (start, stop)."""

    def start(self, worker: Any) -> None:
        if self.obj is not None:
            self.obj.start()

    def stop(self, worker: Any) -> None:
        if self.obj is not None:
            self.obj.stop()

    terminate = shutdown = stop


class SweepStep(_ThreadStep):
    """The takeover sweep (worker/service/_sweeper.py), in the worker's main process."""

    def create(self, worker: Any) -> Sweeper | None:
        app: CompactorCelery = worker.app
        settings = app.compactor_settings
        if settings.sweep_interval_s <= 0:
            return None

        def send(job_id: str, route: Route, task_id: str) -> None:
            priority = broker_priority(route.priority, settings.client.resolved_broker_url)
            app.send_task(route.task, args=[job_id], queue=route.queue, priority=priority,
                          task_id=task_id)

        return Sweeper(settings, worker_redis(settings), send)


class HeartbeatStep(_ThreadStep):
    """This worker's heartbeat (worker/observability/health.py, docs/recovery.md "Worker
    liveness")."""

    def create(self, worker: Any) -> Heartbeat:
        settings: WorkerSettings = worker.app.compactor_settings
        return Heartbeat(worker_redis(settings), KeyLayout(settings.client.key_prefix, ANY_TENANT),
                         settings.worker_id)


class StoredBytesStep(_ThreadStep):
    """The reconcile of the tenants' stored bytes (worker/store/tenant_bytes.py): it drops the
    counts of expired sessions every few minutes, in the worker's main process (with the sweep:
    off when ``sweep_interval_s`` is 0)."""

    def create(self, worker: Any) -> BytesReconciler | None:
        settings: WorkerSettings = worker.app.compactor_settings
        if settings.sweep_interval_s <= 0:
            return None
        return BytesReconciler(worker_redis(settings), settings.client.key_prefix)


def create_app(settings: WorkerSettings | None = None, *,
               summarizer: Callable[[], Summarizer] | None = None) -> CompactorCelery:
    """The worker app. ``summarizer`` replaces the model router (a factory called per job)."""
    settings = settings or WorkerSettings()
    log_redaction.install()
    app = CompactorCelery(settings, summarizer, main="compactor",
                          broker=settings.client.resolved_broker_url,
                          backend=settings.client.resolved_result_backend, set_as_current=False)
    configure(app, settings)
    if urlsplit(settings.client.resolved_broker_url).scheme in ("redis", "rediss"):
        # The stock transport with the connection-loss and full-memory fixes; TLS comes from
        # broker_use_ssl (_tls), as this transport name no longer says rediss.
        app.conf.broker_transport = "worker.celery_app.broker_transport:Transport"
    app.steps["worker"].add(StartupCheck)
    app.steps["consumer"].add(HealthStep)
    app.steps["worker"].add(SweepStep)
    app.steps["worker"].add(HeartbeatStep)
    app.steps["worker"].add(StoredBytesStep)
    register_tasks(app)
    return app


_lazy: CompactorCelery | None = None


def __getattr__(name: str) -> Any:
    # ``celery -A worker.celery_app.app`` reads ``app``: built from the environment on first use.
    global _lazy
    if name == "app":
        if _lazy is None:
            _lazy = create_app()
        return _lazy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
