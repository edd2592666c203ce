"""The jobs-due index (``<p>:jobs:due``) and what the workers' sweep reads and writes.

Every job that is queued or running has an entry: job id → when (Unix ms) a sweep must look at
it. The client adds it at enqueue (``requeue_after_s`` ahead), a worker moves it to the end of
the lease it takes, the sweep moves it on after each look (or drops it once the job ended).
The index is one key in one Cluster slot; the sweep claims entries with a single-key script
and reads each job's record and lease with a separate call in the session's slot, so nothing
is ever cross-slot. Entries without a record (a coalesced enqueue, an expired job) are dropped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import redis

from api_client.contract.job_enums import CompactReason, JobKind, JobState
from api_client.contract.keys import KeyLayout, tenant_of_job
from api_client.contract.lua_scripts import register
from api_client.contract.routing import route_for
from worker.store.fair_index import FairIndex
from worker.store.leases import guarded

__all__ = ["JobLook", "SweepStore", "now_ms"]


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class JobLook:
    """One job as the sweep sees it (``state`` None: no record any more)."""

    job_id: str
    state: JobState | None
    attempts: int = 0
    resent: int = 0
    kind: str = ""
    queue: str = ""
    priority: int = 0
    lease_ms: int = 0  # the lease's remaining life; 0 = no live lease


class SweepStore:
    """The index and the per-job reads and writes of one sweeping worker."""

    def __init__(self, client: redis.Redis[str], layout: KeyLayout,
                 fair: FairIndex | None = None) -> None:
        self.redis = client
        self.layout = layout
        self.fair = fair or FairIndex(client, layout)
        self._claim = register(client, "sweep_claim")

    def claim(self, hold_ms: int, limit: int) -> list[str]:
        """Job ids due now, held ``hold_ms`` away from other sweeps."""
        args = [str(now_ms()), str(hold_ms), str(limit)]
        claimed = guarded("", lambda: self._claim(keys=[self.layout.jobs_due], args=args))
        return [str(j) for j in claimed]

    def due_at(self, job_id: str, when_ms: int) -> None:
        guarded(job_id, lambda: self.redis.zadd(self.layout.jobs_due, {job_id: when_ms}))

    def forget(self, job_id: str) -> None:
        guarded(job_id, lambda: self.redis.zrem(self.layout.jobs_due, job_id))

    def dequeue(self, job_id: str) -> None:
        """Out of its tenant's queued jobs (an ended job a client could not take out), its
        admitted ones (``worker/store/inbox.py``) and the model budget it held
        (``api_client/contract/reservations.py``)."""
        key = self.layout.queued_of_job(job_id)
        admitted = self.layout.tenant_admitted(tenant_of_job(job_id))
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrem(key, job_id)
        pipe.hdel(admitted, job_id)
        pipe.hdel(self.layout.tenant_reserved(tenant_of_job(job_id)), job_id)
        guarded(job_id, pipe.execute)

    def look(self, job_id: str) -> JobLook:
        jk = self.layout.job(job_id)

        def read() -> list[Any]:
            pipe = self.redis.pipeline(transaction=False)  # one slot: the session's
            pipe.hmget(jk.record, ["state", "attempts", "resent", "kind", "reason"])
            pipe.pttl(jk.lease)
            return list(pipe.execute())

        fields, pttl = guarded(job_id, read)
        state, attempts, resent, kind, reason = fields
        if state is None:
            return JobLook(job_id, None)
        # The route from the kind and reason, not the record's queue and priority fields (a
        # tenant's own ACL user may write its records: docs/tenants.md). ValueError: not a job.
        job_kind = JobKind(kind)
        why = CompactReason(reason) if reason and job_kind is JobKind.COMPACT else None
        route = route_for(job_kind, why)
        return JobLook(job_id, JobState(state), int(attempts or 0), int(resent or 0),
                       job_kind.value, route.queue, route.priority, max(0, int(pttl)))

    def still_queued(self, job: JobLook) -> bool:
        """Whether the job's task message still waits in its queue list: a long queue (or one
        the fair order put behind other tenants' jobs), not a lost message."""
        return self.fair.waiting(job.job_id, job.queue, job.priority)

    def count_resend(self, job_id: str) -> int:
        record = self.layout.job(job_id).record
        return int(guarded(job_id, lambda: self.redis.hincrby(record, "resent", 1)))

