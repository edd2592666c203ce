"""Job events on Redis Streams: a stream per session and a global one (docs/rules.md "Job events").

A stream entry has the fields ``type``, ``job`` and ``data`` (the :class:`JobEvent` JSON; an
event about an entry holds its id, and the reader puts the entry back:
:mod:`api_client.contract.job_events`).
Readers tail a stream (``XREAD``) or share it through a consumer group (``XREADGROUP`` +
``XACK``); both are plain (async) iterators that block in Redis, never poll. The reading logic
is written once (:class:`_ReaderCore`, as flows of Redis calls); the sync and asyncio readers
run them with the contract's drivers and hand out the events. Every writer builds its events
with :mod:`api_client.contract.job_events`.
"""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from typing import Any

import redis
import redis.asyncio

from api_client.contract.job_events import decode_event, fill_entries
from api_client.contract.keys import KeyLayout
from api_client.contract.redis_flows import AsyncShell, Command, Flow, SyncShell, cmd
from api_client.contract.wire import JobEvent

__all__ = ["AsyncEventReader", "EventReader"]


def default_consumer() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def _tolerate_busygroup(err: redis.ResponseError) -> None:
    if "BUSYGROUP" not in str(err):  # the group exists already: fine
        raise err


class _ReaderCore:
    """Tail a stream (XREAD) or read it through a consumer group (XREADGROUP + XACK) as flows:
    where to begin, the next events, what to do before handing one out; the readers run them."""

    def __init__(self, client: Any, layout: KeyLayout, *, session_id: str | None = None,
                 group: str | None = None, consumer: str | None = None, block_ms: int = 5000,
                 follow: bool = True, start: str | None = None, auto_ack: bool = True,
                 count: int = 100) -> None:
        self.stream = layout.session(session_id).events if session_id else layout.global_events
        self.layout = layout
        self.group = group
        self.consumer = consumer or default_consumer()
        self.block_ms = max(1, block_ms)
        self.follow = follow
        self.start = start
        self.auto_ack = auto_ack
        self.count = count
        self._unacked: str | None = None
        self._open(client)

    def _open(self, client: Any) -> None:
        raise NotImplementedError

    def _begin(self) -> Flow[str]:
        """The cursor to read from first (creating the group when there is one)."""
        if self.group:
            yield Command("xgroup_create", (self.stream, self.group),
                          {"id": self.start or "$", "mkstream": True}, _tolerate_busygroup)
            return "0"  # first our own pending (delivered, never acked) events, then new ones
        return self._initial_id((yield cmd("xrevrange", self.stream, count=1)))

    def _next(self, cursor: str) -> Flow[tuple[str, list[JobEvent]] | None]:
        """The next events and the cursor after them; None: the end (not following)."""
        while True:
            batch = self._decode((yield self._read(cursor)))
            if not batch:
                if self.group and cursor != ">":
                    cursor = ">"
                    continue
                if not self.follow:
                    return None
                continue
            if not self.group or cursor != ">":
                cursor = batch[-1].stream_id or cursor
            return cursor, (yield from fill_entries(self.layout, batch))

    def _hand(self, event: JobEvent) -> Flow[None]:
        """Before ``event`` is handed out: ack the one before it (it was processed when the
        caller asked for more); the last is acked when the caller asks again or closes."""
        yield from self._flush_ack()
        if self.group and self.auto_ack:
            self._unacked = event.stream_id

    def _read(self, cursor: str) -> Command:
        block = self.block_ms if self.follow else None
        if self.group is None:
            return cmd("xread", {self.stream: cursor}, count=self.count, block=block)
        return cmd("xreadgroup", self.group, self.consumer, {self.stream: cursor},
                   count=self.count, block=None if cursor != ">" else block)

    def _flush_ack(self) -> Flow[None]:
        if self._unacked is not None and self.group:
            yield cmd("xack", self.stream, self.group, self._unacked)
        self._unacked = None

    def _ack(self, event: JobEvent) -> Flow[None]:
        if self.group and event.stream_id:
            yield cmd("xack", self.stream, self.group, event.stream_id)

    def _initial_id(self, last: list[Any]) -> str:
        if self.start not in (None, "$"):
            return str(self.start)
        if self.start is None and not self.follow:
            return "0-0"
        return str(last[0][0]) if last else "0-0"

    @staticmethod
    def _decode(reply: Any) -> list[JobEvent]:
        if not reply:
            return []
        # A pending entry trimmed from the stream comes back without fields: nothing to decode.
        return [decode_event(sid, fields) for sid, fields in reply[0][1] if fields]


class EventReader(_ReaderCore):
    """Iterate over job events (sync) from ``client`` (a connection without read timeout).
    See :meth:`CompactionClient.events` for the options."""

    def _open(self, client: redis.Redis[str]) -> None:
        self.redis = client
        self._io = SyncShell(client)
        self._it = self._events()

    def __iter__(self) -> Iterator[JobEvent]:
        return self

    def __next__(self) -> JobEvent:
        return next(self._it)

    def ack(self, event: JobEvent) -> None:
        self._io.run(self._ack(event))

    def close(self) -> None:
        """Ack what was handed out last (group mode) and stop."""
        self._io.run(self._flush_ack())
        self._it.close()

    def _events(self) -> Generator[JobEvent, None, None]:
        run = self._io.run
        cursor = run(self._begin())
        while (read := run(self._next(cursor))) is not None:
            cursor, batch = read
            for event in batch:
                run(self._hand(event))
                yield event
        run(self._flush_ack())


class AsyncEventReader(_ReaderCore):
    """Iterate over job events with ``async for`` (same options as :class:`EventReader`)."""

    def _open(self, client: redis.asyncio.Redis[str]) -> None:
        self.redis = client
        self._io = AsyncShell(client)
        self._it = self._events()

    def __aiter__(self) -> AsyncIterator[JobEvent]:
        return self

    async def __anext__(self) -> JobEvent:
        return await self._it.__anext__()

    async def ack(self, event: JobEvent) -> None:
        await self._io.run(self._ack(event))

    async def aclose(self) -> None:
        await self._io.run(self._flush_ack())
        await self._it.aclose()

    async def _events(self) -> AsyncGenerator[JobEvent, None]:
        run = self._io.run
        cursor = await run(self._begin())
        while (read := await run(self._next(cursor))) is not None:
            cursor, batch = read
            for event in batch:
                await run(self._hand(event))
                yield event
        await run(self._flush_ack())
