"""The stored bytes of a tenant on its own Redis ACL user, as the workers measure them
(docs/tenants.md "A Redis ACL user per tenant"; docs/security.md "Redis").

Such a tenant's client (``tenant_inbox``) writes its session keys itself and may not write its
stored-bytes count (it could lift it, issue 39 H2), and Redis ACL bounds no user's memory: its
writes cannot be refused as they happen. The workers measure instead, when they admit its jobs:
:meth:`InboxBytes.measure` sums ``MEMORY USAGE`` of every key ``SessionKeys.all`` names for the
job's session (``measure_session.lua``, one script on the session's slot: one round trip), and
the admission (``inbox_admit.lua``) writes it in ``KeyLayout.tenant_measured`` (session → bytes,
``*`` → their sum, kept by ``_stored_bytes.lua``'s functions; no tenant's ACL pattern reaches it)
and refuses the job, ``quota_exceeded`` ``stored_bytes``, while the sum is over the tenant's
``stored_bytes_max``. A tenant whose last admission (within :data:`LIMIT_FRESH_S`) had no limit
is not measured: a fleet without the quota pays nothing for it.

A session the tenant deletes has no next job to be measured at: when a job is refused,
:meth:`InboxBytes.recheck` drops the counts of the tenant's sessions none of whose keys exists
any more (one multi-key ``EXISTS`` a session; the fields walked with ``HSCAN`` from where the
last walk stopped, at most :data:`RECHECK_PER_S` sessions a second per tenant and process, so a
tenant over its quota that floods its inbox costs Redis a bounded amount) and the admission is
tried once more. The workers' reconcile (``worker/store/tenant_bytes.py``) measures every
counted session again (a session shrunk or grown by direct writes too), so a count is stale for
at most one pass whether or not the tenant asks for jobs.

What is measured is what the fleet can see cheaply: the sessions it has admitted jobs of, their
keys as ``KeyLayout`` names them, a collection of more than 1024 elements estimated from 1024 of
them (a value far larger than its neighbours in a large hash may be missed). Keys the layout does
not name (a job record's token, an import's staging keys, any other name under the tenant's
pattern) and sessions the tenant never asks a job of are not measured.
"""

from __future__ import annotations

import time
from functools import partial

import redis

from api_client.contract.keys import TENANT_SEP, KeyLayout
from api_client.contract.lua_scripts import queue, register
from api_client.contract.stored_bytes import BYTES_TOTAL
from worker.store.leases import guarded

__all__ = ["LIMIT_FRESH_S", "RECHECK_PER_S", "InboxBytes"]

LIMIT_FRESH_S = 5.0  # how long an admission's "no stored_bytes_max" is believed, per tenant
RECHECK_PER_S = 500.0  # sessions of one tenant measured again a second, at most (per process)
PAGE = 100  # fields of a measured hash per HSCAN, measured in one pipeline


class InboxBytes:
    """Measures inbox tenants' sessions and keeps their measured hashes (module doc)."""

    def __init__(self, client: redis.Redis[str], layout: KeyLayout) -> None:
        self.redis = client
        self.layout = layout
        self._measure = register(client, "measure_session")
        self._count = register(client, "stored_bytes")
        self._unlimited: dict[str, float] = {}  # tenant → until when (monotonic) not measured
        self._cursor: dict[str, int] = {}  # tenant → where its next recheck goes on
        self._allowance: dict[str, tuple[float, float]] = {}  # tenant → (sessions, at)

    def wanted(self, tenant: str) -> bool:
        """False while the tenant's last admission said it has no stored_bytes_max."""
        return self._unlimited.get(tenant, 0.0) <= time.monotonic()

    def learned(self, tenant: str, limit: int) -> None:
        """The limit an admission read: 0 spares the tenant's next admissions the measure."""
        if limit > 0:
            self._unlimited.pop(tenant, None)
        else:
            self._unlimited[tenant] = time.monotonic() + LIMIT_FRESH_S

    def measure(self, session_id: str) -> int:
        """Bytes the session's keys take in Redis (0: none of them exists)."""
        keys = list(self.layout.session(session_id).all())
        return int(guarded("", lambda: self._measure(keys=keys)))

    def recheck(self, tenant: str) -> int:
        """Drop the counts of the tenant's sessions that are gone, within its allowance
        (module doc); returns how many."""
        budget = self._allowed(tenant)
        key, lowered = self.layout.tenant_measured(tenant), 0
        cursor = self._cursor.pop(tenant, 0)
        while budget > 0:
            cursor, fields = guarded("", partial(self.redis.hscan, key, cursor,
                                                 count=min(PAGE, budget)))
            counted = {f: v for f, v in fields.items() if f != BYTES_TOTAL}
            budget -= len(counted)
            lowered += self._update(tenant, key, counted, remeasure=False)
            if int(cursor) == 0:
                break
        self._spend(tenant, budget)
        if int(cursor):
            self._cursor[tenant] = int(cursor)
        return lowered

    def reconcile(self, tenant: str) -> int:
        """Measure all of the tenant's counted sessions again (the reconcile's pass)."""
        key, lowered, cursor = self.layout.tenant_measured(tenant), 0, 0
        while True:
            cursor, fields = self.redis.hscan(key, cursor, count=PAGE)
            lowered += self._update(tenant, key, {f: v for f, v in fields.items()
                                                  if f != BYTES_TOTAL}, remeasure=True)
            if int(cursor) == 0:
                return lowered

    def _update(self, tenant: str, key: str, counted: dict[str, str], *, remeasure: bool
                ) -> int:
        """Measure the sessions again, or only see which are gone (``remeasure`` False: one
        ``EXISTS`` a session), in one pipeline; write the counts that changed (a session gone:
        its count leaves, only while it still is what the walk read, as another worker may
        have measured the session anew); returns how many went down."""
        if not counted:
            return 0
        pipe = self.redis.pipeline(transaction=False)
        for sid in counted:
            keys = self.layout.session(f"{tenant}{TENANT_SEP}{sid}").all()
            if remeasure:  # the script loaded before the pipeline runs (lua_scripts.queue)
                queue(pipe, "measure_session", list(keys))
            else:
                pipe.exists(*keys)
        lowered = 0
        for (sid, was), reply in zip(counted.items(), guarded("", pipe.execute), strict=True):
            now = int(reply) if remeasure else int(was) if reply else 0
            if now != int(was):
                op, amount = ("drop", was) if now == 0 else ("set", str(now))
                guarded("", partial(self._count, keys=[key], args=[op, sid, amount]))
                lowered += now < int(was)
        return lowered

    def _allowed(self, tenant: str) -> int:
        sessions, at = self._allowance.get(tenant, (RECHECK_PER_S, time.monotonic()))
        now = time.monotonic()
        sessions = min(RECHECK_PER_S, sessions + (now - at) * RECHECK_PER_S)
        self._allowance[tenant] = (sessions, now)
        return int(sessions)

    def _spend(self, tenant: str, left: int) -> None:
        _, at = self._allowance[tenant]
        self._allowance[tenant] = (float(max(0, left)), at)
