"""The worker's progress events: XADD to the session's stream and to the global one, built by
``api_client.contract.job_events.event_writes`` (the one Python writer of events).

Completion events are not published here: ``finish`` writes each atomically with the job's
terminal state (api_client's finish.lua) and then copies it to the global stream. A full Redis
(``maxmemory``) refuses a progress event: it is dropped with a warning, never failing the job
(the completion event carries the outcome).
"""

from __future__ import annotations

import logging

import redis

from api_client.contract.job_events import queue_event
from api_client.contract.keys import ANY_TENANT, KeyLayout
from api_client.contract.redis_conn import REDIS_DOWN, STORAGE_FULL, unavailable
from api_client.contract.settings import ClientSettings
from api_client.contract.wire import JobEvent

__all__ = ["EventPublisher"]

log = logging.getLogger("worker.store")


class EventPublisher:
    """Publishes non-terminal events (start, session_compact, branch_summary, stale)."""

    def __init__(self, client: redis.Redis[str], settings: ClientSettings,
                 layout: KeyLayout | None = None) -> None:
        self.redis = client
        self.settings = settings
        self.layout = layout or KeyLayout(settings.key_prefix, ANY_TENANT)

    def publish(self, event: JobEvent, *, ttl_set: bool = False) -> str:
        """XADD to the session's stream and the global one (``queue_event``: the writes every
        Python writer of an event sends); returns the session stream id ('' when Redis was
        full and refused it). ``ttl_set``: an earlier event of this delivery gave the stream
        its TTL (and refreshed the session's retention): XADD keeps it, and the job's end sets
        it again, so only the two XADDs go."""
        pipe = self.redis.pipeline(transaction=False)
        queue_event(pipe, self.layout, self.settings, event, lifetime=not ttl_set)
        try:
            session_id, *_ = pipe.execute()
        except REDIS_DOWN as err:
            raise unavailable(err) from err
        except STORAGE_FULL as err:
            log.warning("job %s: %s event dropped: %s", event.job_id, event.type, err)
            return ""
        return str(session_id)
