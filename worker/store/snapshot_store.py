"""The worker's snapshot loads: the contract's load (one pipeline), with parsed entries kept
across loads (:class:`~worker.store.entry_cache.EntryCache`) when the composition root gives a
cache."""

from __future__ import annotations

import redis

from api_client.contract.keys import KeyLayout
from api_client.contract.redis_flows import SyncShell
from api_client.contract.snapshots import ParsedEntries, Snapshot, load_snapshot

__all__ = ["SnapshotStore"]


class SnapshotStore:
    """``load(session_id)`` for the service's ``Sessions`` port."""

    def __init__(self, client: redis.Redis[str], layout: KeyLayout,
                 entry_cache: ParsedEntries | None = None) -> None:
        self.layout = layout
        self._io = SyncShell(client)
        self._entry_cache = entry_cache

    def load(self, session_id: str) -> Snapshot:
        return self._io.run(load_snapshot(self.layout, session_id, self._entry_cache))
