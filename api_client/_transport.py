"""The kombu Redis transport with one reused publishing client per channel.

kombu builds a new ``redis.Redis`` object for every publish; with redis-py 8 that object's
construction (its response-callback table) costs more CPU than the rest of the publish. The
client is only a handle on the channel's connection pool, so one per pool serves every publish
(redis-py clients are thread-safe). Used by the client's Celery producer for ``redis://`` brokers;
messages and their Redis keys are exactly those of the stock transport.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis

__all__ = ["Transport"]


class Channel(kombu_redis.Channel):  # type: ignore[misc]
    _publish_client: Any = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:
            return super()._create_client(asynchronous=True)  # type: ignore[no-untyped-call]
        client = self._publish_client
        if client is None or client.connection_pool is not self.pool:
            client = self._publish_client = super()._create_client()  # type: ignore[no-untyped-call]
        return client


class Transport(kombu_redis.Transport):  # type: ignore[misc]
    Channel = Channel
