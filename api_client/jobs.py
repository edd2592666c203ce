"""Job records in Redis: single-flight enqueue, state changes, leases, cancellation.

Both sides use :class:`JobStore`. The client calls :meth:`~JobStore.enqueue`,
:meth:`~JobStore.get` and :meth:`~JobStore.request_cancel`; a worker, for each delivery:

1. ``acquire_lease(job_id, worker_id, ttl_s)`` → ``ACQUIRED`` (go on), ``HELD`` (another worker
   runs it: drop this delivery) or ``FINISHED`` (a duplicate delivery: ack and return);
2. ``mark_running(job_id)`` → the attempt number (``None``: finished meanwhile);
3. while working: ``renew_lease``, ``is_cancel_requested``, ``publish(JobEvent(...))``;
4. ``finish(job_id, state, entry=..., error=..., ...)`` exactly once per job: it sets the terminal
   state, clears the single-flight key, drops the lease, sets the record TTL and publishes the
   completion event atomically; a second call returns False and publishes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import redis
import redis.asyncio

from api_client.errors import (
    InvalidRequestError,
    JobConflictError,
    JobNotFoundError,
)
from api_client.events import EventPublisher, event_fields
from api_client.keys import KeyLayout
from api_client.redis_conn import REDIS_DOWN, check_decoding, lua, unavailable
from api_client.settings import ClientSettings
from api_client.wire import (
    CompactReason,
    JobEvent,
    JobKind,
    JobRecord,
    JobState,
    Route,
    TokenUsage,
    now_iso,
    route_for,
)

__all__ = ["AsyncJobStore", "EnqueueResult", "JobStore", "LeaseOutcome"]


class LeaseOutcome(StrEnum):
    ACQUIRED = "acquired"
    HELD = "held"          # another worker holds a live lease
    FINISHED = "finished"  # the job already ended (a duplicate delivery)


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    job_id: str
    outcome: str            # created | coalesced | upgraded
    state: JobState         # of the job returned (queued for a new one)
    since: str              # last id of the session's event stream when the script ran
    route: Route            # where to send the task (the upgraded route when upgraded)

    @property
    def coalesced(self) -> bool:
        return self.outcome != "created"

    @property
    def upgraded(self) -> bool:
        return self.outcome == "upgraded"

    @property
    def must_send(self) -> bool:
        return self.outcome in ("created", "upgraded")


def _enum(cls: type[StrEnum], value: object, what: str) -> Any:
    try:
        return cls(value)  # type: ignore[arg-type]
    except ValueError:
        allowed = ", ".join(m.value for m in cls)  # type: ignore[attr-defined]
        raise InvalidRequestError(f"invalid {what} {value!r} (one of: {allowed})") from None


def enqueue_call(layout: KeyLayout, settings: ClientSettings, session_id: str, kind: object,
                 reason: object, instructions: str | None,
                 target_id: str | None) -> tuple[list[str], list[str], Route]:
    """KEYS and ARGV of enqueue.lua for a new job (plain strings: this is the request path)."""
    job_kind: JobKind = _enum(JobKind, kind, "job kind")
    why: CompactReason | None = None
    if job_kind is JobKind.COMPACT:
        why = _enum(CompactReason, reason or "manual", "compaction reason")
    if job_kind is JobKind.BRANCH_SUMMARY and not target_id:
        raise InvalidRequestError("a branch summary needs a target entry id")
    route = route_for(job_kind, why)
    job_id = layout.new_job_id(session_id)
    skeys = layout.session(session_id)
    record_prefix = layout.job_record_prefix(session_id)
    fields = [
        "id", job_id, "kind", job_kind.value, "sessionId", session_id, "state", "queued",
        "priority", str(route.priority), "queue", route.queue, "attempts", "0",
        "createdAt", now_iso(), "cancelRequested", "0",
    ]
    for name, value in (("reason", why), ("instructions", instructions), ("targetId", target_id)):
        if value:
            fields += [name, str(value)]
    keys = [skeys.inflight(job_kind.value), record_prefix + job_id.rpartition(":")[2], skeys.events]
    args = [job_id, record_prefix, str(route.priority), route.queue, why.value if why else "",
            target_id or "", str(settings.job_pending_ttl_s), str(settings.job_pending_ttl_s),
            *fields]
    return keys, args, route


def parse_enqueue(reply: Sequence[Any], route: Route) -> EnqueueResult:
    outcome, job_id, state, since = (str(x) for x in reply)
    if outcome == "conflict":
        raise JobConflictError(
            f"job {job_id} of this kind is {state} for the session with other parameters",
            job_id=job_id,
        )
    return EnqueueResult(job_id, outcome, JobState(state), since, route)


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _usage(usage: Any) -> TokenUsage | None:
    if usage is None or isinstance(usage, TokenUsage):
        return usage
    if isinstance(usage, Mapping):
        return TokenUsage.model_validate(usage)
    # The model layer's Usage dataclass (input, output, cache_read, cache_write).
    return TokenUsage(**{k: getattr(usage, k, 0) for k in ("input", "output", "cache_read",
                                                            "cache_write")})


def result_fields(**result: Any) -> list[str]:
    """Record field pairs for finish(): entry, resultEntryId, error, model, usage, result."""
    out: list[str] = []
    usage = _usage(result.get("usage"))
    if usage is not None:
        out += ["usage", _dump(usage.to_wire())]
    for key, field, as_json in (("entry", "entry", True), ("result", "result", True),
                                ("result_entry_id", "resultEntryId", False),
                                ("error", "error", False), ("model", "model", False)):
        value = result.get(key)
        if value is not None:
            out += [field, _dump(value) if as_json else str(value)]
    if "resultEntryId" not in out and isinstance(result.get("entry"), Mapping):
        entry_id = result["entry"].get("id")
        if isinstance(entry_id, str):
            out += ["resultEntryId", entry_id]
    return out


def finish_call(layout: KeyLayout, settings: ClientSettings, job_id: str, state: JobState,
                event: JobEvent | None, mode: str, extra: list[str]) -> tuple[list[str], list[str]]:
    jk = layout.job(job_id)
    keys = [jk.record, jk.lease, *(jk.session.inflight(k.value) for k in JobKind),
            jk.session.events]
    fields = event_fields(event) if event is not None else {"type": "", "data": ""}
    args = [job_id, state.value, now_iso(), str(settings.job_ttl_s),
            str(settings.session_event_maxlen), fields["type"], fields["data"], mode, *extra]
    return keys, args


def completion_for(state: JobState | str, event: JobEvent | None, record: JobRecord | None,
                   result: Mapping[str, Any]) -> tuple[JobState, JobEvent]:
    """The terminal state and completion event for finish() (built from the record if needed)."""
    final: JobState = _enum(JobState, state, "job state")
    if not final.terminal:
        raise InvalidRequestError(f"finish() needs a terminal state, not {final.value}")
    if event is None:
        assert record is not None
        payload = {k: v for k, v in result.items() if k not in ("result_entry_id", "usage")}
        event = JobEvent.completion(record, final, **payload)
    return final, event


def job_not_found(err: redis.ResponseError, job_id: str) -> Exception:
    return JobNotFoundError(job_id) if str(err).startswith("COMPACTOR_NOJOB") else err


class JobStore:
    """Job records for one Redis (``client`` must decode responses)."""

    def __init__(self, client: redis.Redis[str], settings: ClientSettings | None = None,
                 layout: KeyLayout | None = None) -> None:
        check_decoding(client)
        self.redis = client
        self.settings = settings or ClientSettings()
        self.layout = layout or KeyLayout(self.settings.key_prefix)
        self.events = EventPublisher(client, self.settings, self.layout)
        self._enqueue = client.register_script(lua("enqueue"))
        self._finish = client.register_script(lua("finish"))
        self._acquire = client.register_script(lua("lease_acquire"))
        self._renew = client.register_script(lua("lease_renew"))
        self._release = client.register_script(lua("lease_release"))
        self._running = client.register_script(lua("running"))

    # -- client side -------------------------------------------------------------------------
    def enqueue(self, session_id: str, kind: JobKind | str, *, reason: CompactReason | str | None = None,
                instructions: str | None = None, target_id: str | None = None) -> EnqueueResult:
        """Create a queued job record, or return the in-flight one of the same kind (coalesced).

        A more urgent compaction than the queued one upgrades it (``upgraded``: re-send it on
        ``result.route``). A branch summary to another target raises :class:`JobConflictError`.
        """
        keys, args, route = enqueue_call(self.layout, self.settings, session_id, kind, reason,
                                         instructions, target_id)
        return parse_enqueue(self._run(self._enqueue, keys, args, ""), route)

    def get(self, job_id: str) -> JobRecord:
        fields = self._call(self.redis.hgetall, self.layout.job(job_id).record)
        if not fields:
            raise JobNotFoundError(job_id)
        return JobRecord.from_redis(fields)

    def request_cancel(self, job_id: str) -> JobState:
        """Cancel a queued job at once; ask a running one to stop. Returns the state now:
        ``cancelled``, ``running`` (the worker will see :meth:`is_cancel_requested`), or the
        state the job had already ended in."""
        record = self.get(job_id)
        if record.state.terminal:
            return record.state
        event = JobEvent.completion(record, JobState.CANCELLED, error="Compaction cancelled")
        keys, args = finish_call(self.layout, self.settings, job_id, JobState.CANCELLED, event,
                                 "cancel", ["error", "Compaction cancelled"])
        changed, before, _ = self._run(self._finish, keys, args, job_id)
        if int(changed):
            self._publish_global(event)
            return JobState.CANCELLED
        return JobState(before)

    # -- worker side -------------------------------------------------------------------------
    def acquire_lease(self, job_id: str, worker_id: str, ttl_s: float) -> LeaseOutcome:
        jk = self.layout.job(job_id)
        reply = self._run(self._acquire, [jk.record, jk.lease], [worker_id, _ms(ttl_s)], job_id)
        return LeaseOutcome(reply)

    def renew_lease(self, job_id: str, worker_id: str, ttl_s: float) -> bool:
        keys = [self.layout.job(job_id).lease]
        return bool(self._run(self._renew, keys, [worker_id, _ms(ttl_s)], job_id))

    def release_lease(self, job_id: str, worker_id: str) -> bool:
        return bool(self._run(self._release, [self.layout.job(job_id).lease], [worker_id], job_id))

    def mark_running(self, job_id: str, attempt: int | None = None) -> int | None:
        """Set ``running`` and count the attempt; None when the job already finished. The
        record then lives ``job_ttl_s`` (its pending TTL only bounds the wait in the queue)."""
        args = [now_iso(), "" if attempt is None else str(attempt), str(self.settings.job_ttl_s)]
        value = int(self._run(self._running, [self.layout.job(job_id).record], args, job_id))
        return None if value < 0 else value

    def is_cancel_requested(self, job_id: str) -> bool:
        record = self.layout.job(job_id).record
        return bool(self._call(self.redis.hget, record, "cancelRequested") == "1")

    def publish(self, event: JobEvent) -> str:
        """A non-terminal event (compaction_start, session_compact, branch_summary, stale)."""
        return self.events.publish(event)

    def finish(self, job_id: str, state: JobState | str, *, event: JobEvent | None = None,
               record: JobRecord | None = None, **result: Any) -> bool:
        """End the job once (see the module doc). ``result``: ``entry`` (dict), ``result_entry_id``,
        ``error``, ``model``, ``usage`` (TokenUsage, a mapping or the model layer's Usage),
        ``result`` (prune: PruneResult fields), plus event-only fields (``tokens_before``,
        ``tokens_after``, ``duration_ms``, ``old_leaf_id``, ``new_leaf_id``, ...) used when
        ``event`` is not given. Returns True if this call ended the job."""
        final, event = completion_for(state, event, record or (None if event else
                                                             self.get(job_id)), result)
        keys, args = finish_call(self.layout, self.settings, job_id, final, event, "finish",
                                 result_fields(**result))
        changed = int(self._run(self._finish, keys, args, job_id)[0])
        if changed:
            self._publish_global(event)
        return bool(changed)

    # -- plumbing ----------------------------------------------------------------------------
    def _publish_global(self, event: JobEvent) -> None:
        # The session stream got the completion event atomically; the global copy follows it
        # (lost only if this process dies in between).
        self.events.publish_global(event_fields(event))

    def _run(self, script: Any, keys: Sequence[str], args: Sequence[str], job_id: str) -> Any:
        try:
            return script(keys=list(keys), args=list(args))
        except redis.ResponseError as err:
            raise job_not_found(err, job_id) from err
        except REDIS_DOWN as err:
            raise unavailable(err) from err

    def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except REDIS_DOWN as err:
            raise unavailable(err) from err


def _ms(seconds: float) -> str:
    return str(max(1, int(seconds * 1000)))


class AsyncJobStore:
    """The client-side half of :class:`JobStore` for asyncio (enqueue, get, request_cancel,
    finish)."""

    def __init__(self, client: redis.asyncio.Redis[str], settings: ClientSettings | None = None,
                 layout: KeyLayout | None = None) -> None:
        check_decoding(client)
        self.redis = client
        self.settings = settings or ClientSettings()
        self.layout = layout or KeyLayout(self.settings.key_prefix)
        self._enqueue = client.register_script(lua("enqueue"))
        self._finish = client.register_script(lua("finish"))

    async def enqueue(self, session_id: str, kind: JobKind | str, *,
                      reason: CompactReason | str | None = None, instructions: str | None = None,
                      target_id: str | None = None) -> EnqueueResult:
        keys, args, route = enqueue_call(self.layout, self.settings, session_id, kind, reason,
                                         instructions, target_id)
        return parse_enqueue(await self._run(self._enqueue, keys, args, ""), route)

    async def get(self, job_id: str) -> JobRecord:
        fields = await self._call(self.redis.hgetall, self.layout.job(job_id).record)
        if not fields:
            raise JobNotFoundError(job_id)
        return JobRecord.from_redis(fields)

    async def request_cancel(self, job_id: str) -> JobState:
        record = await self.get(job_id)
        if record.state.terminal:
            return record.state
        event = JobEvent.completion(record, JobState.CANCELLED, error="Compaction cancelled")
        keys, args = finish_call(self.layout, self.settings, job_id, JobState.CANCELLED, event,
                                 "cancel", ["error", "Compaction cancelled"])
        changed, before, _ = await self._run(self._finish, keys, args, job_id)
        if int(changed):
            await self._xadd_global(event)
            return JobState.CANCELLED
        return JobState(before)

    async def finish(self, job_id: str, state: JobState | str, *, event: JobEvent | None = None,
                     record: JobRecord | None = None, **result: Any) -> bool:
        """As :meth:`JobStore.finish`."""
        final, event = completion_for(state, event, record or (None if event else
                                                             await self.get(job_id)), result)
        keys, args = finish_call(self.layout, self.settings, job_id, final, event, "finish",
                                 result_fields(**result))
        changed = int((await self._run(self._finish, keys, args, job_id))[0])
        if changed:
            await self._xadd_global(event)
        return bool(changed)

    async def _xadd_global(self, event: JobEvent) -> None:
        await self._call(self.redis.xadd, self.layout.global_events, event_fields(event),
                         maxlen=self.settings.event_stream_maxlen, approximate=True)

    async def _run(self, script: Any, keys: Sequence[str], args: Sequence[str],
                   job_id: str) -> Any:
        try:
            return await script(keys=list(keys), args=list(args))
        except redis.ResponseError as err:
            raise job_not_found(err, job_id) from err
        except REDIS_DOWN as err:
            raise unavailable(err) from err

    async def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        except REDIS_DOWN as err:
            raise unavailable(err) from err
