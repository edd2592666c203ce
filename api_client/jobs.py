"""Job records in Redis as a platform sees them: single-flight enqueue, records, cancel, finish.

:class:`JobStore` (sync) and :class:`AsyncJobStore` run the same flows (:class:`_JobCore`). The
worker's side of a job (leases, ``running``, progress events) is ``worker.store.jobs.JobStore``,
a subclass of the sync store here.

``finish(job_id, state, entry=..., error=..., ...)`` ends a job exactly once: it sets the terminal
state, clears the single-flight key, drops the lease, sets the record TTL and publishes the
completion event atomically (finish.lua); a second call returns False and publishes nothing.
The client itself finishes a job it could not send (failed) and a queued one it cancels.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NoReturn

import redis
import redis.asyncio

from api_client._calls import AsyncShell, Command, Flow, Rescue, Script, SyncShell, cmd
from api_client.errors import (
    EntryNotFoundError,
    InvalidRequestError,
    JobConflictError,
    JobNotFoundError,
    SessionNotFoundError,
)
from api_client.events import event_fields
from api_client.keys import INFLIGHT_SPECULATIVE, KeyLayout
from api_client.redis_broker import task_push
from api_client.session.validate import check_entry_id, check_json_value
from api_client.settings import ClientSettings
from api_client.wire import (
    CompactReason,
    JobEvent,
    JobKind,
    JobRecord,
    JobState,
    Route,
    TokenUsage,
    job_error_text,
    now_iso,
    route_for,
)

__all__ = [
    "AsyncJobStore", "EnqueueCall", "EnqueueResult", "JobStore", "check_context_window",
    "completion_for", "finish_call", "job_rescue", "result_fields",
]


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    job_id: str
    outcome: str            # created | coalesced | upgraded
    state: JobState         # of the job returned (queued for a new one)
    since: str              # last id of the session's event stream when the script ran
    route: Route            # where to send the task (the upgraded route when upgraded)
    pushed: bool = False    # the enqueue script already pushed the task message

    @property
    def coalesced(self) -> bool:
        return self.outcome != "created"

    @property
    def upgraded(self) -> bool:
        return self.outcome == "upgraded"

    @property
    def must_send(self) -> bool:
        return self.outcome in ("created", "upgraded") and not self.pushed


@dataclass(frozen=True, slots=True)
class EnqueueCall:
    """enqueue.lua's call for one new job and where its task goes, for a flow that runs the
    script alone or inside ``compact_auto.lua``."""

    script: Script
    route: Route


def _enum(cls: type[StrEnum], value: object, what: str) -> Any:
    try:
        return cls(value)  # type: ignore[arg-type]
    except ValueError:
        allowed = ", ".join(m.value for m in cls)  # type: ignore[attr-defined]
        raise InvalidRequestError(f"invalid {what} {value!r} (one of: {allowed})") from None


def enqueue_call(layout: KeyLayout, settings: ClientSettings, session_id: str, kind: object,
                 reason: object, instructions: str | None, target_id: str | None,
                 broker_db: int | None = None,
                 context_window: int | None = None) -> tuple[list[str], list[str], Route]:
    """KEYS and ARGV of enqueue.lua for a new job (plain strings: this is the request path).

    With ``broker_db`` (the broker is this Redis, that database) the script also pushes the
    Celery message and the task-sent event: enqueue is then one round trip.
    """
    job_kind: JobKind = _enum(JobKind, kind, "job kind")
    why: CompactReason | None = None
    if job_kind is JobKind.COMPACT:
        why = _enum(CompactReason, reason or "manual", "compaction reason")
    if job_kind is JobKind.BRANCH_SUMMARY and not target_id:
        raise InvalidRequestError("a branch summary needs a target entry id")
    if target_id is not None:
        check_entry_id(target_id, what="branch target", source=f"branch_summary {session_id}")
    if instructions is not None:
        check_json_value(instructions, source=f"instructions for {session_id}")
    route = route_for(job_kind, why)
    job_id = layout.new_job_id(session_id)
    skeys = layout.session(session_id)
    record_prefix = layout.job_record_prefix(session_id)
    fields = [
        "id", job_id, "kind", job_kind.value, "sessionId", session_id, "state", "queued",
        "priority", str(route.priority), "queue", route.queue, "attempts", "0",
        "createdAt", now_iso(), "cancelRequested", "0",
    ]
    window = check_context_window(context_window)
    for name, value in (("reason", why), ("instructions", instructions), ("targetId", target_id),
                        ("contextWindow", window)):
        if value:
            fields += [name, str(value)]
    push = None
    if broker_db is not None:
        push = task_push(route.task, job_id, route.queue, route.priority, db=broker_db,
                         sent_event=settings.send_sent_event)
    # A speculative compaction flies apart: a real one must never coalesce into it.
    slot = INFLIGHT_SPECULATIVE if why is CompactReason.SPECULATIVE else job_kind.value
    # Without a push KEYS[6] is never touched; a key of the session's slot stands in for it, so
    # the script stays in one Redis Cluster slot (the queue list lives elsewhere).
    keys = [skeys.inflight(slot), record_prefix + job_id.rpartition(":")[2],
            skeys.events, skeys.header, skeys.entries,
            push.queue_key if push else skeys.inflight(slot)]
    # With the broker in this (single) Redis the script indexes the job itself (one round
    # trip); otherwise the caller does, with a command of its own (a Cluster slot apart).
    due = ""
    if push is not None:
        keys.append(layout.jobs_due)
        due = str(due_ms(settings))
    args = [job_id, record_prefix, str(route.priority), route.queue, why.value if why else "",
            target_id or "", str(settings.job_pending_ttl_s), str(settings.job_pending_ttl_s),
            instructions or "", push.message if push else "", push.channel if push else "",
            push.event if push else "", due, *fields]
    return keys, args, route


def check_context_window(value: object) -> int | None:
    """The agent's context window a request may name (None = not given)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidRequestError(f"context_window must be a positive int, not {value!r}")
    return value


def due_ms(settings: ClientSettings) -> int:
    """When the workers' sweep first looks at a new job (``requeue_after_s`` from now)."""
    return int((time.time() + settings.requeue_after_s) * 1000)


def parse_enqueue(reply: Sequence[Any], route: Route, pushed: bool = False) -> EnqueueResult:
    outcome, job_id, state, since = (str(x) for x in reply[:4])
    if outcome == "conflict":
        what = "a branch summary to another target" if reply[4] == "target" else (
            "other instructions" if state == "queued" else "instructions it cannot take now")
        raise JobConflictError(
            f"job {job_id} of this kind is {state} for the session with {what}; cancel it or "
            "wait for it before asking again", job_id=job_id)
    return EnqueueResult(job_id, outcome, JobState(state), since, route,
                         pushed=pushed and outcome == "created")


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


def job_rescue(job_id: str, session_id: str = "") -> Rescue:
    """Error replies of the job scripts: ``COMPACTOR_NOJOB`` → :class:`JobNotFoundError`,
    enqueue's ``COMPACTOR_NOSESSION`` / ``COMPACTOR_NOENTRY <id>`` → the session's errors."""
    def rescue(err: redis.ResponseError) -> NoReturn:
        code, _, arg = str(err).partition(" ")
        if code == "COMPACTOR_NOJOB":
            raise JobNotFoundError(job_id) from err
        if code == "COMPACTOR_NOSESSION":
            raise SessionNotFoundError(f"Session {session_id} not found") from err
        if code == "COMPACTOR_NOENTRY":
            raise EntryNotFoundError(arg) from err
        raise err
    return rescue


class _JobCore:
    """Every client-side job operation as a flow (see :mod:`api_client._calls`); no I/O here."""

    def __init__(self, settings: ClientSettings | None, layout: KeyLayout | None) -> None:
        self.settings = settings or ClientSettings()
        self.layout = layout or KeyLayout(self.settings.key_prefix)

    def _enqueue(self, session_id: str, kind: JobKind | str, reason: CompactReason | str | None,
                 instructions: str | None, target_id: str | None,
                 broker_db: int | None = None,
                 context_window: int | None = None) -> Flow[EnqueueResult]:
        call = self.enqueue_script(session_id, kind, reason, instructions, target_id, broker_db,
                                   context_window)
        job_id, indexed = str(call.script.args[0]), broker_db is not None
        if not indexed:
            # Indexed before the record exists: a client that dies between the two leaves a job
            # the workers' sweep still finds (an entry without a record is simply dropped).
            yield cmd("zadd", self.layout.jobs_due, {job_id: due_ms(self.settings)}, nx=True)
        reply = yield call.script
        if not indexed and str(reply[0]) != "created":
            yield cmd("zrem", self.layout.jobs_due, job_id)
        return parse_enqueue(reply, call.route, indexed)

    def enqueue_script(self, session_id: str, kind: JobKind | str,
                       reason: CompactReason | str | None, instructions: str | None,
                       target_id: str | None, broker_db: int | None = None,
                       context_window: int | None = None) -> EnqueueCall:
        """enqueue.lua's call for a new job (``broker_db``: the script pushes its task and
        indexes it too)."""
        keys, args, route = enqueue_call(self.layout, self.settings, session_id, kind, reason,
                                         instructions, target_id, broker_db, context_window)
        return EnqueueCall(Script("enqueue", keys, args, job_rescue("", session_id)), route)

    def _get(self, job_id: str) -> Flow[JobRecord]:
        fields = yield cmd("hgetall", self.layout.job(job_id).record)
        if not fields:
            raise JobNotFoundError(job_id)
        return JobRecord.from_redis(fields)

    def _request_cancel(self, job_id: str) -> Flow[JobState]:
        record = yield from self._get(job_id)
        if record.state.terminal:
            return record.state
        text = job_error_text(record.kind, JobState.CANCELLED)
        event = JobEvent.completion(record, JobState.CANCELLED, error=text)
        keys, args = finish_call(self.layout, self.settings, job_id, JobState.CANCELLED, event,
                                 "cancel", ["error", text])
        changed, before, _ = yield Script("finish", keys, args, job_rescue(job_id))
        if int(changed):
            yield self._global_copy(event)
            return JobState.CANCELLED
        return JobState(before)

    def _finish(self, job_id: str, state: JobState | str, event: JobEvent | None,
                record: JobRecord | None, result: Mapping[str, Any]) -> Flow[bool]:
        if event is None and record is None:
            record = yield from self._get(job_id)
        final, event = completion_for(state, event, record, result)
        keys, args = finish_call(self.layout, self.settings, job_id, final, event, "finish",
                                 result_fields(**result))
        changed = int((yield Script("finish", keys, args, job_rescue(job_id)))[0])
        if changed:
            yield self._global_copy(event)
        return bool(changed)

    def _global_copy(self, event: JobEvent) -> Command:
        # The session stream got the completion event atomically; the global copy follows it
        # (lost only if this process dies in between).
        return cmd("xadd", self.layout.global_events, event_fields(event),
                   maxlen=self.settings.event_stream_maxlen, approximate=True)


class JobStore(_JobCore):
    """Job records for one Redis (``client`` must decode responses)."""

    def __init__(self, client: redis.Redis[str], settings: ClientSettings | None = None,
                 layout: KeyLayout | None = None) -> None:
        super().__init__(settings, layout)
        self.redis = client
        self._io = SyncShell(client)

    def enqueue(self, session_id: str, kind: JobKind | str, *,
                reason: CompactReason | str | None = None, instructions: str | None = None,
                target_id: str | None = None, broker_db: int | None = None,
                context_window: int | None = None) -> EnqueueResult:
        """Create a queued job record, or return the in-flight one of the same kind (coalesced).

        A more urgent compaction than the queued one upgrades it (``upgraded``: re-send it on
        ``result.route``). Instructions join a queued job that has none; other instructions, a
        running job asked for instructions, or a branch summary to another target raise
        :class:`JobConflictError`. A missing session or target raises before anything is
        written. With ``broker_db`` the script also pushes the task message (``pushed``).
        ``context_window`` (the agent's) is stored on a new record for the loop guard.
        """
        return self._io.run(self._enqueue(session_id, kind, reason, instructions, target_id,
                                          broker_db, context_window))

    def get(self, job_id: str) -> JobRecord:
        return self._io.run(self._get(job_id))

    def request_cancel(self, job_id: str) -> JobState:
        """Cancel a queued job at once; ask a running one to stop. Returns the state now:
        ``cancelled``, ``running`` (the worker sees the flag and stops), or the state the job
        had already ended in."""
        return self._io.run(self._request_cancel(job_id))

    def finish(self, job_id: str, state: JobState | str, *, event: JobEvent | None = None,
               record: JobRecord | None = None, **result: Any) -> bool:
        """End the job once (see the module doc). ``result``: ``entry`` (dict), ``result_entry_id``,
        ``error``, ``model``, ``usage`` (TokenUsage, a mapping or the model layer's Usage),
        ``result`` (prune: PruneResult fields), plus event-only fields (``tokens_before``,
        ``tokens_after``, ``duration_ms``, ``old_leaf_id``, ``new_leaf_id``, ...) used when
        ``event`` is not given. Returns True if this call ended the job."""
        return self._io.run(self._finish(job_id, state, event, record, result))


class AsyncJobStore(_JobCore):
    """:class:`JobStore` for asyncio: the same operations, awaited."""

    def __init__(self, client: redis.asyncio.Redis[str], settings: ClientSettings | None = None,
                 layout: KeyLayout | None = None) -> None:
        super().__init__(settings, layout)
        self.redis = client
        self._io = AsyncShell(client)

    async def enqueue(self, session_id: str, kind: JobKind | str, *,
                      reason: CompactReason | str | None = None, instructions: str | None = None,
                      target_id: str | None = None, broker_db: int | None = None,
                      context_window: int | None = None) -> EnqueueResult:
        return await self._io.run(self._enqueue(session_id, kind, reason, instructions,
                                                target_id, broker_db, context_window))

    async def get(self, job_id: str) -> JobRecord:
        return await self._io.run(self._get(job_id))

    async def request_cancel(self, job_id: str) -> JobState:
        return await self._io.run(self._request_cancel(job_id))

    async def finish(self, job_id: str, state: JobState | str, *, event: JobEvent | None = None,
                     record: JobRecord | None = None, **result: Any) -> bool:
        return await self._io.run(self._finish(job_id, state, event, record, result))
