"""A job's start on a single Redis, in one round trip (``start_job.lua``; docs/storage.md "A
job's start"): the lease, the jobs-due index, the tenant's ``max_running`` slot, the record
running for one more attempt, the job out of its tenant's queued set and its queue list's fair
index, what the budget check reads (the quota, once; the day's spend only when a budget may
apply) and, when no check of the worker can come between them, the ``compaction_start`` event
with its retention and its global copy; and, for a job that reads its session's path first
thing (a compaction, not a draft's; a prune), the start of that read (the session's stored
bytes, the ``MGET`` of its header, revision, leaf, rewrites and prune watermark, the first page
of the path: ``_path_page.lua``, as ``path_page.lua`` reads it), which the job goes on from
(``JobStart.first_read``: ``worker.store.paths``) instead of three round trips of its own.

Before, a delivery sent those as 13 commands in 8 round trips, each of which waited for the GIL
on a busy threads pool. On a Redis Cluster the keys lie in many slots: there the service sends
the separate calls (``worker.service._delivery_start``), as the client's enqueue splits there.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from api_client.contract.keys import DEFAULT_TENANT, tenant_of_job
from api_client.contract.lua_scripts import register
from api_client.contract.usage import DayUsage, utc_day
from api_client.contract.wire import JobRecord, now_iso
from worker.store.job_lifecycle import JobStore, as_admitted
from worker.store.leases import LeaseOutcome, guarded
from worker.store.paths import PAGE_BYTES, PAGE_LINES, FirstRead
from worker.store.tenant_slots import DEFER_S, TenantSlots

__all__ = ["JobStart", "JobStarts"]


@dataclass(frozen=True, slots=True)
class JobStart:
    """What a delivery's start found. ``lease``: ``ACQUIRED`` (go on), ``HELD`` or
    ``FINISHED``. Acquired: ``deferred`` (the tenant runs ``max_running`` jobs already: put
    back, the lease let go), else ``record`` (running, its attempt counted; None: the job
    ended meanwhile, a duplicate), ``budget`` (the day's spend and the tenant's quota, for the
    budget check; None: the check reads them itself), ``start_event`` (``compaction_start``
    was written with the start: the job does not publish it), ``first_read`` (the start of the
    job's read of its session's path; None: the job reads it all) and ``may_reserve`` (False:
    the start saw no daily budget that may apply, so the job's admission reserved nothing
    (``_admit.lua``) nor will its model calls: its end gives nothing back)."""

    lease: LeaseOutcome
    record: JobRecord | None = None
    deferred: bool = False
    budget: tuple[DayUsage, dict[str, str]] | None = None
    start_event: bool = False
    first_read: FirstRead | None = None
    may_reserve: bool = True


class JobStarts:
    """``start_job.lua`` for the jobs of ``jobs`` (a single Redis): ``slots`` applies the
    ``max_running`` caps (None: none), ``budgets`` reads what the model budget check needs,
    ``max_session_bytes`` is the sessions' bound a job's read checks first (0: none)."""

    def __init__(self, jobs: JobStore, *, lease_ttl_s: float, slots: TenantSlots | None,
                 budgets: bool, max_session_bytes: int = 0) -> None:
        self.jobs = jobs
        self.max_session_bytes = max_session_bytes
        self.lease_ms = max(1, int(lease_ttl_s * 1000))
        self.slots = slots
        self.budgets = budgets
        self._script = register(jobs.redis, "start_job")
        # The broker's lists (and their fair index) in this Redis: the script drops the job
        # from the index; in the broker's own Redis a command of its own does.
        self._fair_here = jobs.fair.redis is jobs.redis

    def begin(self, job_id: str, owner: str) -> JobStart:
        layout, settings = self.jobs.layout, self.jobs.settings
        tenant, jk = tenant_of_job(job_id), layout.job(job_id)
        sk = jk.session
        at = time.time()
        now, day = int(at * 1000), utc_day(at)
        keys = [jk.record, jk.lease, layout.jobs_due, layout.tenant_running(tenant),
                layout.tenant_quota(tenant), layout.tenant_queued(tenant),
                layout.tenant_usage(tenant, day), layout.tenant_admitted(tenant),
                sk.events, layout.events_of(jk.session_id), sk.effects,
                layout.tenant_bytes(tenant), sk.header, sk.rev, sk.leaf, sk.rewrites, sk.pruned,
                sk.entries, sk.order]
        slots = self.slots
        args = [job_id, owner, self.lease_ms, now, now_iso(), settings.job_ttl_s,
                "" if slots is None else now + slots.hold_ms,
                0 if slots is None else slots.max_running, now + int(DEFER_S * 1000),
                settings.tokens_per_day if self.budgets else "",
                settings.usd_per_day if self.budgets else "",
                "1" if tenant != DEFAULT_TENANT else "",
                f"{layout.prefix}:fair:" if self._fair_here else "",
                settings.session_event_maxlen, settings.event_stream_maxlen,
                settings.session_ttl_s, layout.resolve(jk.session_id)[1],
                self.max_session_bytes, PAGE_LINES, PAGE_BYTES]
        reply = guarded(job_id, lambda: self._script(keys=keys, args=[str(a) for a in args]))
        if reply[0] == "deferred":
            return JobStart(LeaseOutcome.ACQUIRED, deferred=True)
        lease = LeaseOutcome(str(reply[0]))
        if lease is not LeaseOutcome.ACQUIRED:
            return JobStart(lease)
        slot, event_id, admitted, quota, spend, running, read = reply[1:]
        if int(slot) == 1 and slots is not None:
            slots.held(job_id)
        if int(running[0]) < 0:
            return JobStart(lease)
        queue, priority = str(running[1]), str(running[2])
        if not self._fair_here and queue and priority.isdigit():
            guarded(job_id, lambda: self.jobs.fair.drop(job_id, queue, int(priority)))
        record = JobRecord.from_redis(_pairs(running[3:]))
        budget = None
        if self.budgets:
            budget = (DayUsage.from_redis(tenant, day, _pairs(spend or [])), _pairs(quota))
        # The spend is read when a daily budget may apply (budget_may_apply): else no
        # admission reserved for the job (unless the start read no budget at all).
        return JobStart(lease, as_admitted(record, str(admitted) or None), budget=budget,
                        start_event=bool(event_id), first_read=_first_read(read),
                        may_reserve=not self.budgets or spend is not None)


def _first_read(read: object) -> FirstRead | None:
    """The script's path read: '' (none), {bytes (nil: not read)}, or {bytes, the MGET's
    values, the first page's lines}."""
    if not isinstance(read, list):
        return None
    counted = None if read[0] is None else int(read[0])
    if len(read) < 3:
        return FirstRead(counted)
    header, rev, leaf, rewrites, pruned = (None if v is None else str(v) for v in read[1])
    return FirstRead(counted, (header, rev, leaf, rewrites, pruned),
                     tuple(str(line) for line in read[2]))


def _pairs(flat: list[object]) -> dict[str, str]:
    """A script's flat field/value reply as a dict."""
    values = [str(v) for v in flat]
    return dict(zip(values[::2], values[1::2], strict=True))
