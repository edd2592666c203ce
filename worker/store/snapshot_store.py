"""The worker's snapshot loads: the contract's load, with parsed entries kept across loads
(:class:`~worker.store.entry_cache.EntryCache`) when the composition root gives a cache, and a
session over ``max_session_bytes`` refused before any of it is read."""

from __future__ import annotations

import redis

from api_client.contract.errors import SessionTooLargeError
from api_client.contract.keys import KeyLayout
from api_client.contract.redis_flows import SyncShell, cmd
from api_client.contract.snapshots import ParsedEntries, Snapshot, load_snapshot
from worker.store.entry_cache import EntryCache
from worker.store.paths import FirstRead, PathSnapshot, PathStore, Reach

__all__ = ["SnapshotStore"]


class SnapshotStore:
    """``load`` and ``load_path`` for the service's ``Sessions`` port."""

    def __init__(self, client: redis.Redis[str], layout: KeyLayout,
                 entry_cache: ParsedEntries | None = None, *, max_bytes: int = 0) -> None:
        self.layout = layout
        self._io = SyncShell(client)
        self._entry_cache = entry_cache
        self._paths = PathStore(client, layout,
                                entry_cache if isinstance(entry_cache, EntryCache) else None)
        self.max_bytes = max_bytes  # 0: no bound

    def load(self, session_id: str) -> Snapshot:
        if self.max_bytes:
            self.check_size(session_id)
        return self._io.run(load_snapshot(self.layout, session_id, self._entry_cache))

    def load_path(self, session_id: str, reach: Reach,
                  first: FirstRead | None = None) -> PathSnapshot:
        """The leaf's path, read back only as far as ``reach`` says a plan needs
        (:mod:`worker.store.paths`); ``first``: the read's start, done with the job's start
        (the session's stored bytes among it: no check of its own then)."""
        if self.max_bytes:
            if first is not None and first.counted is not None:
                self._bounded(session_id, first.counted)
            else:
                first = None  # read without the bound: read again, checked
                self.check_size(session_id)
        return self._paths.load_path(session_id, reach, first)

    def check_size(self, session_id: str) -> int:
        """The bytes of the session's stored entry lines; :class:`SessionTooLargeError` over
        ``max_bytes``. One command, no data moved and none that walks the session: loading a
        session costs the worker several times its size in memory, so a session too large to
        load is refused before reading it. The count is the tenant's stored-bytes field of the
        session (api_client/contract/stored_bytes.py, kept by every write of its lines); a
        session without one (written by a tenant's own ACL user, which does not count) is
        measured by ``MEMORY USAGE`` estimated from a sample of its entries (the default five
        fields, never ``SAMPLES 0``, which reads every field)."""
        tenant, plain = self.layout.resolve(session_id)
        counted = self._io.execute(cmd("hget", self.layout.tenant_bytes(tenant), plain))
        if counted is not None:
            size = int(counted)
        else:
            key = self.layout.session(session_id).entries
            size = int(self._io.execute(cmd("memory_usage", key)) or 0)
        return self._bounded(session_id, size)

    def _bounded(self, session_id: str, size: int) -> int:
        """``size``, or :class:`SessionTooLargeError` over ``max_bytes``."""
        if self.max_bytes and size > self.max_bytes:
            raise SessionTooLargeError(f"session {session_id}", setting="max_session_bytes",
                                       limit=self.max_bytes, value=size)
        return size
