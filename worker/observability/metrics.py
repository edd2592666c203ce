"""Prometheus metrics of a worker (``COMPACTOR_METRICS_PORT`` turns them on; docs/operations.md).

:func:`start` defines the metrics and serves them at ``http://<address>:<port>/metrics`` next to
the probes ``/livez`` and ``/readyz`` (:mod:`worker.observability.health`). Until it runs, every
``observe_*`` call is a no-op, so the service and the router call them unconditionally.

Pools: the threads pool counts in this process. The prefork pool counts in its children, so
:func:`start` switches prometheus_client to its multiprocess mode first (one file per process in a
fresh directory, summed at scrape time by the main process, which serves the endpoint).
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
    multiprocess,
    values,
)

__all__ = [
    "DEFAULT_ADDRESS",
    "DEFAULT_PORT",
    "METRIC_LABELS",
    "METRIC_NAMES",
    "Probe",
    "enabled",
    "observe_draft",
    "observe_draft_tokens",
    "observe_facts",
    "observe_job",
    "observe_loop_guard",
    "observe_model_call",
    "observe_stale",
    "observe_stall",
    "observe_started",
    "observe_tenant_budget",
    "observe_tenant_spend",
    "server_address",
    "start",
    "tenant_label",
]

log = logging.getLogger("worker.metrics")

DEFAULT_PORT = 9808  # what compose and the Kubernetes manifests use
DEFAULT_ADDRESS = "127.0.0.1"  # loopback unless told otherwise: metrics name models and queues
NO_REASON = "none"  # the reason label of prune and branch-summary jobs
TOKEN_DIRECTIONS = ("input", "output", "cache_read", "cache_write")
OTHER_TENANT = "other"  # the tenant label of every tenant not named in COMPACTOR_METRICS_TENANTS

_DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
# A draft's stall is one round trip (about a millisecond); a job's is its model calls.
_STALL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
                  60, 120, 300, 600)
_WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)

# name (as exported, without _total/_bucket suffixes), type, help, labels
_DEFINITIONS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("compactor_jobs_total", "counter", "Jobs ended by this worker", ("kind", "reason", "outcome")),
    ("compactor_job_duration_seconds", "histogram", "Run time of one job delivery, start to end",
     ("kind", "outcome")),
    ("compactor_job_failures_total", "counter",
     "Jobs that did not succeed, by cause (worker.service.failure_causes: model_auth, "
     "model_overflow, model_unavailable, deadline, cancelled, storage, hook, ...)",
     ("kind", "cause")),
    ("compactor_tokens_saved_total", "counter",
     "Context tokens a committed compaction or prune removed (tokens before - after)",
     ("kind",)),
    ("compactor_job_queue_wait_seconds", "histogram",
     "Enqueue to first start of a job (the record's createdAt to startedAt)", ("kind", "reason")),
    ("compactor_stale_total", "counter", "Commits refused because the session moved on",
     ("kind",)),
    ("compactor_model_calls_total", "counter",
     "Model HTTP attempts by candidate; outcome is ok or the error type", ("candidate", "outcome")),
    ("compactor_model_call_duration_seconds", "histogram", "Duration of one model attempt",
     ("candidate",)),
    ("compactor_model_tokens_total", "counter", "Tokens of successful model calls",
     ("candidate", "direction")),
    ("compactor_model_cost_usd_total", "counter",
     "Cost of successful model calls at the candidate's configured prices (USD)", ("candidate",)),
    ("compactor_tenant_tokens_total", "counter",
     "Model tokens per tenant (input: uncached, cache reads and writes); kind applied or draft "
     "(speculative jobs)", ("tenant", "kind", "direction")),
    ("compactor_tenant_cost_usd_total", "counter",
     "USD of model calls per tenant at the candidates' prices; kind applied or draft",
     ("tenant", "kind")),
    ("compactor_tenant_budget_total", "counter",
     "Jobs the tenant's model budget changed: deterministic (summarised without the model), "
     "refused, draft_stopped", ("tenant", "outcome")),
    ("compactor_tenant_deferred_total", "counter",
     "Deliveries put back: the tenant ran max_running jobs already", ("tenant",)),
    ("compactor_summary_facts_total", "counter",
     "Fact-ledger facts of committed summaries by kind; outcome inSummary, appended or dropped",
     ("job", "kind", "outcome")),
    ("compactor_drafts_total", "counter",
     "Speculative drafts: computed, applied, extended (a stale one built on), discarded "
     "(by cause)", ("outcome", "cause")),
    ("compactor_draft_tokens_total", "counter",
     "Model tokens of speculation, apart: computed (speculative jobs' calls), used (of drafts "
     "that ended in a committed compaction: applied, or extended by the job that committed)",
     ("outcome", "direction")),
    ("compactor_compaction_stall_seconds", "histogram",
     "What the platform waited: compact() call to entry (source job: createdAt to commit; "
     "draft: the client's measured apply)", ("reason", "source")),
    ("compactor_loop_guard_total", "counter",
     "Loop guard: compactions flagged ineffective, automatic compactions refused",
     ("event", "reason")),
    ("compactor_cold_token_counts_total", "counter",
     "Texts of sessions new to a worker: counts loaded from the other workers' store, or "
     "tokenized here (and stored for them)", ("source",)),
)
# Served by the scrape-time collectors (queue_depth, cooldown_gauge, session_gauge and
# tenant_gauge beside this module), not stored per process.
_SCRAPED: dict[str, tuple[str, ...]] = {"compactor_queue_depth": ("queue",),
                                        "compactor_broker_up": (),
                                        "compactor_model_cooldown_seconds": ("candidate",),
                                        # session_gauge: stored sessions (retention)
                                        "compactor_sessions_stored": (),
                                        "compactor_session_bytes": (),
                                        "compactor_tenant_queued_jobs": ("tenant",),
                                        "compactor_tenant_running_jobs": ("tenant",)}
# Every exported metric and its labels (the dashboard test checks its queries against these).
METRIC_LABELS: dict[str, tuple[str, ...]] = {**{d[0]: d[3] for d in _DEFINITIONS}, **_SCRAPED}
METRIC_NAMES: tuple[str, ...] = tuple(METRIC_LABELS)


class Probe(Protocol):
    """A health check for ``/livez`` or ``/readyz``: (healthy, one line saying why)."""

    def __call__(self) -> tuple[bool, str]: ...


class _Collector(Protocol):
    def collect(self) -> Iterable[Any]: ...


_lock = threading.Lock()
_metrics: dict[str, Any] = {}
_server: list[ThreadingHTTPServer] = []
# The tenants labelled by name; every other one is OTHER_TENANT (a label per tenant of a large
# platform would grow the series without end).
_tenants: frozenset[str] = frozenset()


def enabled() -> bool:
    return bool(_metrics)


def server_address() -> tuple[str, int] | None:
    """(host, port) the endpoint listens on, once started."""
    if not _server:
        return None
    host, port = _server[0].server_address[:2]
    return str(host), int(port)


def start(port: int, *, address: str = DEFAULT_ADDRESS, multiprocess_mode: bool = False,
          collectors: Iterable[_Collector] = (), live: Probe | None = None,
          ready: Probe | None = None, tenants: Iterable[str] = ()) -> bool:
    """Define the metrics and serve them on ``address:port`` (once per process; later calls
    return True and change nothing). ``multiprocess_mode`` for the prefork pool: call it in the
    main process before the pool forks. ``tenants``: those labelled by name."""
    global _tenants
    with _lock:
        if _metrics:
            return True
        _tenants = frozenset(tenants)
        # No *_created series: they double the output for nothing.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        registry = CollectorRegistry(auto_describe=True)
        if multiprocess_mode:
            path = _multiprocess_dir()
            multiprocess.MultiProcessCollector(registry, path=path)  # type: ignore[no-untyped-call]
            _define(CollectorRegistry())  # stored in files; the collector above reads them
        else:
            _define(registry)
        for collector in collectors:
            registry.register(collector)  # type: ignore[arg-type]
        _server.append(_serve(registry, address, port, live, ready))
        log.info("metrics on http://%s:%d/metrics", *server_address() or (address, port))
        return True


def _multiprocess_dir() -> str:
    # A fresh directory per worker start: files of an earlier run would be summed in.
    base = os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None
    path = tempfile.mkdtemp(prefix="compactor-metrics-", dir=base)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    # prometheus_client picks its value class at import; switch it for the metrics defined next.
    values.ValueClass = values.MultiProcessValue()  # type: ignore[no-untyped-call]
    owner = os.getpid()

    def remove() -> None:
        if os.getpid() == owner:  # not in a forked child that runs atexit handlers
            shutil.rmtree(path, ignore_errors=True)

    atexit.register(remove)
    return path


def _define(registry: CollectorRegistry) -> None:
    for name, kind, text, labels in _DEFINITIONS:
        if kind == "counter":
            _metrics[name] = Counter(name.removesuffix("_total"), text, labels, registry=registry)
        else:
            buckets = (_WAIT_BUCKETS if "wait" in name else
                       _STALL_BUCKETS if "stall" in name else _DURATION_BUCKETS)
            _metrics[name] = Histogram(name, text, labels, registry=registry, buckets=buckets)


# -- what the service and the router report -------------------------------------------------
def observe_started(kind: str, reason: str | None, attempt: int, created_at: str,
                    started_at: str | None) -> None:
    """A job started: on its first attempt, how long it waited in the queue."""
    if not _metrics or attempt != 1 or not created_at or not started_at:
        return
    try:
        waited = (datetime.fromisoformat(started_at) - datetime.fromisoformat(created_at))
    except ValueError:
        return  # a record written by something else: no sample rather than a wrong one
    _metrics["compactor_job_queue_wait_seconds"].labels(kind, reason or NO_REASON).observe(
        max(0.0, waited.total_seconds()))


def observe_job(kind: str, reason: str | None, outcome: str, seconds: float) -> None:
    if _metrics:
        _metrics["compactor_jobs_total"].labels(kind, reason or NO_REASON, outcome).inc()
        _metrics["compactor_job_duration_seconds"].labels(kind, outcome).observe(seconds)


def observe_failure(kind: str, cause: str) -> None:
    if _metrics:
        _metrics["compactor_job_failures_total"].labels(kind, cause).inc()


def observe_tokens_saved(kind: str, tokens: int) -> None:
    if _metrics and tokens > 0:
        _metrics["compactor_tokens_saved_total"].labels(kind).inc(tokens)


def observe_stale(kind: str) -> None:
    if _metrics:
        _metrics["compactor_stale_total"].labels(kind).inc()


def observe_facts(job: str, stats: Any) -> None:
    """The fact ledger's counts of one summary
    (``{kind: {total, inSummary, appended, dropped}}``)."""
    if not _metrics or not isinstance(stats, dict):
        return
    for kind, counts in stats.items():
        for outcome in ("inSummary", "appended", "dropped"):
            value = counts.get(outcome) if isinstance(counts, dict) else None
            if isinstance(value, int) and value > 0:
                _metrics["compactor_summary_facts_total"].labels(job, kind, outcome).inc(value)


def observe_draft(outcome: str, cause: str = "") -> None:
    """``computed`` (a speculative job stored one), ``applied`` (a client applied one; counted
    by the notify task), ``discarded`` with its cause (counted by the job that ran instead)."""
    if _metrics:
        _metrics["compactor_drafts_total"].labels(outcome, cause).inc()


def observe_draft_tokens(outcome: str, usage: _Usage | None) -> None:
    """``computed``: a speculative job's own tokens; ``used``: a committed compaction's drafts'
    (so computed - used is what speculation threw away)."""
    if _metrics and usage is not None:
        tokens = _metrics["compactor_draft_tokens_total"]
        for direction in TOKEN_DIRECTIONS:
            tokens.labels(outcome, direction).inc(getattr(usage, direction))


def observe_stall(reason: str | None, source: str, seconds: float) -> None:
    """A compaction's stall, ``source`` ``job`` (a worker ran it) or ``draft`` (applied)."""
    if _metrics:
        _metrics["compactor_compaction_stall_seconds"].labels(
            reason or NO_REASON, source).observe(seconds)


def observe_cold_counts(loaded: int, tokenized: int) -> None:
    """A cold plan's texts: ``loaded`` counts another worker stored, ``tokenized`` here."""
    if _metrics:
        if loaded:
            _metrics["compactor_cold_token_counts_total"].labels("loaded").inc(loaded)
        if tokenized:
            _metrics["compactor_cold_token_counts_total"].labels("tokenized").inc(tokenized)


def observe_loop_guard(event: str, reason: str | None) -> None:
    """``ineffective`` (a committed compaction freed too little) or ``refused``."""
    if _metrics:
        _metrics["compactor_loop_guard_total"].labels(event, reason or NO_REASON).inc()


class _Usage(Protocol):  # the model layer's Usage (this module imports nothing of the worker)
    @property
    def input(self) -> int: ...
    @property
    def output(self) -> int: ...
    @property
    def cache_read(self) -> int: ...
    @property
    def cache_write(self) -> int: ...


def observe_model_call(candidate: str, outcome: str, seconds: float, usage: _Usage | None = None,
                       cost_usd: float = 0.0) -> None:
    """One model attempt (``outcome`` ``ok`` or the error type); tokens and cost when it
    answered."""
    if not _metrics:
        return
    _metrics["compactor_model_calls_total"].labels(candidate, outcome).inc()
    _metrics["compactor_model_call_duration_seconds"].labels(candidate).observe(seconds)
    if usage is not None:
        tokens = _metrics["compactor_model_tokens_total"]
        for direction in TOKEN_DIRECTIONS:
            tokens.labels(candidate, direction).inc(getattr(usage, direction))
        _metrics["compactor_model_cost_usd_total"].labels(candidate).inc(cost_usd)


def tenant_label(tenant: str) -> str:
    """The ``tenant`` label: the name of a tenant of ``COMPACTOR_METRICS_TENANTS``, else
    ``other``."""
    return tenant if tenant in _tenants else OTHER_TENANT


def observe_tenant_spend(tenant: str, kind: str, input_tokens: int, output_tokens: int,
                         usd: float) -> None:
    """What one job's model calls cost its tenant; ``kind`` ``applied`` or ``draft``."""
    if not _metrics:
        return
    label, tokens = tenant_label(tenant), _metrics["compactor_tenant_tokens_total"]
    tokens.labels(label, kind, "input").inc(input_tokens)
    tokens.labels(label, kind, "output").inc(output_tokens)
    _metrics["compactor_tenant_cost_usd_total"].labels(label, kind).inc(usd)


def observe_tenant_budget(tenant: str, outcome: str) -> None:
    """A job the budget changed: ``deterministic``, ``refused`` or ``draft_stopped``."""
    if _metrics:
        _metrics["compactor_tenant_budget_total"].labels(tenant_label(tenant), outcome).inc()


def observe_tenant_deferred(tenant: str) -> None:
    if _metrics:
        _metrics["compactor_tenant_deferred_total"].labels(tenant_label(tenant)).inc()


# -- the endpoint ---------------------------------------------------------------------------
def _serve(registry: CollectorRegistry, address: str, port: int, live: Probe | None,
           ready: Probe | None) -> ThreadingHTTPServer:
    routes: dict[str, Callable[[], tuple[int, str, bytes]]] = {
        "/metrics": lambda: (200, CONTENT_TYPE_LATEST, generate_latest(registry)),
        "/livez": lambda: _probe(live),
        "/readyz": lambda: _probe(ready),
    }

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # probes every few seconds: keep logs quiet
            pass

        def do_GET(self) -> None:
            route = routes.get(self.path.split("?", 1)[0])
            status, ctype, body = route() if route else (404, "text/plain", b"not found\n")
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    class Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ":" in address else socket.AF_INET
        daemon_threads = True

    httpd = Server((address, port), Handler)
    threading.Thread(target=httpd.serve_forever, name="compactor-metrics", daemon=True).start()
    return httpd


def _probe(check: Probe | None) -> tuple[int, str, bytes]:
    if check is None:
        return 200, "text/plain", b"ok (no check configured)\n"
    try:
        healthy, why = check()
    except Exception as err:  # a probe that breaks says so instead of killing the server thread
        healthy, why = False, f"check failed: {type(err).__name__}: {err}"
    return (200 if healthy else 503), "text/plain", f"{why}\n".encode()
