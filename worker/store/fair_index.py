"""The worker's end of the fair order's index (``api_client/contract/lua/_place.lua``): a started
job leaves it, and the sweep asks it whether a queued job's message still waits in its list.

The index lives beside the broker's queue lists: in the sessions' Redis when that is the
broker, else in the broker's own Redis (:func:`fair_index_redis`); with RabbitMQ there is none.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import redis

from api_client.contract.keys import KeyLayout
from api_client.contract.redis_conn import same_redis
from api_client.contract.routing import queue_list
from api_client.contract.settings import REDIS_SCHEMES, ClientSettings
from worker.store.leases import guarded

__all__ = ["FairIndex", "fair_index_redis"]


def fair_index_redis(settings: ClientSettings,
                     sessions: redis.Redis[str]) -> redis.Redis[str] | None:
    """The Redis of the broker's lists: ``sessions`` when it is the broker, a client of the
    broker's Redis when that is another one, None for RabbitMQ."""
    broker = settings.resolved_broker_url
    if same_redis(settings.redis_url, broker):
        return sessions
    if urlsplit(broker).scheme in REDIS_SCHEMES:
        return redis.Redis.from_url(broker, decode_responses=True, socket_connect_timeout=2.0,
                                    socket_timeout=10.0)
    return None


class FairIndex:
    def __init__(self, client: redis.Redis[str] | None, layout: KeyLayout) -> None:
        self.redis = client
        self.layout = layout

    def drop(self, job_id: str, queue: str, priority: int) -> None:
        """The job started: it names no pivot any more."""
        if self.redis is None:
            return
        tags, messages = self.layout.fair_index(queue, priority)
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrem(tags, job_id)
        pipe.hdel(messages, job_id)
        guarded(job_id, pipe.execute)

    def waiting(self, job_id: str, queue: str, priority: int) -> bool:
        """Whether the job's task message still waits in its queue list (the index names it,
        and the list holds it): a long queue, not a lost message."""
        if self.redis is None:
            return False
        client = self.redis
        messages = self.layout.fair_index(queue, priority)[1]
        message = guarded(job_id, lambda: client.hget(messages, job_id))
        if message is None:
            return False
        listed = queue_list(queue, priority, self.layout.broker)
        return guarded(job_id, lambda: client.lpos(listed, message)) is not None
