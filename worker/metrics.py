"""Optional Prometheus metrics of a worker process (``COMPACTOR_METRICS_PORT`` turns them on).

Counts jobs by kind and final state, stale re-plans, and job durations; served at
``http://<worker>:<port>/metrics``. With the prefork pool every child has its own counters, so
serve them only from a threads-pool worker (the default); elsewhere this module stays off.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

__all__ = ["enabled", "observe_job", "observe_stale", "start"]

log = logging.getLogger("worker.metrics")
_lock = threading.Lock()
_metrics: dict[str, Any] = {}


def enabled() -> bool:
    return bool(_metrics)


def start(port: int, *, address: str = "0.0.0.0") -> bool:
    """Serve /metrics on ``port`` (once per process). False when prometheus_client is missing."""
    with _lock:
        if _metrics:
            return True
        try:
            from prometheus_client import Counter, Histogram, start_http_server
        except ImportError:
            log.warning("COMPACTOR_METRICS_PORT is set but prometheus_client is not installed")
            return False
        _metrics["jobs"] = Counter("compactor_jobs_total", "Jobs ended by this worker",
                                   ["kind", "state"])
        _metrics["duration"] = Histogram(
            "compactor_job_duration_seconds", "Duration of one job delivery", ["kind"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300))
        _metrics["stale"] = Counter("compactor_stale_total", "Commits refused as stale", ["kind"])
        start_http_server(port, addr=address)
        log.info("metrics on :%d/metrics", port)
        return True


def observe_job(kind: str, state: str, seconds: float) -> None:
    if _metrics:
        _metrics["jobs"].labels(kind, state).inc()
        _metrics["duration"].labels(kind).observe(seconds)


def observe_stale(kind: str) -> None:
    if _metrics:
        _metrics["stale"].labels(kind).inc()
