"""The thin client: session store, enqueue (record + Celery task by name), handles, events.

Enqueue is one Lua call: it writes the record and single-flight key and, when the broker is
this Redis, pushes the Celery task message (whose only argument is the job id); a separate Redis
broker gets it in one pipeline, RabbitMQ through kombu (:mod:`api_client._producer`). With Redis
or the broker down it raises
:class:`BrokerUnavailableError` within ``enqueue_timeout_s`` (default 2 s): short socket
timeouts, no backoff, no Celery publish or connection retries.
"""

from __future__ import annotations

import contextlib
import logging
import re
import secrets
import time
from importlib.resources import files
from typing import Any
from urllib.parse import urlsplit

import redis
import redis.asyncio

from api_client import _instant
from api_client._calls import AsyncShell, Flow, Pipeline, SyncShell, cmd
from api_client._handle import JobHandle
from api_client._producer import TaskProducer
from api_client.drafts import discard_note, prepare_templates
from api_client.errors import (
    BrokerUnavailableError,
    CompactorError,
    ConfigurationError,
    InvalidRequestError,
    SessionNotFoundError,
)
from api_client.events import EventReader
from api_client.jobs import EnqueueResult, JobStore, _JobCore, enqueue_call
from api_client.keys import KeyLayout
from api_client.redis_broker import (
    BrokerPush,
    prepare_envelopes,
    redis_db,
    same_redis,
    task_push,
)
from api_client.redis_conn import lua, make_redis
from api_client.session.context import LlmContext, llm_context
from api_client.session_store import AsyncSessionStore, SessionStore
from api_client.settings import REDIS_SCHEMES, ClientSettings, load_settings
from api_client.wire import (
    CompactReason,
    JobKind,
    JobState,
    all_routes,
)

__all__ = ["CompactionClient", "TaskProducer"]

log = logging.getLogger(__name__)


def _script_names() -> list[str]:
    return sorted(p.name[:-4] for p in files("api_client").joinpath("lua").iterdir()
                  if p.name.endswith(".lua"))


def _settings(value: str | ClientSettings | None) -> ClientSettings:
    if isinstance(value, ClientSettings):
        return value
    if value is None:
        return load_settings()
    if not isinstance(value, str):
        raise ConfigurationError(
            f"CompactionClient takes a Redis URL or ClientSettings, not {type(value).__name__}")
    return load_settings(redis_url=value)


# The session warm() probes (with a random suffix): it never exists, so nothing is written.
_WARM_PROBE = "compactor-warm-probe"
# CPython specializes a function's bytecode after ~8 calls: the probe runs that often (~1 ms).
_WARM_ROUNDS = 8

_STREAM_ID = re.compile(r"\d+(-\d+)?")


def stream_start(since: str | None, start: str | None) -> str | None:
    """The reader's start id for ``events(since=...)`` (None: the reader's default)."""
    if since is None:
        return start
    if start is not None:
        raise InvalidRequestError("give events() since= or start=, not both")
    if since == "start":
        return "0-0"
    if since == "now":
        return "$"
    if not _STREAM_ID.fullmatch(since):
        raise InvalidRequestError(
            f"since={since!r}: 'start', 'now' or a stream id such as '1700000000000-0'")
    return since


def broker_down(err: BrokerUnavailableError) -> BrokerUnavailableError:
    return BrokerUnavailableError(str(err).replace("Redis unavailable", "broker unavailable", 1))


class _ClientCore:
    """What both clients share: settings, layout, the producer, and the flows of their calls."""

    def __init__(self, redis_url_or_settings: str | ClientSettings | None) -> None:
        self.settings = _settings(redis_url_or_settings)
        self.layout = KeyLayout(self.settings.key_prefix)
        self.producer = TaskProducer(self.settings)
        s = self.settings
        broker = s.resolved_broker_url
        # How a new job's task message travels: inside the enqueue script (one round trip),
        # in one pipeline to a separate Redis broker, or through kombu (RabbitMQ).
        self.broker_mode = ("inline" if same_redis(s.redis_url, broker)
                            else "redis" if urlsplit(broker).scheme in REDIS_SCHEMES
                            else "kombu")
        self._broker_db = redis_db(broker) if self.broker_mode != "kombu" else None

    def _inline_db(self) -> int | None:
        return self._broker_db if self.broker_mode == "inline" else None

    def _push(self, result: EnqueueResult) -> BrokerPush:
        """The task message of an enqueue the script did not push (Redis brokers)."""
        route = result.route
        task_id = f"{result.job_id}-p{route.priority}" if result.upgraded else None
        return task_push(route.task, result.job_id, route.queue, route.priority, task_id=task_id,
                         db=self._broker_db or 0, sent_event=self.settings.send_sent_event)

    @staticmethod
    def _request(kind: JobKind, reason: CompactReason | str | None = None,
                 instructions: str | None = None, target_id: str | None = None, *,
                 context_window: int | None = None) -> dict[str, Any]:
        request: dict[str, Any] = {"kind": kind, "reason": reason, "instructions": instructions,
                                   "target_id": target_id}
        if context_window is not None:
            request["context_window"] = context_window
        return request

    @staticmethod
    def _ping() -> Flow[bool]:
        return bool((yield cmd("ping")))

    def _discarded(self, session_id: str, request: dict[str, Any], result: EnqueueResult,
                   cause: str) -> Flow[None]:
        """The draft was discarded: say why, on the job that runs instead (before it is sent)."""
        yield from discard_note(self.layout, self.settings, session_id, result.job_id,
                                request["reason"], cause, created=result.outcome == "created")

    def _warm(self) -> Flow[None]:
        """Load every packaged script (one pipeline), so no first EVALSHA meets NOSCRIPT;
        then :data:`_WARM_ROUNDS` automatic compactions of a session that does not exist, down
        the path a real one takes (the loop guard and draft check read keys that do not exist,
        the enqueue stops at the missing header): its first call runs no code for the first
        time, on the client or in Redis, and nothing is written. (With the broker elsewhere
        the enqueue call is built and dropped: it would index the job before its script.)"""
        loads = tuple(cmd("script_load", lua(n)) for n in _script_names())
        if self.settings.redis_cluster:
            # A cluster pipeline refuses SCRIPT LOAD; a command of its own goes to every primary.
            # (Not `yield from loads`: the shell sends each reply in, and a tuple takes none.)
            for load in loads:  # noqa: UP028
                yield load
        else:
            yield Pipeline(loads, transaction=False)
        probe = f"{_WARM_PROBE}-{secrets.token_hex(8)}"  # never a platform's session
        jobs, inline_db = _JobCore(self.settings, self.layout), self._inline_db()
        for _ in range(_WARM_ROUNDS):
            request = self._request(JobKind.COMPACT, CompactReason.THRESHOLD)
            with contextlib.suppress(SessionNotFoundError):
                yield from _instant._attempt(jobs, probe, request, inline_db, time.perf_counter())
            if inline_db is None:  # that enqueue indexes its job first: built only
                enqueue_call(self.layout, self.settings, probe, JobKind.COMPACT,
                             CompactReason.THRESHOLD, None, None)

    @staticmethod
    def _context(sessions: AsyncSessionStore | SessionStore, session_id: str) -> Flow[LlmContext]:
        snapshot = yield from sessions._load(session_id)
        return llm_context(snapshot.session.tree(), snapshot.leaf_id, revision=snapshot.revision)

    def _prepare(self, io: SyncShell | AsyncShell) -> None:
        """What the first call would otherwise build, without I/O (~1 ms; the constructors
        call it): the scripts' texts and redis-py objects, the request path's templates
        (draft record and events, task envelopes)."""
        io.register_scripts(_script_names())
        prepare_templates()
        if self.broker_mode != "kombu":
            prepare_envelopes((r.task, r.queue, r.priority) for r in all_routes())

    def _push_flow(self, result: EnqueueResult) -> Flow[None]:
        """LPUSH the task message and PUBLISH its task-sent event in one pipeline."""
        push = self._push(result)
        calls = [cmd("lpush", push.queue_key, push.message)]
        if push.event:
            calls.append(cmd("publish", push.channel, push.event))
        yield Pipeline(tuple(calls), transaction=False)

    @staticmethod
    def _unsent(jobs: _JobCore, result: EnqueueResult, err: BrokerUnavailableError) -> Flow[None]:
        """The task could not be sent: an upgraded job keeps its first message (and its old
        priority); a new one is failed, so the next request does not coalesce into it."""
        if result.upgraded:
            log.warning("could not re-send upgraded job %s: %s", result.job_id, err)
            return
        with contextlib.suppress(CompactorError):
            yield from jobs._finish(result.job_id, JobState.FAILED, None, None,
                                         {"error": str(err)})
        raise err


class CompactionClient(_ClientCore):
    """Sessions and compaction jobs for a platform's (sync) request path.

    ``CompactionClient("redis://host:6379/0")``, ``CompactionClient(settings)`` or
    :meth:`from_env`. Thread-safe; make one per process and reuse it.
    """

    def __init__(self, redis_url_or_settings: str | ClientSettings | None = None) -> None:
        super().__init__(redis_url_or_settings)
        self.redis = make_redis(self.settings)
        self.sessions = SessionStore(self.redis, self.layout)
        self.jobs = JobStore(self.redis, self.settings, self.layout)
        self._blocking: redis.Redis[str] | None = None
        self.io = SyncShell(self.redis, self.blocking_redis)
        self._broker: redis.Redis[str] | None = None
        self.broker_io = self.io
        if self.broker_mode == "redis":
            self._broker = make_redis(self.settings, url=self.settings.resolved_broker_url)
            self.broker_io = SyncShell(self._broker)
        self._prepare(self.io)

    @classmethod
    def from_env(cls, **overrides: Any) -> CompactionClient:
        """Settings from ``COMPACTOR_*`` variables and ``.env``; keyword overrides win."""
        return cls(load_settings(**overrides))

    def __enter__(self) -> CompactionClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def compact(self, session_id: str, reason: CompactReason | str = "manual",
                instructions: str | None = None, *,
                context_window: int | None = None) -> JobHandle:
        """Enqueue a compaction (``manual``, ``threshold``, ``overflow`` or ``speculative``);
        returns at once. Threshold/overflow without instructions first apply a valid draft
        (the handle is then finished: ``from_draft``). Threshold/overflow raise
        :class:`CompactionLoopError` when the loop guard trips. ``context_window`` (the
        agent's) lets the result say whether the compaction was ``ineffective``."""
        request = self._request(JobKind.COMPACT, reason, instructions,
                                context_window=context_window)
        handle, enqueued, discarded = _instant.from_draft(self, session_id, request)
        if handle is not None:
            return handle
        return self._enqueue(session_id, request, discarded, enqueued)

    def observe(self, session_id: str, *, context_tokens: int,
                context_window: int) -> _instant.ObserveResult:
        """Call after every turn: compacts above the threshold (from a valid draft when there is
        one), precomputes a draft in the band below it (coalesced), else does nothing."""
        return _instant.observe(self, session_id, context_tokens=context_tokens,
                                context_window=context_window)

    def prune(self, session_id: str) -> JobHandle:
        """Enqueue a tool-output prune pass (SPEC §8)."""
        return self._enqueue(session_id, self._request(JobKind.PRUNE))

    def branch_summary(self, session_id: str, target_id: str,
                       instructions: str | None = None) -> JobHandle:
        """Enqueue a branch summary from the current leaf to ``target_id`` (SPEC §11)."""
        request = self._request(JobKind.BRANCH_SUMMARY, None, instructions, target_id)
        return self._enqueue(session_id, request)

    def job(self, job_id: str) -> JobHandle:
        """A handle on an existing job (raises :class:`JobNotFoundError` if unknown)."""
        record = self.jobs.get(job_id)
        return JobHandle(self, record.id, record.session_id, record.kind)

    def context(self, session_id: str) -> LlmContext:
        """The model-ready context of the session's current leaf (one round trip): what the
        platform sends its model next, compaction summaries and branch summaries included."""
        return self.io.run(self._context(self.sessions, session_id))

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
        return EventReader(self.blocking_redis(), self.layout, session_id=session_id,
                           group=group, consumer=consumer, block_ms=block_ms, follow=follow,
                           start=stream_start(since, start), auto_ack=auto_ack)

    def ping(self) -> bool:
        return self.io.run(self._ping())

    def warm(self) -> None:
        """Do now the I/O the first call would otherwise pay for: connect, load the Lua
        scripts into Redis and run the request path (compactions of a session that does not
        exist: nothing is written); build the broker producer (RabbitMQ). The client built
        the scripts' objects and the request path's templates at construction. Optional;
        raises :class:`BrokerUnavailableError` when down."""
        self.io.run(self._warm())
        if self.broker_mode == "kombu":
            self.producer.app()

    def blocking_redis(self) -> redis.Redis[str]:
        """A second connection pool without a read timeout, for XREAD BLOCK."""
        if self._blocking is None:
            self._blocking = make_redis(self.settings, blocking=True)
        return self._blocking

    def close(self) -> None:
        self.producer.close()
        self.redis.close()
        if self._broker is not None:
            self._broker.close()
        if self._blocking is not None:
            self._blocking.close()

    def _enqueue(self, session_id: str, request: dict[str, Any], discarded: str | None = None,
                 result: EnqueueResult | None = None) -> JobHandle:
        if result is None:  # else compact_auto.lua enqueued it already
            result = self.jobs.enqueue(session_id, **request, broker_db=self._inline_db())
        if discarded:
            self.io.run(self._discarded(session_id, request, result, discarded))
        if result.must_send:
            try:
                self._send(result)
            except BrokerUnavailableError as err:
                self.io.run(self._unsent(self.jobs, result, err))
        return JobHandle(self, result.job_id, session_id, request["kind"],
                         coalesced=result.coalesced, upgraded=result.upgraded, since=result.since)

    def _send(self, result: EnqueueResult) -> None:
        if self.broker_mode == "kombu":
            self.producer.send(result.job_id, result.route, resend=result.upgraded)
            return
        try:
            self.broker_io.run(self._push_flow(result))
        except BrokerUnavailableError as err:
            raise broker_down(err) from err
