"""Job events on Redis Streams: a stream per session and a global one (ARCHITECTURE "Events").

A stream entry has the fields ``type``, ``job`` and ``data`` (the :class:`JobEvent` JSON).
Readers tail a stream (``XREAD``) or share it through a consumer group (``XREADGROUP`` +
``XACK``); both are plain (async) iterators that block in Redis, never poll.
"""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import redis
import redis.asyncio

from api_client.keys import KeyLayout
from api_client.redis_conn import REDIS_DOWN, unavailable
from api_client.wire import JobEvent

if TYPE_CHECKING:
    from api_client.settings import ClientSettings

__all__ = ["AsyncEventReader", "EventPublisher", "EventReader", "decode_event", "event_fields"]


def event_fields(event: JobEvent) -> dict[str, str]:
    return {"type": event.type.value, "job": event.job_id, "data": event.to_json()}


def decode_event(stream_id: str, fields: Mapping[str, str]) -> JobEvent:
    event = JobEvent.model_validate_json(fields["data"])
    return event.model_copy(update={"stream_id": stream_id})


class EventPublisher:
    """Publishes non-terminal events (start, session_compact, stale, ...) to both streams.

    Completion events go through :meth:`JobStore.finish`, which writes them atomically with the
    job's terminal state.
    """

    def __init__(self, client: redis.Redis[str], settings: ClientSettings,
                 layout: KeyLayout | None = None) -> None:
        self.redis = client
        self.settings = settings
        self.layout = layout or KeyLayout(settings.key_prefix)

    def publish(self, event: JobEvent) -> str:
        """XADD to the session's stream and the global one; returns the session stream id."""
        fields = event_fields(event)
        pipe = self.redis.pipeline(transaction=False)
        pipe.xadd(self.layout.session(event.session_id).events, fields,  # type: ignore[arg-type]
                  maxlen=self.settings.session_event_maxlen, approximate=True)
        pipe.xadd(self.layout.global_events, fields,  # type: ignore[arg-type]
                  maxlen=self.settings.event_stream_maxlen, approximate=True)
        try:
            session_id, _ = pipe.execute()
        except REDIS_DOWN as err:
            raise unavailable(err) from err
        return str(session_id)

    def publish_global(self, fields: Mapping[str, str]) -> str:
        try:
            return str(self.redis.xadd(self.layout.global_events, dict(fields),  # type: ignore[arg-type]
                                       maxlen=self.settings.event_stream_maxlen, approximate=True))
        except REDIS_DOWN as err:
            raise unavailable(err) from err


def default_consumer() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class _ReaderBase:
    def __init__(self, layout: KeyLayout, *, session_id: str | None, group: str | None,
                 consumer: str | None, block_ms: int, follow: bool, start: str | None,
                 auto_ack: bool, count: int) -> None:
        self.stream = layout.session(session_id).events if session_id else layout.global_events
        self.group = group
        self.consumer = consumer or default_consumer()
        self.block_ms = max(1, block_ms)
        self.follow = follow
        self.start = start
        self.auto_ack = auto_ack
        self.count = count
        self._unacked: str | None = None

    def _initial_id(self, last: list[Any]) -> str:
        if self.start not in (None, "$"):
            return str(self.start)
        if self.start is None and not self.follow:
            return "0-0"
        return str(last[0][0]) if last else "0-0"

    def _block(self) -> int | None:
        return self.block_ms if self.follow else None

    @staticmethod
    def _decode(reply: Any) -> list[JobEvent]:
        if not reply:
            return []
        # A pending entry trimmed from the stream comes back without fields: nothing to decode.
        return [decode_event(sid, fields) for sid, fields in reply[0][1] if fields]


class EventReader(_ReaderBase):
    """Iterate over job events (sync). See :meth:`CompactionClient.events` for the options."""

    def __init__(self, client: redis.Redis[str], layout: KeyLayout, *,
                 session_id: str | None = None, group: str | None = None,
                 consumer: str | None = None, block_ms: int = 5000, follow: bool = True,
                 start: str | None = None, auto_ack: bool = True, count: int = 100) -> None:
        super().__init__(layout, session_id=session_id, group=group, consumer=consumer,
                         block_ms=block_ms, follow=follow, start=start, auto_ack=auto_ack,
                         count=count)
        self.redis = client
        self._it = self._events()

    def __iter__(self) -> Iterator[JobEvent]:
        return self

    def __next__(self) -> JobEvent:
        return next(self._it)

    def ack(self, event: JobEvent) -> None:
        if self.group and event.stream_id:
            self._call(self.redis.xack, self.stream, self.group, event.stream_id)

    def close(self) -> None:
        """Ack what was handed out last (group mode) and stop."""
        self._flush_ack()
        self._it.close()

    def _flush_ack(self) -> None:
        if self._unacked is not None and self.group:
            self._call(self.redis.xack, self.stream, self.group, self._unacked)
        self._unacked = None

    def _events(self) -> Generator[JobEvent, None, None]:
        read = self._group_batches() if self.group else self._tail_batches()
        for batch in read:
            for event in batch:
                self._flush_ack()
                if self.group and self.auto_ack:
                    self._unacked = event.stream_id
                yield event
        self._flush_ack()  # the last event was processed when the caller asks for more

    def _tail_batches(self) -> Iterator[list[JobEvent]]:
        last = self._call(self.redis.xrevrange, self.stream, count=1)
        cursor = self._initial_id(last)
        while True:
            reply = self._call(self.redis.xread, {self.stream: cursor}, count=self.count,
                               block=self._block())
            batch = self._decode(reply)
            if not batch:
                if not self.follow:
                    return
                continue
            cursor = batch[-1].stream_id or cursor
            yield batch

    def _group_batches(self) -> Iterator[list[JobEvent]]:
        assert self.group is not None
        try:
            self._call(self.redis.xgroup_create, self.stream, self.group,
                       id=self.start or "$", mkstream=True)
        except redis.ResponseError as err:
            if "BUSYGROUP" not in str(err):
                raise
        cursor = "0"  # first our own pending (delivered, never acked) events, then new ones
        while True:
            reply = self._call(self.redis.xreadgroup, self.group, self.consumer,
                               {self.stream: cursor}, count=self.count,
                               block=None if cursor != ">" else self._block())
            batch = self._decode(reply)
            if not batch:
                if cursor != ">":
                    cursor = ">"
                    continue
                if not self.follow:
                    return
                continue
            if cursor != ">":
                cursor = batch[-1].stream_id or cursor
            yield batch

    @staticmethod
    def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except REDIS_DOWN as err:
            raise unavailable(err) from err


class AsyncEventReader(_ReaderBase):
    """Iterate over job events with ``async for`` (same options as :class:`EventReader`)."""

    def __init__(self, client: redis.asyncio.Redis[str], layout: KeyLayout, *,
                 session_id: str | None = None, group: str | None = None,
                 consumer: str | None = None, block_ms: int = 5000, follow: bool = True,
                 start: str | None = None, auto_ack: bool = True, count: int = 100) -> None:
        super().__init__(layout, session_id=session_id, group=group, consumer=consumer,
                         block_ms=block_ms, follow=follow, start=start, auto_ack=auto_ack,
                         count=count)
        self.redis = client
        self._it = self._events()

    def __aiter__(self) -> AsyncIterator[JobEvent]:
        return self

    async def __anext__(self) -> JobEvent:
        return await self._it.__anext__()

    async def ack(self, event: JobEvent) -> None:
        if self.group and event.stream_id:
            await self._call(self.redis.xack, self.stream, self.group, event.stream_id)

    async def aclose(self) -> None:
        await self._flush_ack()
        await self._it.aclose()

    async def _flush_ack(self) -> None:
        if self._unacked is not None and self.group:
            await self._call(self.redis.xack, self.stream, self.group, self._unacked)
        self._unacked = None

    async def _events(self) -> AsyncGenerator[JobEvent, None]:
        batches = self._group_batches() if self.group else self._tail_batches()
        async for batch in batches:
            for event in batch:
                await self._flush_ack()
                if self.group and self.auto_ack:
                    self._unacked = event.stream_id
                yield event
        await self._flush_ack()

    async def _tail_batches(self) -> AsyncIterator[list[JobEvent]]:
        last = await self._call(self.redis.xrevrange, self.stream, count=1)
        cursor = self._initial_id(last)
        while True:
            reply = await self._call(self.redis.xread, {self.stream: cursor}, count=self.count,
                                     block=self._block())
            batch = self._decode(reply)
            if not batch:
                if not self.follow:
                    return
                continue
            cursor = batch[-1].stream_id or cursor
            yield batch

    async def _group_batches(self) -> AsyncIterator[list[JobEvent]]:
        assert self.group is not None
        try:
            await self._call(self.redis.xgroup_create, self.stream, self.group,
                             id=self.start or "$", mkstream=True)
        except redis.ResponseError as err:
            if "BUSYGROUP" not in str(err):
                raise
        cursor = "0"
        while True:
            reply = await self._call(self.redis.xreadgroup, self.group, self.consumer,
                                     {self.stream: cursor}, count=self.count,
                                     block=None if cursor != ">" else self._block())
            batch = self._decode(reply)
            if not batch:
                if cursor != ">":
                    cursor = ">"
                    continue
                if not self.follow:
                    return
                continue
            if cursor != ">":
                cursor = batch[-1].stream_id or cursor
            yield batch

    @staticmethod
    async def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        except REDIS_DOWN as err:
            raise unavailable(err) from err
