"""The asyncio client: :class:`CompactionClient`'s operations, awaited, on the same flows
(:class:`~api_client._client._ClientCore`); the Celery publish (RabbitMQ) runs in a thread."""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio

from api_client import _instant
from api_client._calls import AsyncShell
from api_client._client import _ClientCore, broker_down, stream_start
from api_client._handle import AsyncJobHandle
from api_client.errors import BrokerUnavailableError
from api_client.events import AsyncEventReader
from api_client.jobs import AsyncJobStore, EnqueueResult
from api_client.redis_conn import make_async_redis
from api_client.session.context import LlmContext
from api_client.session_store import AsyncSessionStore
from api_client.settings import ClientSettings, load_settings
from api_client.wire import CompactReason, JobKind

__all__ = ["AsyncCompactionClient"]


class AsyncCompactionClient(_ClientCore):
    """:class:`CompactionClient` for asyncio: the same operations, awaited (the Celery publish
    runs in a thread)."""

    def __init__(self, redis_url_or_settings: str | ClientSettings | None = None) -> None:
        super().__init__(redis_url_or_settings)
        self.redis = make_async_redis(self.settings)
        self.sessions = AsyncSessionStore(self.redis, self.layout)
        self.jobs = AsyncJobStore(self.redis, self.settings, self.layout)
        self._blocking: redis.asyncio.Redis[str] | None = None
        self.io = AsyncShell(self.redis, self.blocking_redis)
        self._broker: redis.asyncio.Redis[str] | None = None
        self.broker_io = self.io
        if self.broker_mode == "redis":
            self._broker = make_async_redis(self.settings, url=self.settings.resolved_broker_url)
            self.broker_io = AsyncShell(self._broker)
        self._prepare(self.io)

    @classmethod
    def from_env(cls, **overrides: Any) -> AsyncCompactionClient:
        return cls(load_settings(**overrides))

    async def __aenter__(self) -> AsyncCompactionClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def compact(self, session_id: str, reason: CompactReason | str = "manual",
                      instructions: str | None = None, *,
                      context_window: int | None = None) -> AsyncJobHandle:
        request = self._request(JobKind.COMPACT, reason, instructions,
                                context_window=context_window)
        handle, enqueued, discarded = await _instant.from_draft_async(self, session_id, request)
        if handle is not None:
            return handle
        return await self._enqueue(session_id, request, discarded, enqueued)

    async def observe(self, session_id: str, *, context_tokens: int,
                      context_window: int) -> _instant.ObserveResult:
        return await _instant.observe_async(self, session_id, context_tokens=context_tokens,
                                            context_window=context_window)

    async def prune(self, session_id: str) -> AsyncJobHandle:
        return await self._enqueue(session_id, self._request(JobKind.PRUNE))

    async def branch_summary(self, session_id: str, target_id: str,
                             instructions: str | None = None) -> AsyncJobHandle:
        request = self._request(JobKind.BRANCH_SUMMARY, None, instructions, target_id)
        return await self._enqueue(session_id, request)

    async def job(self, job_id: str) -> AsyncJobHandle:
        record = await self.jobs.get(job_id)
        return AsyncJobHandle(self, record.id, record.session_id, record.kind)

    async def context(self, session_id: str) -> LlmContext:
        """As :meth:`CompactionClient.context`."""
        return await self.io.run(self._context(self.sessions, session_id))

    def events(self, session_id: str | None = None, *, since: str | None = None,
               follow: bool = True, group: str | None = None, consumer: str | None = None,
               block_ms: int = 5000, start: str | None = None,
               auto_ack: bool = True) -> AsyncEventReader:
        """``async for event in client.events(...)``; options as :meth:`CompactionClient.events`."""
        return AsyncEventReader(self.blocking_redis(), self.layout, session_id=session_id,
                                group=group, consumer=consumer, block_ms=block_ms,
                                follow=follow, start=stream_start(since, start),
                                auto_ack=auto_ack)

    async def ping(self) -> bool:
        return await self.io.run(self._ping())

    async def warm(self) -> None:
        """As :meth:`CompactionClient.warm`."""
        await self.io.run(self._warm())
        if self.broker_mode == "kombu":
            self.producer.app()

    def blocking_redis(self) -> redis.asyncio.Redis[str]:
        if self._blocking is None:
            self._blocking = make_async_redis(self.settings, blocking=True)
        return self._blocking

    async def aclose(self) -> None:
        self.producer.close()
        await self.redis.aclose()  # type: ignore[attr-defined]
        if self._broker is not None:
            await self._broker.aclose()  # type: ignore[attr-defined]
        if self._blocking is not None:
            await self._blocking.aclose()  # type: ignore[attr-defined]

    async def _enqueue(self, session_id: str, request: dict[str, Any],
                       discarded: str | None = None,
                       result: EnqueueResult | None = None) -> AsyncJobHandle:
        if result is None:
            result = await self.jobs.enqueue(session_id, **request,
                                             broker_db=self._inline_db())
        if discarded:
            await self.io.run(self._discarded(session_id, request, result, discarded))
        if result.must_send:
            try:
                await self._send(result)
            except BrokerUnavailableError as err:
                await self.io.run(self._unsent(self.jobs, result, err))
        return AsyncJobHandle(self, result.job_id, session_id, request["kind"],
                              coalesced=result.coalesced, upgraded=result.upgraded,
                              since=result.since)

    async def _send(self, result: EnqueueResult) -> None:
        if self.broker_mode == "kombu":  # kombu's publish is blocking: off the event loop
            await asyncio.to_thread(self.producer.send, result.job_id, result.route,
                                    resend=result.upgraded)
            return
        try:
            await self.broker_io.run(self._push_flow(result))
        except BrokerUnavailableError as err:
            raise broker_down(err) from err
