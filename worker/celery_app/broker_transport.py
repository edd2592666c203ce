"""The worker's kombu Redis transport: the stock one, made to survive a lost connection and a
full Redis.

**A lost connection.** On a broker connection error Celery's consumer closes the old connection,
and kombu drops the transport's reference to its connection (``transport.client = None``)
*before* the channel has given back its unacked messages. The channel then builds a Redis pool
from ``transport.client`` and fails with ``AttributeError("'NoneType' object has no attribute
'hostname'")``, which is no connection error: Celery reports "Unrecoverable error" and the
worker exits with status 0 while a job is still running (kombu 5.7, redis transport, any pool).
This transport keeps the connection parameters after the connection is released, so the channel
can still restore or ack its messages (or fail with a connection error Celery expects while Redis
is down). The same holds for ``rediss://`` (TLS comes from ``broker_use_ssl``).

**A full Redis** (``maxmemory`` with ``noeviction``) refuses every command inside MULTI and every
write that needs memory. kombu takes a message with BRPOP (allowed: it frees memory), then
records it as unacked with ZADD + HSET in MULTI: refused, ``OutOfMemoryError`` is a channel
error, and the worker exited ("Unrecoverable error") with the popped message gone. Here:

* taking: a message whose unacked record is refused is *held* in the channel, not delivered; the
  channel takes no other message while it holds one, and every :data:`REQUEUE_S` the transport
  puts held messages back at the head of their list (RPUSH: the next BRPOP takes them), which
  succeeds as soon as memory is back. A worker that dies while holding one loses the message;
  the job's record is in the sweep's index, which sends it again (docs/recovery.md);
* acking and rejecting: ZREM + HDEL without MULTI (they need no memory, so Redis takes them);
* the restore sweep (a mutex SET) and the shutdown restore skip a round instead of raising;
* starting (or reconnecting): queue sizes and existence are read, and mingle's reply queue
  deleted, without MULTI, and a binding Redis refuses to store is left as it is (the queues'
  bindings exist from earlier starts; the client pushes to the lists without them), so a worker
  also starts against a full Redis.

Messages and Redis keys are those of the stock transport.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from kombu.utils.json import dumps

from api_client.contract.redis_conn import STORAGE_FULL

__all__ = ["REQUEUE_S", "Transport"]

log = logging.getLogger("worker.broker")

# How often held messages are offered back to their lists (while Redis is full, one refused
# RPUSH per held message each time).
REQUEUE_S = 0.5


class MessageHeld(Exception):
    """Raised past kombu's delivery callback: the message was held, not delivered."""


class QoS(kombu_redis.QoS):  # type: ignore[misc]
    def append(self, message: Any, delivery_tag: str) -> None:
        try:
            super().append(message, delivery_tag)  # type: ignore[no-untyped-call]
        except STORAGE_FULL as err:
            self.channel.hold(message, err)
            raise MessageHeld(delivery_tag) from err

    def can_consume(self) -> bool:
        # Nothing new while a message waits to go back: it would be held too.
        free: bool = super().can_consume()  # type: ignore[no-untyped-call]
        return free and not self.channel.held

    def ack(self, delivery_tag: str) -> None:
        self._forget(delivery_tag)
        virtual.QoS.ack(self, delivery_tag)  # type: ignore[no-untyped-call]

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        if requeue:
            try:
                self.restore_by_tag(delivery_tag, leftmost=True)  # type: ignore[no-untyped-call]
            except STORAGE_FULL as err:  # stays unacked: restored after the visibility timeout
                log.warning("message %s not requeued (Redis full: %s)", delivery_tag, err)
        else:
            self._forget(delivery_tag)
        virtual.QoS.ack(self, delivery_tag)  # type: ignore[no-untyped-call]

    def _forget(self, delivery_tag: str) -> None:
        # Stock kombu sends these in MULTI, which a full Redis refuses as a whole; alone they
        # free memory and are taken. Without MULTI another client may run between the two,
        # which only ever sees an index entry without its message: the restore sweep drops it.
        with self.channel.conn_or_acquire() as client:
            pipe = client.pipeline(transaction=False)
            pipe.zrem(self.unacked_index_key, delivery_tag)
            pipe.hdel(self.unacked_key, delivery_tag)
            pipe.execute()

    def restore_visible(self, *args: Any, **kwargs: Any) -> None:
        try:
            super().restore_visible(*args, **kwargs)  # type: ignore[no-untyped-call]
        except STORAGE_FULL as err:  # its mutex is a SET: the next round looks again
            log.debug("restore of visible messages skipped: %s", err)

    def restore_unacked(self, client: Any = None) -> None:
        try:
            super().restore_unacked(client)  # type: ignore[no-untyped-call]
        except STORAGE_FULL as err:
            log.warning("unacked messages not restored at shutdown (Redis full: %s); they come "
                        "back after the visibility timeout", err)


class Channel(kombu_redis.Channel):  # type: ignore[misc]
    QoS = QoS

    @property
    def held(self) -> list[tuple[dict[str, Any], str, str]]:
        """Messages taken but not recorded as unacked: (payload, exchange, routing key)."""
        held: list[tuple[dict[str, Any], str, str]] = self.__dict__.setdefault("_held", [])
        return held

    def hold(self, message: Any, err: BaseException) -> None:
        info = message.delivery_info
        # kombu internal: the payload as it came off the list is only the message's ``_raw``,
        # which kombu's QoS records as unacked the same way (and its restore puts back).
        self.held.append((message._raw, info["exchange"], info["routing_key"]))
        log.warning("Redis is full (%s): holding message %s until memory is back",
                    err, message.delivery_tag)

    def requeue_held(self) -> None:
        """Put held messages back at the head of their lists (what BRPOP takes next)."""
        while self.held:
            payload, exchange, routing_key = self.held[0]
            priority = self._get_message_priority(  # type: ignore[no-untyped-call]
                payload, reverse=False)
            try:
                # The binding tables say which list(s) (one: each queue has its own key).
                queues = self._lookup(exchange, routing_key)  # type: ignore[no-untyped-call]
                with self.conn_or_acquire() as client:
                    for queue in queues:
                        key = self._q_for_pri(queue, priority)  # type: ignore[no-untyped-call]
                        client.rpush(key, dumps(payload))  # type: ignore[no-untyped-call]
            except (*STORAGE_FULL, *self.connection_errors) as err:
                log.debug("held message not requeued yet: %s", err)
                return
            self.held.pop(0)
            log.warning("held message %s is back in its queue",
                        payload.get("properties", {}).get("delivery_tag"))

    def close(self) -> None:
        self.requeue_held()
        for payload, _, _ in self.held:
            log.error("message %s lost with the channel (Redis still full); the sweep sends "
                      "its job again", payload.get("properties", {}).get("delivery_tag"))
        self.held.clear()
        super().close()  # type: ignore[no-untyped-call]

    def maybe_refresh_binding_expiry(self) -> None:
        try:
            super().maybe_refresh_binding_expiry()  # type: ignore[no-untyped-call]
        except STORAGE_FULL as err:  # kombu logs a traceback every second: the next round
            log.debug("binding expiry not refreshed (Redis full: %s)", err)

    def _size(self, queue: str) -> int:
        with self.conn_or_acquire() as client:
            pipe = client.pipeline(transaction=False)  # MULTI is refused when Redis is full
            for priority in self.priority_steps:
                pipe.llen(self._q_for_pri(queue, priority))  # type: ignore[no-untyped-call]
            return sum(size for size in pipe.execute() if isinstance(size, int))

    def _has_queue(self, queue: str, **kwargs: Any) -> bool:
        with self.conn_or_acquire() as client:
            pipe = client.pipeline(transaction=False)
            for priority in self.priority_steps:
                pipe.exists(self._q_for_pri(queue, priority))  # type: ignore[no-untyped-call]
            return any(pipe.execute())

    def _delete(self, queue: str, exchange: str, routing_key: str, pattern: str, *args: Any,
                **kwargs: Any) -> None:
        # Mingle deletes its reply queue at start: DELs in MULTI, refused when Redis is full.
        self.auto_delete_queues.discard(queue)
        member = self.sep.join([routing_key or "", pattern or "", queue or ""])
        with self.conn_or_acquire(client=kwargs.get("client")) as client:
            pipe = client.pipeline(transaction=False)
            pipe.srem(self.keyprefix_queue % (exchange,), member)
            pipe.srem(self.keyprefix_binding_permanent % (exchange,), member)
            for priority in self.priority_steps:
                pipe.delete(self._q_for_pri(queue, priority))  # type: ignore[no-untyped-call]
            pipe.execute()

    def _purge(self, queue: str) -> int:
        with self.conn_or_acquire() as client:
            pipe = client.pipeline(transaction=False)
            for priority in self.priority_steps:
                name = self._q_for_pri(queue, priority)  # type: ignore[no-untyped-call]
                pipe.llen(name)
                pipe.delete(name)
            return sum(pipe.execute()[::2])

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        bind = super()._queue_bind
        try:
            bind(exchange, routing_key, pattern, queue)  # type: ignore[no-untyped-call]
        except STORAGE_FULL as err:
            log.warning("binding of queue %s not stored (Redis full: %s); using the one an "
                        "earlier start stored", queue, err)


class Transport(kombu_redis.Transport):  # type: ignore[misc]
    Channel = Channel

    @property  # type: ignore[override]
    def client(self) -> Any:
        return self._kept_client

    @client.setter
    def client(self, value: Any) -> None:
        # kombu sets None to break a reference cycle; channels still closing need the value,
        # and the garbage collector handles the cycle.
        if value is not None or not hasattr(self, "_kept_client"):
            self._kept_client = value

    def _deliver(self, message: Any, queue: str) -> None:
        # MessageHeld: the channel holds it (QoS.append) and requeues it when it can.
        with contextlib.suppress(MessageHeld):
            super()._deliver(message, queue)  # type: ignore[no-untyped-call]

    def register_with_event_loop(self, connection: Any, loop: Any) -> None:
        super().register_with_event_loop(connection, loop)  # type: ignore[no-untyped-call]
        old = getattr(self, "_requeue_tref", None)
        if old is not None:  # a reconnect: one timer, not one per connection
            old.cancel()
        self._requeue_tref = loop.call_repeatedly(REQUEUE_S, self._requeue_held)

    def _requeue_held(self) -> None:
        # The Redis transport's cycle is its MultiChannelPoller (kombu types it FairCycle).
        for channel in list(getattr(self.cycle, "_channels", ())):
            if isinstance(channel, Channel) and channel.held:
                channel.requeue_held()
