"""Per-tenant concurrency: at most ``max_running`` jobs of one tenant run at once, fleet-wide
(the setting, or the field of the tenant's quota hash; 0 = no limit).

A worker takes a slot before it starts a job (``tenant_slot.lua``; on a single Redis in the
job's start, ``start_job.lua``) and gives it back when the run ends; a worker that dies frees it
at the job's deadline. A job over the cap is put back: its lease is let go and the sweep sends it
again ``DEFER_S`` later (it stays queued, still counted among the tenant's queued jobs), so the
cap never blocks a worker slot.
"""

from __future__ import annotations

import threading

import redis

from api_client.contract.keys import KeyLayout, tenant_of_job
from api_client.contract.lua_scripts import register
from worker.store.leases import guarded
from worker.store.sweep import now_ms

__all__ = ["DEFER_S", "TenantSlots"]

# How soon a job put back is looked at again (plus one sweep interval).
DEFER_S = 1.0


class TenantSlots:
    def __init__(self, client: redis.Redis[str], layout: KeyLayout, *, max_running: int,
                 hold_s: float) -> None:
        self.redis = client
        self.layout = layout
        self.max_running = max_running
        self.hold_ms = int(hold_s * 1000)
        self._take = register(client, "tenant_slot")
        self._held: set[str] = set()  # the jobs this process holds a slot for
        self._lock = threading.Lock()

    def take(self, job_id: str) -> bool:
        """True: run the job (a slot is held for it, or no cap applies)."""
        tenant = tenant_of_job(job_id)
        keys = [self.layout.tenant_running(tenant), self.layout.tenant_quota(tenant)]
        now = now_ms()
        args = [job_id, str(now), str(now + self.hold_ms), str(self.max_running)]
        reply = int(guarded(job_id, lambda: self._take(keys=keys, args=args)))
        if reply == 1:
            self.held(job_id)
        return reply > 0

    def held(self, job_id: str) -> None:
        """A slot is held for the job (taken by :meth:`take`, or by the job's start in one step
        with the rest: ``worker.store.job_start``): :meth:`release` gives it back."""
        with self._lock:
            self._held.add(job_id)

    def release(self, job_id: str) -> None:
        """Give the job's slot back (nothing to do when no cap applied: none was held)."""
        with self._lock:
            if job_id not in self._held:
                return
            self._held.discard(job_id)
        key = self.layout.running_of_job(job_id)
        guarded(job_id, lambda: self.redis.zrem(key, job_id))

    def defer(self, job_id: str) -> None:
        """The sweep sends the job again ``DEFER_S`` from now."""
        due: dict[str | bytes, float] = {job_id: now_ms() + int(DEFER_S * 1000)}
        guarded(job_id, lambda: self.redis.zadd(self.layout.jobs_due, due))
