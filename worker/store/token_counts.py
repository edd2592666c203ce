"""A session's token counts in Redis, so a worker new to the session need not tokenize it.

A cold job (a session this process has not seen: ``worker.service._compact_job._prime``) tokenizes
the whole session, a real cost for the reference agent's large sessions. With a fleet of workers
most jobs of a session land on a process that has not seen it. The counts are a pure function
of the text (cl100k), so the first worker to count a session writes them here, keyed by the
same digest as the process cache (``worker.tokens.cache.content_key``), and the next cold worker
loads them before priming (in bounded pages): it then tokenizes only what is new.

``<p>:session:{<sid>}:tokens``: a hash, hex digest → count, in the session's Cluster slot,
deleted with the session, expiring ``ttl_s`` (:data:`TTL_S`) after the last cold job wrote to
it. A cache: a failed read or write is logged and the job goes on counting for itself.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import redis

from api_client.contract.keys import KeyLayout
from api_client.contract.retention import retain_in
from api_client.contract.settings import DEFAULT_SESSION_TTL_S

__all__ = ["TTL_S", "RedisTokenCounts"]

log = logging.getLogger(__name__)

# A week: long enough for the next cold worker of a session in use, each cold job refreshing it.
TTL_S = 7 * 86_400
_BATCH = 500  # fields per HSET / HSCAN page: each command short (a 20k-entry session: 30k counts)


class RedisTokenCounts:
    def __init__(self, client: redis.Redis[str], layout: KeyLayout, ttl_s: int = TTL_S,
                 session_ttl_s: int = DEFAULT_SESSION_TTL_S) -> None:
        self.redis = client
        self.layout = layout
        self.ttl_s = ttl_s
        self.session_ttl_s = session_ttl_s

    def load(self, session_id: str) -> list[tuple[bytes, int]]:
        """The stored counts (digest, count); none when off, absent or unreadable."""
        if self.ttl_s <= 0:
            return []
        key = self.layout.session(session_id).token_counts
        try:
            # In pages (HSCAN): a never-compacted 20 000-entry session stores ~30 000 counts, and
            # one HGETALL of them held Redis too long (issue 34: no command of a session is long).
            stored = dict(self.redis.hscan_iter(key, count=_BATCH))
        except redis.RedisError as err:
            log.warning("session %s: token counts not loaded: %s", session_id, err)
            return []
        counts: list[tuple[bytes, int]] = []
        for key, value in stored.items():
            try:
                digest = bytes.fromhex(key)
                counted = int(value)
            except ValueError:  # not ours: skipped, the job counts that text itself
                continue
            if len(digest) == 16 and counted >= 0:
                counts.append((digest, counted))
        return counts

    def save(self, session_id: str, counts: Iterable[tuple[bytes, int]]) -> int:
        """Add ``counts`` (and refresh the expiry); returns how many were sent."""
        fields = {digest.hex(): str(counted) for digest, counted in counts}
        if self.ttl_s <= 0 or not fields:
            return 0
        key = self.layout.session(session_id).token_counts
        items = list(fields.items())
        try:
            pipe = self.redis.pipeline(transaction=False)
            for start in range(0, len(items), _BATCH):
                pipe.hset(key, mapping=dict(items[start:start + _BATCH]))
            pipe.expire(key, self.ttl_s)
            # A write of the session: its keys' retention is refreshed with it (and the counts
            # never outlive the session: retain() caps their TTL at the retention).
            retain_in(pipe, key, self.session_ttl_s, written=True, ttl_s=self.ttl_s)
            pipe.execute()
        except redis.RedisError as err:
            log.warning("session %s: token counts not saved: %s", session_id, err)
            return 0
        return len(items)
