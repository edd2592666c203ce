"""Queue depth read from the broker at scrape time (``compactor_queue_depth{queue}``).

Redis broker: kombu keeps one list per queue and priority step, ``<queue>`` for step 0 and
``<queue><sep><step>`` for the others (``compactor.compact``, ``compactor.compact:3``, ... with
the client's ``sep``), each behind the transport's ``global_keyprefix`` (``compactor:broker:``),
so a queue's depth is the sum of those lists' ``LLEN`` (one pipeline per scrape).
celery-exporter reads only the first list and misses prioritised messages.
RabbitMQ: a passive ``queue_declare`` per queue reports ``message_count``.
Every worker exports the same numbers: aggregate with ``max``, not ``sum``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import redis
from kombu.connection import Connection
from prometheus_client.core import GaugeMetricFamily

from api_client.contract.routing import BROKER_TRANSPORT_OPTIONS

__all__ = ["QueueDepthCollector", "redis_list_names"]

log = logging.getLogger("worker.metrics")

_REDIS = ("redis", "rediss")
_AMQP = ("amqp", "amqps", "pyamqp")


def redis_list_names(queue: str,
                     options: Mapping[str, Any] = BROKER_TRANSPORT_OPTIONS) -> list[str]:
    """The Redis lists kombu stores ``queue``'s messages in, one per priority step."""
    sep = options.get("sep", "\x06\x16")
    steps = options.get("priority_steps", [0, 3, 6, 9])
    prefix = options.get("global_keyprefix", "")
    return [f"{prefix}{queue}{sep}{step}" if step else prefix + queue for step in steps]


class QueueDepthCollector:
    """A prometheus_client collector: messages waiting per queue, and whether the broker
    answered (``compactor_broker_up``)."""

    def __init__(self, broker_url: str, queues: Sequence[str], *, timeout_s: float = 2.0,
                 prefix: str = "") -> None:
        self.broker_url = broker_url
        self.queues = tuple(queues)
        self.options = {**BROKER_TRANSPORT_OPTIONS, "global_keyprefix": prefix}
        self.timeout_s = timeout_s
        self.scheme = urlsplit(broker_url).scheme
        self._redis: redis.Redis[str] | None = None

    def read(self) -> dict[str, int]:
        """Messages waiting per queue; raises when the broker does not answer."""
        if self.scheme in _REDIS:
            return self._read_redis()
        if self.scheme in _AMQP:
            return self._read_amqp()
        return {}  # another transport: no depth (documented)

    def _read_redis(self) -> dict[str, int]:
        if self._redis is None:
            self._redis = redis.Redis.from_url(self.broker_url, socket_timeout=self.timeout_s,
                                               socket_connect_timeout=self.timeout_s,
                                               decode_responses=True)
        pipe = self._redis.pipeline(transaction=False)
        names = {queue: redis_list_names(queue, self.options) for queue in self.queues}
        for lists in names.values():
            for name in lists:
                pipe.llen(name)
        lengths = iter(pipe.execute())
        return {queue: sum(next(lengths) for _ in lists) for queue, lists in names.items()}

    def _read_amqp(self) -> dict[str, int]:
        depths: dict[str, int] = {}
        connection = Connection(self.broker_url, connect_timeout=self.timeout_s)  # type: ignore[no-untyped-call]
        with connection as conn:
            for queue in self.queues:
                channel = conn.channel()
                try:
                    depths[queue] = int(channel.queue_declare(queue, passive=True).message_count)
                except conn.channel_errors:  # not declared yet: nothing was ever sent to it
                    depths[queue] = 0
                finally:
                    channel.close()
        return depths

    def collect(self) -> Iterator[GaugeMetricFamily]:
        depth = GaugeMetricFamily("compactor_queue_depth", "Messages waiting in the broker queue",
                                  labels=["queue"])
        up = GaugeMetricFamily("compactor_broker_up",
                               "1 when the broker answered the last queue depth read")
        try:
            depths = self.read()
        except Exception as err:  # a scrape must still answer; the gauge says the broker did not
            log.warning("queue depth: broker did not answer: %s: %s", type(err).__name__, err)
            up.add_metric([], 0)
        else:
            up.add_metric([], 1)
            for queue, messages in depths.items():
                depth.add_metric([queue], messages)
        yield depth
        yield up
