"""Takeover: live workers act on jobs whose worker is gone or whose message is lost.

Every ``sweep_interval_s`` each worker claims the entries of the jobs-due index whose time has
come (:class:`~worker.store.sweep.SweepStore`; one worker per entry) and looks at each job:

* ended or gone → dropped from the index;
* a live lease → looked at again when that lease would end;
* ``running`` and no lease → its worker died or lost Redis: the job is sent again (the new
  delivery takes the lease; the effect marker keeps the commit exactly once, a late duplicate
  ends as ``duplicate``), unless it already had ``max_deliveries`` attempts: then it ends
  ``failed`` with a record and an event;
* ``queued`` and no lease → its message may be lost (a publish that failed halfway, a broker
  restarted without persistence): sent again, next look ``requeue_after_s`` × 2ⁿ later; unless
  its message still waits in its queue list (a long queue, or a flood the fair order put
  behind other tenants' jobs): looked at again ``requeue_after_s`` later, nothing sent.

So no job stays queued or running longer than its lease (or ``requeue_after_s``) plus one sweep
interval without someone acting on it; the broker's visibility timeout stays the backstop.

A record is the tenant's key (a tenant's own ACL user may write it): a look at one that does
not parse is logged and the pass goes on, so one tenant's garbage never holds back another's
jobs; the route of a job sent again is computed from its kind and reason. The same thread's
owner starts the admitter of the tenants' inboxes (``_admitter.py``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import redis

from api_client.contract.errors import CompactorError
from api_client.contract.job_enums import JobKind, JobState
from api_client.contract.keys import ANY_TENANT, KeyLayout
from api_client.contract.routing import TASK_NAMES, Route
from worker.service._admitter import Admitter
from worker.service._job_stops import WAIT_FOR_REDIS
from worker.settings import WorkerSettings
from worker.store.fair_index import FairIndex, fair_index_redis
from worker.store.inbox import InboxStore
from worker.store.job_lifecycle import JobStore
from worker.store.sweep import JobLook, SweepStore, now_ms

__all__ = ["Sender", "Sweeper"]

log = logging.getLogger("worker.sweep")

# send(job id, route, task id): publish the task (the worker's Celery app).
Sender = Callable[[str, Route, str], None]

_BATCH = 100
_MAX_BACKOFF_STEPS = 6


class Sweeper:
    """The sweep of one worker process (a daemon thread between :meth:`start` and :meth:`stop`)."""

    def __init__(self, settings: WorkerSettings, client: redis.Redis[str], send: Sender) -> None:
        layout = KeyLayout(settings.client.key_prefix, ANY_TENANT)
        self.settings = settings
        fair = FairIndex(fair_index_redis(settings.client, client), layout)
        self.store = SweepStore(client, layout, fair)
        self.jobs = JobStore(client, settings.client, layout, fair)
        self.send = send
        self.admitter = Admitter(InboxStore(client, fair.redis, layout, settings), self.jobs,
                                 send)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="compactor-sweep", daemon=True)
        self._thread.start()
        self.admitter.start()

    def stop(self) -> None:
        self.admitter.stop()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
            self.store.redis.close()
            if self.store.fair.redis not in (None, self.store.redis):
                self.store.fair.redis.close()  # type: ignore[union-attr]

    def _loop(self) -> None:
        while not self._stop.wait(self.settings.sweep_interval_s):
            try:
                self.sweep()
            except WAIT_FOR_REDIS as err:
                log.debug("sweep skipped: %s", err)
            except Exception:  # the sweep must outlive a bug in one look
                log.exception("sweep failed")

    def sweep(self) -> int:
        """One pass; returns how many jobs it acted on (sent again or ended)."""
        hold_ms = int(self.settings.lease_ttl_s * 1000)
        acted = 0
        for job_id in self.store.claim(hold_ms, _BATCH):
            try:
                acted += self._act(self.store.look(job_id))
            except CompactorError as err:
                log.warning("sweep: job %s: %s", job_id, err)
            except ValueError as err:  # a record that does not parse (a tenant's key)
                log.warning("sweep: job %s dropped: %s", job_id, str(err)[:300])
                self.store.forget(job_id)
        return acted

    def _act(self, job: JobLook) -> int:
        if job.state is None or job.state.terminal:
            self.store.forget(job.job_id)  # and out of its tenant's queued jobs (a cancel)
            self.store.dequeue(job.job_id)
            return 0
        if job.lease_ms > 0:
            self.store.due_at(job.job_id, now_ms() + job.lease_ms + 500)
            return 0
        if job.state is JobState.RUNNING and job.attempts >= self.settings.max_deliveries:
            return self._give_up(job)
        if job.state is JobState.QUEUED and self.store.still_queued(job):
            requeue_ms = int(self.settings.client.requeue_after_s * 1000)
            self.store.due_at(job.job_id, now_ms() + requeue_ms)
            return 0
        return self._resend(job)

    def _resend(self, job: JobLook) -> int:
        n = self.store.count_resend(job.job_id)
        if job.state is JobState.RUNNING:
            wait_s = self.settings.lease_ttl_s * 2  # time for the new delivery to take the lease
            tag, why = f"t{job.attempts}", "its worker is gone (lease expired)"
        else:
            wait_s = self.settings.client.requeue_after_s
            tag, why = f"q{n}", "its message may be lost"
        wait_s *= 2 ** min(n - 1, _MAX_BACKOFF_STEPS)
        self.store.due_at(job.job_id, now_ms() + int(wait_s * 1000))
        route = Route(TASK_NAMES[JobKind(job.kind)], job.queue, job.priority)
        self.send(job.job_id, route, f"{job.job_id}-{tag}")
        log.warning("job %s (%s, attempt %d): %s; sent again", job.job_id, job.state,
                    job.attempts, why)
        return 1

    def _give_up(self, job: JobLook) -> int:
        error = (f"the job's worker was lost during {job.attempts} attempts; not run again "
                 f"(max_deliveries={self.settings.max_deliveries})")
        if self.jobs.finish(job.job_id, JobState.FAILED, error=error):
            log.error("job %s: %s", job.job_id, error)
        self.store.forget(job.job_id)
        return 1
