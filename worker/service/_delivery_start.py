"""A delivery's start: the lease, its tenant's ``max_running`` slot and the record running for one
more attempt, as a :class:`~worker.store.job_start.JobStart` tells.

On a single Redis the runtime's ``starts`` does it all in one round trip (``start_job.lua``),
with what the budget check reads and the ``compaction_start`` event. Without it (a Redis
Cluster, whose keys lie in many slots; the service's tests) the ports' separate calls do, as the
client's enqueue splits on a Cluster: the lease, the slot, the record; the budget check and the
event then read and write on their own (docs/storage.md "A job's start").
"""

from __future__ import annotations

from worker.service.ports import Runtime
from worker.store.job_start import JobStart
from worker.store.leases import LeaseOutcome

__all__ = ["begin"]


def begin(rt: Runtime, job_id: str, owner: str) -> JobStart:
    """Start the delivery ``owner`` of ``job_id``. A job over its tenant's cap is put back
    (``deferred``: the lease let go, the sweep sends it again shortly)."""
    if rt.starts is not None:
        return rt.starts.begin(job_id, owner)
    lease = rt.jobs.acquire_lease(job_id, owner, rt.settings.lease_ttl_s)
    if lease is not LeaseOutcome.ACQUIRED:
        return JobStart(lease)
    if rt.slots is None:
        return JobStart(lease, rt.jobs.start(job_id))
    if not rt.slots.take(job_id):
        rt.jobs.release_lease(job_id, owner)
        rt.slots.defer(job_id)
        return JobStart(lease, deferred=True)
    try:
        return JobStart(lease, rt.jobs.start(job_id))
    except BaseException:
        rt.slots.release(job_id)
        raise
