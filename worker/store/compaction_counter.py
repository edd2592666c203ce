"""The loop guard's counters: committed automatic compactions per session, in Redis.

``SessionKeys.compactions`` is a sorted set (job id → epoch seconds of the commit), so every
worker and client sees the same count; members are job ids, so counting a job twice (a
redelivery) counts it once. Entries older than the window are trimmed on every read and write,
and the key expires one window after the last commit.
"""

from __future__ import annotations

import logging
import math

import redis

from api_client.contract.keys import KeyLayout
from api_client.contract.redis_conn import REDIS_DOWN, STORAGE_FULL, unavailable
from api_client.contract.retention import retain_in
from api_client.contract.settings import DEFAULT_SESSION_TTL_S

__all__ = ["CompactionCounter"]

log = logging.getLogger("worker.store")


class CompactionCounter:
    def __init__(self, client: redis.Redis[str], layout: KeyLayout,
                 session_ttl_s: int = DEFAULT_SESSION_TTL_S) -> None:
        self.redis = client
        self.layout = layout
        self.session_ttl_s = session_ttl_s

    def recent(self, session_id: str, now: float, window_s: float) -> int:
        """Automatic compactions of the session committed within ``window_s`` before ``now``."""
        key = self.layout.session(session_id).compactions
        try:
            # No MULTI: a full Redis refuses every command inside one, and these two need no
            # memory (the count is read after the trim either way).
            with self.redis.pipeline(transaction=False) as pipe:
                pipe.zremrangebyscore(key, "-inf", f"({now - window_s}")
                pipe.zcard(key)
                _, count = pipe.execute()
        except REDIS_DOWN as err:
            raise unavailable(err) from err
        return int(count)

    def count(self, session_id: str, job_id: str, now: float, window_s: float) -> None:
        """Record the commit of ``job_id`` at ``now``."""
        key = self.layout.session(session_id).compactions
        try:
            with self.redis.pipeline(transaction=True) as pipe:
                pipe.zadd(key, {job_id: now})
                pipe.zremrangebyscore(key, "-inf", f"({now - window_s}")
                ttl_s = max(1, math.ceil(window_s))
                pipe.expire(key, ttl_s)
                retain_in(pipe, key, self.session_ttl_s, written=True, ttl_s=ttl_s)  # in the MULTI
                pipe.execute()
        except REDIS_DOWN as err:
            raise unavailable(err) from err
        except STORAGE_FULL as err:
            # After the commit: the job succeeded; a full Redis costs the guard one count.
            log.warning("session %s: compaction of job %s not counted: %s", session_id, job_id,
                        err)
