"""The worker's kombu Redis transport: the stock one, made to survive a lost connection.

On a broker connection error Celery's consumer closes the old connection, and kombu drops the
transport's reference to its connection (``transport.client = None``) *before* the channel has
given back its unacked messages. The channel then builds a Redis pool from ``transport.client``
and fails with ``AttributeError("'NoneType' object has no attribute 'hostname'")``, which is no
connection error: Celery reports "Unrecoverable error" and the worker exits with status 0 while
a job is still running (kombu 5.7, redis transport, any pool).

This transport keeps the connection parameters after the connection is released, so the channel
can still restore or ack its messages (or fail with a connection error Celery expects while Redis
is down). Messages and Redis keys are those of the stock transport.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis

__all__ = ["Transport"]


class Transport(kombu_redis.Transport):  # type: ignore[misc]
    @property  # type: ignore[override]
    def client(self) -> Any:
        return self._kept_client

    @client.setter
    def client(self, value: Any) -> None:
        # kombu sets None to break a reference cycle; channels still closing need the value,
        # and the garbage collector handles the cycle.
        if value is not None or not hasattr(self, "_kept_client"):
            self._kept_client = value
