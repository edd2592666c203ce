"""The worker's side of a job: its record, lease, ``running`` state, cancel flag, events, end.

For each delivery a worker calls:

1. ``acquire_lease(job_id, worker_id, ttl_s)`` (see :mod:`worker.store.leases`);
2. ``mark_running(job_id)`` → the attempt number (``None``: finished meanwhile);
3. while working: ``renew_lease``, ``is_cancel_requested``, ``publish(JobEvent(...))``;
4. ``finish(job_id, state, ...)`` exactly once: the contract's flow
   (:func:`api_client.contract.job_records.finish_job`), the one the client runs when it
   cancels a queued job or cannot send one.

On a single Redis steps 1-2 (with the tenant's slot, the budget's reads and the start event) are
one round trip instead: :mod:`worker.store.job_start`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import redis

from api_client.contract.errors import JobNotFoundError, StorageFullError
from api_client.contract.job_enums import CompactReason, JobKind, JobState
from api_client.contract.job_records import end_job, finish_job, get_record, record_entry
from api_client.contract.keys import ANY_TENANT, DEFAULT_TENANT, KeyLayout, tenant_of_job
from api_client.contract.lua_scripts import register
from api_client.contract.redis_flows import SyncShell
from api_client.contract.settings import ClientSettings
from api_client.contract.usage import SpendAdd, add_spend
from api_client.contract.wire import JobEvent, JobRecord, now_iso
from worker.store._commits import is_cluster
from worker.store.compaction_counter import CompactionCounter
from worker.store.event_publisher import EventPublisher
from worker.store.fair_index import FairIndex
from worker.store.leases import LeaseOutcome, Leases, guarded
from worker.store.sweep import now_ms

__all__ = ["JobStore"]

log = logging.getLogger("worker.store")


class JobStore:
    """Job records for one Redis, as a worker uses them (``client`` must decode responses)."""

    def __init__(self, client: redis.Redis[str], settings: ClientSettings | None = None,
                 layout: KeyLayout | None = None, fair: FairIndex | None = None) -> None:
        self.redis = client
        self.settings = settings or ClientSettings()
        self.layout = layout or KeyLayout(self.settings.key_prefix, ANY_TENANT)
        # Default: the broker's lists (and their fair order) in this Redis.
        self.fair = fair or FairIndex(client, self.layout)
        self._io = SyncShell(client)
        self.leases = Leases(client, self.layout)
        self.events = EventPublisher(client, self.settings, self.layout)
        self._running = register(client, "running")
        self.compactions = CompactionCounter(client, self.layout, self.settings.session_ttl_s)
        # A job's end in one script (spend, reservation, end, global copy) where one script
        # reaches every key it writes: not on a Redis Cluster (other slots), nor for a client on
        # a tenant's own ACL user.
        self.ends_in_one_step = not (self.settings.redis_cluster or is_cluster(client)
                                     or self.settings.tenant_inbox)

    def get(self, job_id: str) -> JobRecord:
        """The job's record; one admitted from its tenant's inbox (``worker/store/inbox.py``)
        with the kind and reason it was admitted as, whatever the tenant wrote there since."""
        tenant = tenant_of_job(job_id)
        if tenant == DEFAULT_TENANT:
            return self._io.run(get_record(self.layout, job_id))
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(self.layout.job(job_id).record)
        pipe.hget(self.layout.tenant_admitted(tenant), job_id)
        fields, admitted = guarded(job_id, pipe.execute)
        if not fields:
            raise JobNotFoundError(job_id)
        return as_admitted(self._io.run(record_entry(self.layout, job_id, fields)), admitted)

    def finish(self, job_id: str, state: JobState | str, *, event: JobEvent | None = None,
               record: JobRecord | None = None, spend: SpendAdd | None = None,
               announce: Sequence[JobEvent] = (), release: bool = True,
               **result: Any) -> bool:
        """End the job once; True if this call ended it (see ``finish_job`` for ``result``).
        ``spend``: the delivery's spend, counted with the end; ``announce``: events of the
        job's commit written before its end; ``release``: give back the job's reservation
        (False: none was made, its start saw no daily budget). On one Redis
        (:attr:`ends_in_one_step`) one script does it all (``end_job``); else ``spend`` is
        counted and ``announce`` published first, then ``finish_job``'s calls (the service
        counts and publishes itself there)."""
        if self.ends_in_one_step:
            return self._io.run(end_job(self.layout, self.settings, job_id, state, event,
                                        record, result, spend, announce,
                                        release_held=release))
        for told in announce:
            self.publish(told)
        if spend is not None:
            self._io.run(add_spend(self.layout, spend.tenant, spend.day,
                                   input_tokens=spend.input_tokens,
                                   output_tokens=spend.output_tokens, usd=spend.usd,
                                   draft=spend.draft, jobs=spend.jobs,
                                   name_tenant=spend.name_tenant, keep_day=spend.keep_day))
        return self._io.run(finish_job(self.layout, self.settings, job_id, state, event, record,
                                       result, release_held=release))

    def acquire_lease(self, job_id: str, worker_id: str, ttl_s: float) -> LeaseOutcome:
        outcome = self.leases.acquire(job_id, worker_id, ttl_s)
        if outcome is LeaseOutcome.ACQUIRED:
            # The sweep looks again when this lease would end (the worker died if it did).
            due: dict[str | bytes, float] = {job_id: now_ms() + int(ttl_s * 1000)}
            try:
                guarded(job_id, lambda: self.redis.zadd(self.layout.jobs_due, due))
            except StorageFullError as err:
                # The lease is this delivery's now: giving up here would strand it. The job
                # keeps its earlier due time (set at enqueue), so the sweep still finds it.
                log.warning("job %s: sweep index not updated: %s", job_id, err)
        return outcome

    def renew_lease(self, job_id: str, worker_id: str, ttl_s: float) -> bool:
        return self.leases.renew(job_id, worker_id, ttl_s)

    def lease_holder(self, job_id: str) -> str | None:
        return self.leases.holder(job_id)

    def release_lease(self, job_id: str, worker_id: str) -> bool:
        return self.leases.release(job_id, worker_id)

    def mark_running(self, job_id: str, attempt: int | None = None) -> int | None:
        """Set ``running`` and count the attempt; None when the job already finished. The
        record then lives ``job_ttl_s`` (its pending TTL only bounds the wait in the queue)."""
        record = self._mark(job_id, attempt)
        return None if record is None else record.attempts

    def start(self, job_id: str) -> JobRecord | None:
        """:meth:`mark_running` (one more attempt) and the record as it now is, read in the
        same step (:meth:`get` after it would read it again); None: the job already finished."""
        return self._mark(job_id, None)

    def _mark(self, job_id: str, attempt: int | None) -> JobRecord | None:
        args = [now_iso(), "" if attempt is None else str(attempt), str(self.settings.job_ttl_s)]
        keys = [self.layout.job(job_id).record]
        reply = guarded(job_id, lambda: self._running(keys=keys, args=args))
        if int(reply[0]) < 0:
            return None
        guarded(job_id, lambda: self._leave_queue(job_id, str(reply[1]), str(reply[2])))
        flat = [str(v) for v in reply[3:]]
        record = JobRecord.from_redis(dict(zip(flat[::2], flat[1::2], strict=True)))
        tenant = tenant_of_job(job_id)
        if tenant == DEFAULT_TENANT:
            return record
        admitted = guarded(job_id, lambda: self.redis.hget(self.layout.tenant_admitted(tenant),
                                                           job_id))
        return as_admitted(record, admitted)

    def _leave_queue(self, job_id: str, queue: str, priority: str) -> None:
        """Started: the job no longer counts as queued for its tenant (the fair order, the
        queued_jobs quota) nor names a pivot in its queue list's fair index (keys of other
        slots than the record's, maybe of the broker's Redis: commands of their own)."""
        self.redis.zrem(self.layout.queued_of_job(job_id), job_id)
        if queue and priority.isdigit():
            self.fair.drop(job_id, queue, int(priority))

    def is_cancel_requested(self, job_id: str) -> bool:
        record = self.layout.job(job_id).record
        return guarded(job_id, lambda: self.redis.hget(record, "cancelRequested")) == "1"

    def cancel_requested_among(self, job_ids: Sequence[str]) -> set[str]:
        """The ids in ``job_ids`` whose cancel flag is set: one pipelined round trip."""
        if not job_ids:
            return set()

        def read() -> list[str | None]:
            pipe = self.redis.pipeline(transaction=False)
            for job_id in job_ids:
                pipe.hget(self.layout.job(job_id).record, "cancelRequested")
            return pipe.execute()

        flags = guarded(job_ids[0], read)
        return {job_id for job_id, flag in zip(job_ids, flags, strict=True) if flag == "1"}

    def publish(self, event: JobEvent, *, ttl_set: bool = False) -> str:
        """A non-terminal event (compaction_start, session_compact, branch_summary, stale);
        ``ttl_set``: see :meth:`EventPublisher.publish`."""
        return self.events.publish(event, ttl_set=ttl_set)

    def recent_compactions(self, session_id: str, now: float, window_s: float) -> int:
        """The loop guard's count (:mod:`worker.store.compaction_counter`)."""
        return self.compactions.recent(session_id, now, window_s)

    def count_compaction(self, session_id: str, job_id: str, now: float, window_s: float) -> None:
        self.compactions.count(session_id, job_id, now, window_s)


def as_admitted(record: JobRecord, admitted: str | None) -> JobRecord:
    """A record admitted from its tenant's inbox, with the kind and reason it was admitted as
    (``admitted``: ``"<kind> <reason>"``, None: not from an inbox)."""
    if admitted is None:
        return record
    kind, _, reason = str(admitted).partition(" ")
    return record.model_copy(update={"kind": JobKind(kind),
                                     "reason": CompactReason(reason) if reason else None})
