"""The reconcile of the tenants' counts of stored bytes (:mod:`api_client.contract.stored_bytes`).

A session that expires (retention) is removed by Redis, not by a script: its field stays in its
tenant's bytes hash, and its bytes in the tenant's total, until a reconcile drops them. Every
worker process runs a pass every :data:`RECONCILE_EVERY_S` (``worker/celery_app/app.py``
``StoredBytesStep``): it finds the tenants' hashes (``SCAN`` with ``MATCH`` their name for any
tenant and ``TYPE hash``, on every primary of a Cluster), walks each (``HSCAN``, :data:`PAGE`
fields a page), asks for the header of each session of a page in one pipeline, and drops the
counts of the sessions whose header is gone. A drop applies only while the count is still the
value the pass read (``stored_bytes.lua drop``): a session made again meanwhile keeps its count.
The same walk finds the measured hashes of the tenants on their own ACL users and measures each
counted session again (``worker/store/inbox_bytes.py``: a session gone leaves, a changed one is
set anew).

How stale a count gets: a session's bytes stop counting at most :data:`RECONCILE_EVERY_S` plus
one pass after it expired (a pass: one ``SCAN`` walk of the keyspace, about a thousand calls of
under a millisecond for a million keys, and one ``EXISTS`` per counted session; no call holds
Redis longer). Until then the tenant's total is too high by what its expired sessions held, so
the quota refuses early, never late.
"""

from __future__ import annotations

import logging
import re
import threading

import redis

from api_client.contract.keys import ANY_TENANT, TENANT_NAME, KeyLayout
from api_client.contract.lua_scripts import register
from api_client.contract.stored_bytes import BYTES_TOTAL
from worker.store.inbox_bytes import InboxBytes

__all__ = ["RECONCILE_EVERY_S", "BytesReconciler"]

log = logging.getLogger("worker.stored_bytes")

RECONCILE_EVERY_S = 300.0
PAGE = 500  # fields of a tenant's hash a page: one HSCAN, one pipeline of EXISTS
SCAN_COUNT = 1_000


def _glob_escaped(text: str) -> str:
    """``text`` matched literally by ``SCAN MATCH`` (a key prefix may hold ``*`` or ``?``)."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


class BytesReconciler:
    """Drops the counts of expired sessions (a daemon thread between :meth:`start` and
    :meth:`stop`, or :meth:`run_pass` on demand)."""

    def __init__(self, client: redis.Redis[str], prefix: str,
                 every_s: float = RECONCILE_EVERY_S) -> None:
        self.redis = client
        self.prefix = prefix
        self.every_s = every_s
        self._drop = register(client, "stored_bytes")
        self.measured = InboxBytes(client, KeyLayout(prefix, ANY_TENANT))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tenants(self) -> list[str]:
        """The tenants that have a bytes hash."""
        return self._hashes()[0]

    def _hashes(self) -> tuple[list[str], list[str]]:
        """The tenants that have a bytes hash, and those that have a measured hash (an inbox
        tenant's, ``worker/store/inbox_bytes.py``), in one ``SCAN`` walk."""
        layout = KeyLayout(self.prefix)
        head, _, _ = layout.tenant_bytes("\0").partition("\0")
        tails = [f("\0").partition("\0")[2] for f in (layout.tenant_bytes, layout.tenant_measured)]
        found: tuple[set[str], set[str]] = (set(), set())
        match = _glob_escaped(head) + "*}:[bm]*"  # …:bytes and …:measured (of hashes: no more)
        for key in self.redis.scan_iter(match=match, count=SCAN_COUNT, _type="hash"):
            for tail, tenants in zip(tails, found, strict=True):
                name = str(key)[len(head):len(str(key)) - len(tail)]
                if str(key).endswith(tail) and TENANT_NAME.fullmatch(name):
                    tenants.add(name)
        return sorted(found[0]), sorted(found[1])

    def reconcile(self, tenant: str) -> int:
        """Drop the counts of the tenant's sessions that are gone; returns how many."""
        layout = KeyLayout(self.prefix, tenant)
        key, dropped, cursor = layout.tenant_bytes(tenant), 0, 0
        while True:
            cursor, fields = self.redis.hscan(key, cursor, count=PAGE)
            counted = {f: v for f, v in fields.items() if f != BYTES_TOTAL}
            dropped += self._drop_gone(layout, key, counted)
            if int(cursor) == 0:
                return dropped

    def _drop_gone(self, layout: KeyLayout, key: str, counted: dict[str, str]) -> int:
        if not counted:
            return 0
        pipe = self.redis.pipeline(transaction=False)  # the headers: any slots
        for sid in counted:
            pipe.exists(layout.session(sid).header)
        gone = [sid for sid, alive in zip(counted, pipe.execute(), strict=True) if not alive]
        return sum(int(self._drop(keys=[key], args=["drop", sid, counted[sid]])) for sid in gone)

    def run_pass(self) -> int:
        """One pass over every tenant; returns the counts dropped (and the measured counts that
        went down)."""
        counted, measured = self._hashes()
        return sum(self.reconcile(tenant) for tenant in counted) + sum(
            self.measured.reconcile(tenant) for tenant in measured)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="compactor-stored-bytes",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
            self.redis.close()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                if dropped := self.run_pass():
                    log.info("stored bytes: dropped or lowered the counts of %d sessions",
                             dropped)
            except Exception as err:  # Redis away or a bug: the next pass tries again
                log.warning("stored bytes not reconciled: %s: %s", type(err).__name__, err)
