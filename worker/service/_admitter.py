"""The admitter: the workers' side of the tenants' inboxes (docs/tenants.md "A Redis ACL user
per tenant"; :mod:`worker.store.inbox`).

A client on its tenant's own ACL user cannot touch the broker, the jobs-due index, the fair
order's index or its quota counters: it writes its job's record and id in its inbox and
announces it on the inbox's channel. Each worker process listens (``PSUBSCRIBE`` on every
inbox's channel) and, for each announced tenant, pops a few ids at a time, taking the tenants in
turn so that a flooding tenant's inbox never holds another's job back by more than one batch.
Every :data:`POLL_S` it also looks at the inboxes it knows (an announcement sent while no worker
listened), and every :data:`DISCOVER_S` it looks for new inboxes (``SCAN``).

Each id is untrusted input: it must be a job id of the inbox's tenant whose record parses,
names the same job and session and is ``queued``. The route is computed from the record's kind
and reason, never taken from it; the admission (the tenant's queued jobs, its model budget and
its sessions' bytes as measured now, :mod:`worker.store.inbox_bytes`, for every kind, as the
fleet's settings and the tenant's quota say) is the fleet's. A refused job ends ``failed`` with
the quota's error; a malformed id or record is dropped (counted: one warning per tenant now and
then, however many). An id popped while Redis fails goes back. So a forged or deleted key of a
tenant can only ever hurt that tenant.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import redis
from pydantic import ValidationError

from api_client.contract.errors import (
    BrokerUnavailableError,
    CompactorError,
    ConfigurationError,
    QuotaExceededError,
    StorageFullError,
    StorageReadOnlyError,
)
from api_client.contract.job_enums import CompactReason, JobKind, JobState
from api_client.contract.keys import split_job_id, tenant_of_job
from api_client.contract.routing import DRAFT_APPLIED_ROUTE, Route, route_for
from api_client.contract.wire import JobRecord
from worker.store.inbox import InboxStore
from worker.store.job_lifecycle import JobStore

__all__ = ["Admitter"]


def redis_trouble(err: BaseException) -> bool:
    """Redis away, full, read-only or refusing the workers' user (a reply typed by
    ``redis_flows.replied``): no fault of the job, which stays to be admitted later."""
    return isinstance(err, (redis.RedisError, BrokerUnavailableError, StorageFullError,
                            StorageReadOnlyError)) or (
        isinstance(err, ConfigurationError) and isinstance(err.__cause__, redis.RedisError))

log = logging.getLogger("worker.admit")

BATCH = 16  # ids popped from one tenant's inbox before the next tenant's turn
RATE_PER_S = 500.0  # ids of one tenant's inbox looked at per second, at most (per process)
POLL_S = 5.0  # every known inbox is looked at this often, announced or not
DISCOVER_S = 60.0  # a SCAN for inboxes this often
_STOP_SLICE_S = 0.2  # how long stop() may wait for the thread
AGAIN_S = BATCH / RATE_PER_S  # the next round, while an inbox holds more
MESSAGES = 1_000  # announcements read at once, at most

# The reasons a queued compaction may be upgraded to (the worker checks their model budget).
UPGRADES = (CompactReason.THRESHOLD, CompactReason.OVERFLOW)

# send(job id, route, task id): publish the task (the worker's Celery app).
Sender = Callable[[str, Route, str], None]


class Admitter:
    """The inboxes' admitter of one worker process (a daemon thread)."""

    def __init__(self, store: InboxStore, jobs: JobStore, send: Sender) -> None:
        self.store = store
        self.jobs = jobs
        self.send = send
        self.known: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pubsub: redis.client.PubSub | None = None
        # Ids dropped per tenant since the last report (one warning per tenant and POLL_S: a
        # flood of garbage never floods the log).
        self.dropped: Counter[str] = Counter()
        self._reported = 0.0
        self.pending: set[str] = set()  # tenants whose inbox held more than their turn took
        self.may_subscribe = True  # False: the workers' user may not listen (polled instead)
        self._allowance: dict[str, tuple[float, float]] = {}  # tenant → (ids, at monotonic)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="compactor-admit", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def _subscribe(self) -> redis.client.PubSub | None:
        if not self.may_subscribe:
            return None
        pubsub = self.store.redis.pubsub(ignore_subscribe_messages=True)
        try:
            pubsub.psubscribe(self.store.inbox_match())
        except redis.exceptions.NoPermissionError:
            self._refused(pubsub)
            return None
        return pubsub

    def _refused(self, pubsub: redis.client.PubSub) -> None:
        """The workers' user may not listen on the inboxes: poll them (said once)."""
        log.warning("the workers' Redis user may not PSUBSCRIBE %s (docs/deploying.md "
                    "'Redis ACL and TLS'): the tenants' inboxes are polled every %s s instead",
                    self.store.inbox_match(), POLL_S)
        self.may_subscribe = False
        pubsub.close()
        self._pubsub = None

    def _loop(self) -> None:
        polled = discovered = 0.0
        while not self._stop.is_set():
            try:
                if self._pubsub is None:
                    self._pubsub = self._subscribe()
                now = time.monotonic()
                if now - discovered >= DISCOVER_S:
                    self.known |= self.store.discover()
                    discovered = now
                due = set(self.known) if now - polled >= POLL_S else set()
                polled = now if due else polled
                wait_s = 0.0 if due else AGAIN_S if self.pending else POLL_S
                self.pending = self.drain(due | self.pending | self._announced(wait_s))
                self._report()
            except Exception as err:  # the admitter must outlive a bug in one look
                if redis_trouble(err):
                    log.debug("admit: %s", err)
                    self._reset()
                else:
                    log.exception("admit failed")
                self._stop.wait(1.0)
        self._reset()

    def _report(self) -> None:
        now = time.monotonic()
        if not self.dropped or now - self._reported < POLL_S:
            return
        for tenant, count in sorted(self.dropped.items()):
            log.warning("admit: tenant %s: %d ids of its inbox dropped (no job of its own with "
                        "a valid record)", tenant, count)
        self.dropped.clear()
        self._reported = now

    def _drop(self, tenant: str, job_id: str, why: str) -> None:
        self.dropped[tenant] += 1
        log.debug("admit: tenant %s: dropped %r: %s", tenant, job_id[:200], why[:300])

    def _reset(self) -> None:
        if self._pubsub is not None:
            self._pubsub.close()
            self._pubsub = None

    def _announced(self, wait_s: float) -> set[str]:
        """The tenants announced within ``wait_s`` (every pending announcement)."""
        if self._pubsub is None:
            self._stop.wait(wait_s)
            return set()
        tenants: set[str] = set()
        try:
            message = self._next_message(wait_s)  # refusals come back here
        except redis.exceptions.NoPermissionError:
            self._refused(self._pubsub)
            return tenants
        for _ in range(MESSAGES):
            if message is None:
                break
            tenant = self.store.tenant_of(str(message.get("channel", "")))
            if tenant is not None:
                tenants.add(tenant)
            message = self._pubsub.get_message(timeout=0)
        self.known |= tenants
        return tenants

    def _next_message(self, wait_s: float) -> dict[str, Any] | None:
        """The next announcement within ``wait_s``, read in slices so that :meth:`stop` ends
        the thread at once (a worker's shutdown, every test's teardown, waited 5 s for it);
        a slice is a socket read, no Redis command."""
        assert self._pubsub is not None
        until = time.monotonic() + wait_s
        while True:
            left = until - time.monotonic()
            message = self._pubsub.get_message(timeout=max(0.0, min(left, _STOP_SLICE_S)))
            if message is not None or left <= _STOP_SLICE_S or self._stop.is_set():
                return message

    def drain(self, tenants: set[str]) -> set[str]:
        """One round: up to :data:`BATCH` ids of each tenant's inbox, within its
        :data:`RATE_PER_S`; returns the tenants whose inbox may hold more (the next round
        takes them again, with the tenants announced meanwhile: a flood waits its turn)."""
        more: set[str] = set()
        for tenant in sorted(tenants):
            if self._stop.is_set():
                return more | tenants
            take = min(BATCH, self._allowed(tenant))
            ids = self.store.pop(tenant, take) if take else []
            self._spend(tenant, len(ids))
            self.admit_batch(tenant, ids)
            if len(ids) == take:
                more.add(tenant)
        return more

    def _allowed(self, tenant: str) -> int:
        ids, at = self._allowance.get(tenant, (float(BATCH), time.monotonic()))
        now = time.monotonic()
        ids = min(float(BATCH), ids + (now - at) * RATE_PER_S)
        self._allowance[tenant] = (ids, now)
        return int(ids)

    def _spend(self, tenant: str, count: int) -> None:
        ids, at = self._allowance[tenant]
        self._allowance[tenant] = (ids - count, at)

    def admit_batch(self, tenant: str, ids: list[str]) -> None:
        """Ids of the tenant's inbox (see the module doc): their records in one round trip."""
        jobs = [job_id for job_id in ids if self._own(tenant, job_id)]
        try:
            records = self.store.records(jobs)
        except Exception as err:
            if redis_trouble(err):
                self.store.put_back(tenant, *jobs)
            raise
        for index, (job_id, fields) in enumerate(zip(jobs, records, strict=True)):
            try:
                record = self._checked(tenant, job_id, fields)
                if record is not None:
                    self._admit(record)
            except CompactorError as err:
                if redis_trouble(err):
                    self.store.put_back(tenant, *jobs[index:])
                    raise
                self._drop(tenant, job_id, str(err))

    def _own(self, tenant: str, job_id: str) -> bool:
        try:
            split_job_id(job_id)
            if tenant_of_job(job_id) == tenant:
                return True
        except ValueError as err:
            self._drop(tenant, job_id, str(err))
            return False
        self._drop(tenant, job_id, "another tenant's job")
        return False

    def _checked(self, tenant: str, job_id: str, fields: dict[str, str]) -> JobRecord | None:
        try:
            record = JobRecord.from_redis(fields) if fields else None
        except (ValidationError, ValueError) as err:
            self._drop(tenant, job_id, str(err))
            return None
        if record is None or record.id != job_id or not job_id.startswith(
                record.session_id + ":"):
            self._drop(tenant, job_id, "no record of that job")
            return None
        return record

    def _admit(self, record: JobRecord) -> None:
        if record.state is JobState.SUCCEEDED and (record.result or {}).get("fromDraft"):
            # A draft the client applied: its session_compact hooks run on a worker, once.
            if self.store.first_notice(record.id):
                self.send(record.id, DRAFT_APPLIED_ROUTE, f"{record.id}-hooks")
            return
        if record.state is not JobState.QUEUED:
            return
        route = route_for(record.kind, record.reason)
        admitted = self.store.admitted_priority(record.id)
        if admitted is not None:  # announced again: an upgrade to a more urgent route
            self._upgrade(record, route, admitted)
            return
        try:
            tag = self.store.admit(record, route)
        except QuotaExceededError as err:
            self.jobs.finish(record.id, JobState.FAILED, record=record, error=str(err))
            log.info("admit: job %s refused: %s", record.id, err)
            return
        self.store.index(record, route)
        if not self.store.place(record.id, route, tag):
            self.send(record.id, route, record.id)

    def _upgrade(self, record: JobRecord, route: Route, admitted: int) -> None:
        """A compaction made more urgent (manual → threshold → overflow, as ``enqueue.lua``
        upgrades it: toward reasons whose model budget the worker checks): sent again at the
        new route. Any other change of a record after its admission is ignored; the worker
        runs the job as admitted."""
        was = (self.store.admitted_as(record.id) or "").split(" ")[0]
        if record.kind is not JobKind.COMPACT or was != JobKind.COMPACT.value:
            return
        if route.priority < admitted and record.reason in UPGRADES:
            self.store.upgraded(record.id, route.priority)
            self.store.index(record, route)
            self.send(record.id, route, f"{record.id}-p{route.priority}")
