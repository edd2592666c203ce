"""The asyncio client: :class:`~api_client.client.sync_client.CompactionClient`'s operations,
awaited, on the same flows (:class:`~api_client.client.orchestration.Orchestration`) and an
:class:`~api_client.client.transport.AsyncTransport` (the kombu publish runs in a thread)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis.asyncio

from api_client.client.event_readers import AsyncEventReader
from api_client.client.handles import AsyncJobHandle, ObserveResult
from api_client.client.jobs import AsyncJobStore, check_agent
from api_client.client.orchestration import JobRef, Orchestration, Request
from api_client.client.sessions import AsyncSessionStore
from api_client.client.summaries import SummaryInput
from api_client.client.sync_client import _settings
from api_client.client.transport import AsyncTransport
from api_client.contract.agent_settings import AgentSettings
from api_client.contract.job_enums import CompactReason, JobKind
from api_client.contract.job_records import stream_start
from api_client.contract.session.context import LlmContext
from api_client.contract.settings import ClientSettings, load_settings
from api_client.contract.usage import DayUsage

__all__ = ["AsyncCompactionClient"]


class AsyncCompactionClient:
    """:class:`CompactionClient` for asyncio: the same operations, awaited."""

    def __init__(self, redis_url_or_settings: str | ClientSettings | None = None, *,
                 tenant: str | None = None) -> None:
        self.settings = _settings(redis_url_or_settings, tenant)
        self.transport = AsyncTransport(self.settings)
        self.layout = self.transport.layout
        self.redis = self.transport.redis
        self.sessions = AsyncSessionStore(self.redis, self.layout, self.settings)
        self.jobs = AsyncJobStore(self.redis, self.settings, self.layout)
        self.flows = Orchestration(self.settings, self.layout, self.transport.broker)

    @classmethod
    def from_env(cls, **overrides: Any) -> AsyncCompactionClient:
        return cls(load_settings(**overrides))

    async def __aenter__(self) -> AsyncCompactionClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def compact(self, session_id: str, reason: CompactReason | str = "manual",
                      instructions: str | None = None, *, context_window: int | None = None,
                      agent: AgentSettings | Mapping[str, Any] | None = None) -> AsyncJobHandle:
        """As :meth:`CompactionClient.compact`."""
        request = Request(JobKind.COMPACT, reason, instructions, context_window=context_window,
                          agent=check_agent(agent))
        return self._handle(await self.transport.run(self.flows.compact(session_id, request)))

    async def observe(self, session_id: str, *, context_tokens: int, context_window: int,
                      agent: AgentSettings | Mapping[str, Any] | None = None) -> ObserveResult:
        plan = await self.transport.run(
            self.flows.observe(session_id, context_tokens, context_window, check_agent(agent)))
        handle = None if plan.job is None else self._handle(plan.job)
        return ObserveResult(plan.action, handle, bool(handle and handle.from_draft),
                             plan.draft_ready)

    async def prune(self, session_id: str) -> AsyncJobHandle:
        return self._handle(await self.transport.run(
            self.flows.enqueue(session_id, Request(JobKind.PRUNE))))

    async def branch_summary(self, session_id: str, target_id: str,
                             instructions: str | None = None, *,
                             agent: AgentSettings | Mapping[str, Any] | None = None
                             ) -> AsyncJobHandle:
        request = Request(JobKind.BRANCH_SUMMARY, None, instructions, target_id,
                          agent=check_agent(agent))
        return self._handle(await self.transport.run(self.flows.enqueue(session_id, request)))

    async def summarize(self, system_prompt: str, prompt: str, *,
                        max_tokens: int | None = None) -> AsyncJobHandle:
        """As :meth:`CompactionClient.summarize`."""
        request = SummaryInput(system_prompt, prompt, max_tokens)
        return self._handle(await self.transport.run(self.flows.summarize(request)))

    async def job(self, job_id: str) -> AsyncJobHandle:
        return self._handle(await self.transport.run(self.flows.job(job_id)))

    async def context(self, session_id: str) -> LlmContext:
        """As :meth:`CompactionClient.context`."""
        return await self.transport.run(self.flows.context(session_id))

    def events(self, session_id: str | None = None, *, since: str | None = None,
               follow: bool = True, group: str | None = None, consumer: str | None = None,
               block_ms: int = 5000, start: str | None = None,
               auto_ack: bool = True) -> AsyncEventReader:
        """``async for event in client.events(...)``; options as :meth:`CompactionClient.events`."""
        return AsyncEventReader(self.transport.blocking_redis(), self.layout, session_id=session_id,
                                group=group, consumer=consumer, block_ms=block_ms,
                                follow=follow, start=stream_start(since, start),
                                auto_ack=auto_ack)

    async def usage(self, days: int = 7) -> list[DayUsage]:
        """As :meth:`CompactionClient.usage`."""
        return await self.transport.run(self.flows.usage(days))

    async def ping(self) -> bool:
        return await self.transport.run(self.flows.ping())

    async def warm(self) -> None:
        """As :meth:`CompactionClient.warm`."""
        await self.transport.run(self.flows.warm())
        if self.transport.broker.name == "kombu":
            self.transport.producer.app()

    def blocking_redis(self) -> redis.asyncio.Redis[str]:
        return self.transport.blocking_redis()

    async def aclose(self) -> None:
        await self.transport.aclose()

    def _handle(self, job: JobRef) -> AsyncJobHandle:
        return AsyncJobHandle(self.transport, job)
