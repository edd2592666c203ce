"""Liveness and readiness of a worker, served as ``/livez`` and ``/readyz`` next to ``/metrics``.

- live: the Celery consumer has started and its timer ticked within ``stale_after_s`` (the
  timer runs in the consumer's event loop with the prefork pool, in its timer thread with the
  threads pool): a wedged worker stops ticking and is restarted.
- ready: live, consuming (not between a broker loss and the reconnect), the sessions Redis
  answers PING and the broker answers a queue depth read. Kubernetes counts only ready pods for
  the PodDisruptionBudget and a rolling update.

A worker down on Redis or the broker is not ready but stays live: restarting it would not help.

Beside the probes, every worker process writes a heartbeat to Redis while it consumes
(:class:`Heartbeat`, docs/recovery.md "Worker liveness"): ``GET /v1/workers`` counts the fresh
ones, and a running job whose worker's heartbeat went stale shows ``workerLost``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
from celery import bootsteps

from api_client.contract.keys import KeyLayout
from api_client.contract.lua_scripts import register

__all__ = ["BEAT_S", "BEAT_TTL_S", "HealthStep", "Heartbeat", "WorkerHealth", "worker_health"]

log = logging.getLogger("worker.health")

TICK_S = 5.0
# The heartbeat is written this often and counts this long: a dead worker leaves the count at
# most BEAT_TTL_S after its last beat (docs/recovery.md "Worker liveness").
BEAT_S = 1.0
BEAT_TTL_S = 3.0
# A worker not consuming (starting, or reconnecting to the broker) looks this often whether it
# consumes again: its first beat follows within this, so a request just after its start finds it
# alive (the summary routes answer 424 no_worker at once when none is, api_client.server).
_CONSUMING_POLL_S = 0.05
# A silent worker's member stays this long (a running job's holder is then known to be lost).
_BEAT_KEEP_S = 3600


class WorkerHealth:
    def __init__(self, stale_after_s: float = 60.0) -> None:
        self.stale_after_s = stale_after_s
        self._lock = threading.Lock()
        self._last_tick: float | None = None
        self._consuming = False
        # Checks of what a job needs (Redis PING, broker read); each raises when it fails.
        self.dependencies: dict[str, Callable[[], object]] = {}

    def tick(self) -> None:
        with self._lock:
            self._last_tick = time.monotonic()

    def consuming(self, value: bool) -> None:
        with self._lock:
            self._consuming = value
            if value:
                self._last_tick = time.monotonic()

    @property
    def is_consuming(self) -> bool:
        with self._lock:
            return self._consuming

    def live(self) -> tuple[bool, str]:
        with self._lock:
            last = self._last_tick
        if last is None:
            return False, "starting: the consumer has not started yet"
        age = time.monotonic() - last
        if age > self.stale_after_s:
            return False, f"stuck: the consumer loop last ticked {age:.0f} s ago"
        return True, f"live: last tick {age:.1f} s ago"

    def ready(self) -> tuple[bool, str]:
        live, why = self.live()
        if not live:
            return False, why
        with self._lock:
            consuming = self._consuming
        if not consuming:
            return False, "not consuming: reconnecting to the broker"
        for name, check in self.dependencies.items():
            try:
                check()
            except Exception as err:  # each failure is a reason to answer 503, never to crash
                return False, f"{name} unavailable: {type(err).__name__}: {err}"
        return True, "ready"


_health = WorkerHealth()


def worker_health() -> WorkerHealth:
    """This process's health state (one Celery worker per process)."""
    return _health


class HealthStep(bootsteps.StartStopStep):  # type: ignore[misc]
    """Consumer step: mark consuming while the consumer runs, tick from its timer."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, consumer: Any, **kwargs: Any) -> None:
        self._entry: Any = None
        super().__init__(consumer, **kwargs)

    def start(self, consumer: Any) -> None:
        health = worker_health()
        health.consuming(True)
        # Timer entries added while the consumer starts belong to its connection (Celery
        # cancels them when it is lost): register anew on every start.
        if self._entry is not None:
            self._entry.cancel()
        self._entry = consumer.timer.call_repeatedly(TICK_S, health.tick)

    def stop(self, consumer: Any) -> None:
        worker_health().consuming(False)

    def shutdown(self, consumer: Any) -> None:
        worker_health().consuming(False)
        if self._entry is not None:
            self._entry.cancel()
            self._entry = None


class Heartbeat:
    """Writes this worker's heartbeat every :data:`BEAT_S` while its consumer runs (a daemon
    thread of the worker's main process, between :meth:`start` and :meth:`stop`); a worker
    that stops cleanly takes its member out at once."""

    def __init__(self, client: redis.Redis[str], layout: KeyLayout, worker_id: str,
                 health: WorkerHealth | None = None) -> None:
        self.redis = client
        self.key = layout.workers
        self.worker_id = worker_id
        self.health = health or worker_health()
        self._beat = register(client, "heartbeat")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self) -> None:
        args = [self.worker_id, str(int(BEAT_TTL_S * 1000)), str(_BEAT_KEEP_S * 1000)]
        self._beat(keys=[self.key], args=args)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="compactor-heartbeat",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is None:
            return
        self._thread.join(5)
        self._thread = None
        try:
            self.redis.zrem(self.key, self.worker_id)
        except redis.RedisError as err:  # its beat runs out on its own
            log.debug("heartbeat not removed: %s", err)
        self.redis.close()

    def _loop(self) -> None:
        while True:
            consuming = self.health.is_consuming
            if consuming:
                try:
                    self.beat()
                except redis.RedisError as err:  # Redis away: the count misses this worker
                    log.debug("heartbeat not written: %s", err)
            if self._stop.wait(BEAT_S if consuming else _CONSUMING_POLL_S):
                return
