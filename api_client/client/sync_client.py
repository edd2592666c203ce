"""The thin client for a platform's (sync) request path: sessions, jobs, handles, events.

Every call runs a flow of :class:`~api_client.client.orchestration.Orchestration` (written once,
shared with :class:`~api_client.client.async_client.AsyncCompactionClient`) on the client's
:class:`~api_client.client.transport.SyncTransport`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis

from api_client.client.event_readers import EventReader
from api_client.client.handles import JobHandle, ObserveResult
from api_client.client.jobs import JobStore, check_agent
from api_client.client.orchestration import JobRef, Orchestration, Request
from api_client.client.sessions import SessionStore
from api_client.client.summaries import SummaryInput
from api_client.client.transport import SyncTransport
from api_client.contract.agent_settings import AgentSettings
from api_client.contract.errors import ConfigurationError
from api_client.contract.job_enums import CompactReason, JobKind
from api_client.contract.job_records import stream_start
from api_client.contract.keys import check_tenant
from api_client.contract.session.context import LlmContext
from api_client.contract.settings import ClientSettings, load_settings
from api_client.contract.usage import DayUsage

__all__ = ["CompactionClient", "stream_start"]


def _settings(value: str | ClientSettings | None, tenant: str | None = None) -> ClientSettings:
    """The client's settings; ``tenant`` (when given) wins over the settings' own."""
    overrides: dict[str, Any] = {} if tenant is None else {"tenant": tenant}
    if isinstance(value, ClientSettings):
        return value.model_copy(update={"tenant": check_tenant(tenant)}) if overrides else value
    if value is None:
        return load_settings(**overrides)
    if not isinstance(value, str):
        raise ConfigurationError(
            f"CompactionClient takes a Redis URL or ClientSettings, not {type(value).__name__}")
    return load_settings(redis_url=value, **overrides)




class CompactionClient:
    """Sessions and compaction jobs for a platform's (sync) request path.

    ``CompactionClient("redis://host:6379/0")``, ``CompactionClient(settings)`` or
    :meth:`from_env`; ``tenant="acme"`` makes it a client of that tenant only (else
    ``COMPACTOR_TENANT``, else ``"default"``). Thread-safe; make one per process and tenant and
    reuse it.
    """

    def __init__(self, redis_url_or_settings: str | ClientSettings | None = None, *,
                 tenant: str | None = None) -> None:
        self.settings = _settings(redis_url_or_settings, tenant)
        self.transport = SyncTransport(self.settings)
        self.layout = self.transport.layout
        self.redis = self.transport.redis
        self.sessions = SessionStore(self.redis, self.layout, self.settings)
        self.jobs = JobStore(self.redis, self.settings, self.layout)
        self.flows = Orchestration(self.settings, self.layout, self.transport.broker)

    @classmethod
    def from_env(cls, **overrides: Any) -> CompactionClient:
        """Settings from ``COMPACTOR_*`` variables and ``.env``; keyword overrides win."""
        return cls(load_settings(**overrides))

    def __enter__(self) -> CompactionClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def compact(self, session_id: str, reason: CompactReason | str = "manual",
                instructions: str | None = None, *, context_window: int | None = None,
                agent: AgentSettings | Mapping[str, Any] | None = None) -> JobHandle:
        """Enqueue a compaction (``manual``, ``threshold``, ``overflow`` or ``speculative``);
        returns at once. Threshold/overflow without instructions first apply a valid draft
        (the handle is then finished: ``from_draft``). Threshold/overflow raise
        :class:`CompactionLoopError` when the loop guard trips. ``context_window`` (the
        agent's) lets the result say whether the compaction was ``ineffective``. ``agent``: the
        agent's compaction settings (reserve, keep, tokenizer, summary format: an
        :class:`AgentSettings` or a mapping of its fields); the worker plans with them and
        uses its own only where they say nothing (docs/compaction.md)."""
        request = Request(JobKind.COMPACT, reason, instructions, context_window=context_window,
                          agent=check_agent(agent))
        return self._handle(self.transport.run(self.flows.compact(session_id, request)))

    def observe(self, session_id: str, *, context_tokens: int, context_window: int,
                agent: AgentSettings | Mapping[str, Any] | None = None) -> ObserveResult:
        """Call after every turn: compacts above the threshold (from a valid draft when there is
        one), starts a draft below it when one is due (timed by the agent's pace; never two at
        once, nor while the last one still fits), else does nothing. ``agent``: as
        :meth:`compact` (its reserve sets the threshold; drafts are planned with it)."""
        plan = self.transport.run(self.flows.observe(session_id, context_tokens, context_window,
                                                     check_agent(agent)))
        handle = None if plan.job is None else self._handle(plan.job)
        return ObserveResult(plan.action, handle, bool(handle and handle.from_draft),
                             plan.draft_ready)

    def prune(self, session_id: str) -> JobHandle:
        """Enqueue a tool-output prune pass (docs/compaction.md "Pruning")."""
        return self._handle(self.transport.run(
            self.flows.enqueue(session_id, Request(JobKind.PRUNE))))

    def branch_summary(self, session_id: str, target_id: str,
                       instructions: str | None = None, *,
                       agent: AgentSettings | Mapping[str, Any] | None = None) -> JobHandle:
        """Enqueue a branch summary from the current leaf to ``target_id`` (``agent``: its
        ``branch_reserve_tokens`` and summary format apply)."""
        request = Request(JobKind.BRANCH_SUMMARY, None, instructions, target_id,
                          agent=check_agent(agent))
        return self._handle(self.transport.run(self.flows.enqueue(session_id, request)))

    def summarize(self, system_prompt: str, prompt: str, *,
                  max_tokens: int | None = None) -> JobHandle:
        """Have the workers' model router summarise ``prompt`` under ``system_prompt`` (no
        session); ``wait()`` returns ``{"summary": ...}`` and the calls' detail."""
        request = SummaryInput(system_prompt, prompt, max_tokens)
        return self._handle(self.transport.run(self.flows.summarize(request)))

    def job(self, job_id: str) -> JobHandle:
        """A handle on an existing job (raises :class:`JobNotFoundError` if unknown)."""
        return self._handle(self.transport.run(self.flows.job(job_id)))

    def context(self, session_id: str) -> LlmContext:
        """The model-ready context of the session's current leaf (one round trip): what the
        platform sends its model next, compaction summaries and branch summaries included."""
        return self.transport.run(self.flows.context(session_id))

    def events(self, session_id: str | None = None, *, since: str | None = None,
               follow: bool = True, group: str | None = None, consumer: str | None = None,
               block_ms: int = 5000, start: str | None = None,
               auto_ack: bool = True) -> EventReader:
        """Iterate over job events of one session (or all sessions).

        ``since``: ``"start"`` (the whole retained history), ``"now"`` (only events published
        from now on) or a stream id (``event.stream_id`` of the last event seen: what came
        after it). Default: ``"now"`` when following, ``"start"`` otherwise. ``follow=True``
        blocks for new events and never ends; ``follow=False`` returns when none is left.
        With ``group``: a consumer group (created at ``since``, default ``"now"``) shared by
        several readers; each event is acked when the next one is requested (``auto_ack``) or
        by :meth:`EventReader.ack`. ``block_ms`` is the wait per read while following;
        ``start`` is the older spelling of ``since`` (a stream id or ``"$"``).
        """
        return EventReader(self.transport.blocking_redis(), self.layout, session_id=session_id,
                           group=group, consumer=consumer, block_ms=block_ms, follow=follow,
                           start=stream_start(since, start), auto_ack=auto_ack)

    def usage(self, days: int = 7) -> list[DayUsage]:
        """This client's tenant's model spend per UTC day, the last ``days`` (1-400), today
        first: jobs, input and output tokens, USD, speculative drafts apart (``draft_*``)."""
        return self.transport.run(self.flows.usage(days))

    def ping(self) -> bool:
        return self.transport.run(self.flows.ping())

    def warm(self) -> None:
        """Do now the I/O the first call would otherwise pay for: connect and load the Lua
        scripts into Redis; build the broker producer (RabbitMQ). Optional; raises
        :class:`BrokerUnavailableError` when down."""
        self.transport.run(self.flows.warm())
        if self.transport.broker.name == "kombu":
            self.transport.producer.app()

    def blocking_redis(self) -> redis.Redis[str]:
        """A second connection pool without a read timeout, for XREAD BLOCK."""
        return self.transport.blocking_redis()

    def close(self) -> None:
        self.transport.close()

    def _handle(self, job: JobRef) -> JobHandle:
        return JobHandle(self.transport, job)
