"""Job records in Redis as a platform sees them: single-flight enqueue, records, cancel.

:class:`JobStore` (sync) and :class:`AsyncJobStore` run the same flows (:class:`JobFlows`). A
job's end (``finish.lua``) is the contract's (:mod:`api_client.contract.job_records`): the
client ends a job it could not send (failed) and a queued one it cancels; the worker the rest.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import redis
import redis.asyncio
from pydantic import ValidationError

from api_client.contract.admission import admission, due_ms
from api_client.contract.agent_settings import AgentSettings
from api_client.contract.errors import (
    InstructionsTooLongError,
    InvalidRequestError,
    JobConflictError,
)
from api_client.contract.job_enums import CompactReason, JobKind, JobState
from api_client.contract.job_records import (
    checked_enum,
    finish_call,
    finish_job,
    get_record,
    global_copy,
    job_rescue,
)
from api_client.contract.keys import INFLIGHT_SPECULATIVE, KeyLayout
from api_client.contract.redis_flows import (
    AsyncShell,
    Flow,
    Pipeline,
    Script,
    SyncShell,
    cmd,
)
from api_client.contract.reservations import release
from api_client.contract.routing import Route, route_for
from api_client.contract.session.validate import check_entry_id, check_json_value
from api_client.contract.settings import ClientSettings
from api_client.contract.task_messages import task_push
from api_client.contract.wire import JobEvent, JobRecord, job_error_text, now_iso

__all__ = [
    "AsyncJobStore", "EnqueueCall", "EnqueueResult", "JobFlows", "JobStore", "check_agent",
    "check_context_window", "enqueue_call", "parse_enqueue",
]


# enqueue.lua's named arguments (json.dumps with options would build an encoder per call).
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    job_id: str
    outcome: str            # created | coalesced | upgraded
    state: JobState         # of the job returned (queued for a new one)
    since: str              # last id of the session's event stream when the script ran
    route: Route            # where to send the task (the upgraded route when upgraded)
    pushed: bool = False    # the enqueue script already sent it on (message or inbox)
    tag: int | None = None  # the fair order's tag, when the caller places the message itself

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


def enqueue_call(layout: KeyLayout, settings: ClientSettings, session_id: str, kind: object,
                 reason: object, instructions: str | None, target_id: str | None,
                 broker_db: int | None = None, context_window: int | None = None,
                 agent: AgentSettings | None = None) -> tuple[list[str], list[str], Route]:
    """KEYS and ARGV of enqueue.lua for a new job: its key layout and its named arguments (one
    JSON object; the task message and event beside it), both listed in ``lua/_enqueue.lua``.
    ``agent``: the agent's compaction settings, stored on the record (docs/compaction.md).

    The script does what lies in this Redis's reach (docs/storage.md "Enqueue"): on one Redis
    it admits the job, writes it and indexes it; with ``broker_db`` (the broker is this Redis,
    that database) it also places the Celery message and the task-sent event; with the tenant's
    inbox it writes the inbox instead. On a Redis Cluster it writes the record only (the other
    keys lie in other slots: :meth:`JobFlows.enqueue_flow` admits and indexes the job around
    it).
    """
    job_kind: JobKind = checked_enum(JobKind, kind, "job kind")
    why: CompactReason | None = None
    if job_kind is JobKind.COMPACT:
        why = checked_enum(CompactReason, reason or "manual", "compaction reason")
    if job_kind is JobKind.BRANCH_SUMMARY and not target_id:
        raise InvalidRequestError("a branch summary needs a target entry id")
    if target_id is not None:
        check_entry_id(target_id, what="branch target", source=f"branch_summary {session_id}")
    if instructions is not None:
        check_instructions(instructions, session_id, settings)
    route = route_for(job_kind, why)
    job_id = layout.new_job_id(session_id)
    skeys = layout.session(session_id)
    record_prefix = layout.job_record_prefix(session_id)
    fields = [
        "id", job_id, "kind", job_kind.value, "sessionId", layout.qualified(session_id),
        "state", "queued",
        "priority", str(route.priority), "queue", route.queue, "attempts", "0",
        "createdAt", now_iso(), "cancelRequested", "0",
    ]
    window = check_context_window(context_window)
    for name, value in (("reason", why), ("instructions", instructions), ("targetId", target_id),
                        ("contextWindow", window)):
        if value:
            fields += [name, str(value)]
    if agent is not None and agent.to_wire():
        fields += ["agent", json.dumps(agent.to_wire(), separators=(",", ":"))]
    # A speculative compaction flies apart: a real one must never coalesce into it.
    slot = INFLIGHT_SPECULATIVE if why is CompactReason.SPECULATIVE else job_kind.value
    keys = [skeys.inflight(slot), record_prefix + job_id.rpartition(":")[2],
            skeys.events, skeys.header, skeys.entries]
    named: dict[str, Any] = {
        "job": job_id, "records": record_prefix, "priority": route.priority,
        "queue": route.queue, "reason": why.value if why else "", "target": target_id or "",
        "instructions": instructions or "", "ttl": settings.job_pending_ttl_s,
        "retention": settings.session_ttl_s, "fields": fields,
    }
    if settings.tenant_inbox:
        if not settings.redis_cluster:  # (else the inbox lies in another slot)
            named["inbox"] = int(time.time() * 1000)
            keys.append(layout.tenant_inbox(layout.resolve(session_id)[0]))
    elif not settings.redis_cluster:
        admitted = admission(layout, settings, session_id, job_kind, why, route,
                             context_window=window)
        queued, quota, usage = admitted.keys
        keys.append(queued)
        named["admit"] = {"policy": admitted.policy, "quota": quota, "usage": usage}
        named["due"] = {"key": layout.jobs_due, "at": due_ms(settings)}
        if broker_db is not None:
            push = task_push(route.task, job_id, route.queue, route.priority, db=broker_db,
                             sent_event=settings.send_sent_event, prefix=layout.broker)
            keys += admitted.fair_index
            named["push"] = {"list": push.queue_key, "channel": push.channel}
            return keys, [_ENCODE(named), push.message, push.event], route
    return keys, [_ENCODE(named)], route


def check_instructions(instructions: str, session_id: str, settings: ClientSettings) -> None:
    """JSON-safe text within ``max_instructions_chars`` (they travel in the job record)."""
    source = f"instructions for {session_id}"
    check_json_value(instructions, source=source)
    if len(instructions) > settings.max_instructions_chars:
        raise InstructionsTooLongError(source, setting="max_instructions_chars",
                                       limit=settings.max_instructions_chars,
                                       value=len(instructions))


def check_agent(value: object) -> AgentSettings | None:
    """The agent settings a request may carry: an :class:`AgentSettings`, or a mapping of its
    fields (snake_case or camelCase); an unknown field or a bad value is an
    :class:`InvalidRequestError`, never dropped."""
    if value is None or isinstance(value, AgentSettings):
        return value
    if not isinstance(value, Mapping):
        raise InvalidRequestError(f"agent must be AgentSettings or a mapping, not {value!r}")
    try:
        return AgentSettings.model_validate(dict(value))
    except ValidationError as err:
        raise InvalidRequestError(f"invalid agent settings: {err}") from err


def check_context_window(value: object) -> int | None:
    """The agent's context window a request may name (None = not given)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidRequestError(f"context_window must be a positive int, not {value!r}")
    return value


def parse_enqueue(reply: Sequence[Any], route: Route, pushed: bool = False) -> EnqueueResult:
    """enqueue.lua's reply; ``pushed``: the script sent the job on (its message, or the tenant's
    inbox)."""
    outcome, job_id, state, since = (str(x) for x in reply[:4])
    if outcome == "conflict":
        what = "a branch summary to another target" if reply[4] == "target" else (
            "other instructions" if state == "queued" else "instructions it cannot take now")
        raise JobConflictError(
            f"job {job_id} of this kind is {state} for the session with {what}; cancel it or "
            "wait for it before asking again", job_id=job_id)
    tag = int(reply[4]) if outcome == "created" and len(reply) > 4 else None
    return EnqueueResult(job_id, outcome, JobState(state), since, route,
                         pushed=pushed and outcome == "created", tag=tag)


class JobFlows:
    """Every client-side job operation as a flow (:mod:`api_client.contract.redis_flows`)."""

    def __init__(self, settings: ClientSettings | None, layout: KeyLayout | None) -> None:
        self.settings = settings or ClientSettings()
        self.layout = layout or KeyLayout(self.settings.key_prefix)

    def enqueue_flow(self, session_id: str, kind: JobKind | str,
                     reason: CompactReason | str | None, instructions: str | None,
                     target_id: str | None, broker_db: int | None = None,
                     context_window: int | None = None,
                     agent: AgentSettings | None = None) -> Flow[EnqueueResult]:
        """One enqueue.lua call on one Redis (see :func:`enqueue_call`); on a Redis Cluster the
        jobs-due index and the admission (other slots) around it."""
        call = self.enqueue_script(session_id, kind, reason, instructions, target_id, broker_db,
                                   context_window, agent)
        if not self.settings.redis_cluster:
            return self.enqueued((yield call.script), call.route, broker_db)
        return (yield from self._cluster_enqueue(session_id, kind, reason, call,
                                                 context_window))

    def enqueued(self, reply: Sequence[Any], route: Route,
                 broker_db: int | None) -> EnqueueResult:
        """enqueue.lua's reply on one Redis, where the script sent the job on itself when the
        broker is this Redis (``broker_db``: a new job's message) or with the tenant's inbox (a
        new or upgraded job's id)."""
        result = parse_enqueue(reply, route, pushed=broker_db is not None)
        if self.settings.tenant_inbox and result.outcome != "coalesced":
            return replace(result, pushed=True)
        return result

    def _cluster_enqueue(self, session_id: str, kind: JobKind | str,
                         reason: CompactReason | str | None, call: EnqueueCall,
                         context_window: int | None) -> Flow[EnqueueResult]:
        """On a Redis Cluster enqueue.lua writes the session's keys only: the jobs-due index,
        the tenant's admission and its inbox lie in other slots, each written by a command of
        its own here."""
        job_id = json.loads(call.script.args[0])["job"]
        if self.settings.tenant_inbox:  # the workers index, admit and send it
            result = parse_enqueue((yield call.script), call.route)
            if result.outcome in ("created", "upgraded"):
                inbox = self.layout.tenant_inbox(self.layout.resolve(session_id)[0])
                yield Pipeline((cmd("zadd", inbox, {result.job_id: int(time.time() * 1000)}),
                                cmd("publish", inbox, result.job_id)), transaction=False)
            return replace(result, pushed=result.outcome != "coalesced")
        # Indexed before the record exists: a client that dies between the two leaves a job
        # the workers' sweep still finds (an entry without a record is simply dropped).
        yield cmd("zadd", self.layout.jobs_due, {job_id: due_ms(self.settings)}, nx=True)
        tag = yield from self.admit_flow(session_id, kind, reason, job_id, call.route,
                                         context_window=context_window)
        reply = yield call.script
        if str(reply[0]) != "created":  # not this job: its index entries and reservation go
            yield Pipeline((cmd("zrem", self.layout.jobs_due, job_id),
                            cmd("zrem", self._queued(session_id), job_id),
                            release(self.layout, job_id)), transaction=False)
        return replace(parse_enqueue(reply, call.route), tag=tag)

    def admit_flow(self, session_id: str, kind: JobKind | str,
                   reason: CompactReason | str | None, job_id: str, route: Route,
                   summary_input: Mapping[str, Any] | None = None,
                   context_window: int | None = None) -> Flow[int]:
        """``admit.lua`` on the tenant's keys (the enqueue script runs without the admission):
        the job's fair tag, or QuotaExceededError when the tenant is over a quota."""
        job_kind = JobKind(kind)
        why = CompactReason(reason or "manual") if job_kind is JobKind.COMPACT else None
        admitted = admission(self.layout, self.settings, session_id, job_kind, why, route,
                             summary_input, context_window)
        tenant = self.layout.resolve(session_id)[0]
        queued, quota, usage = admitted.keys
        tag = yield Script("admit", [queued], [admitted.policy, job_id, quota, usage],
                           job_rescue(job_id, session_id, tenant))
        return int(tag)

    def _queued(self, session_id: str) -> str:
        return self.layout.tenant_queued(self.layout.resolve(session_id)[0])

    def enqueue_script(self, session_id: str, kind: JobKind | str,
                       reason: CompactReason | str | None, instructions: str | None,
                       target_id: str | None, broker_db: int | None = None,
                       context_window: int | None = None,
                       agent: AgentSettings | None = None) -> EnqueueCall:
        """enqueue.lua's call for a new job (``broker_db``: the broker is this Redis, that
        database: the script places the task message too)."""
        keys, args, route = enqueue_call(self.layout, self.settings, session_id, kind, reason,
                                         instructions, target_id, broker_db, context_window,
                                         agent)
        rescue = job_rescue("", session_id, self.layout.resolve(session_id)[0])
        return EnqueueCall(Script("enqueue", keys, args, rescue), route)

    def cancel_flow(self, job_id: str) -> Flow[JobState]:
        record = yield from get_record(self.layout, job_id)
        if record.state.terminal:
            return record.state
        text = job_error_text(record.kind, JobState.CANCELLED)
        event = JobEvent.completion(record, JobState.CANCELLED, error=text)
        keys, args = finish_call(self.layout, self.settings, job_id, JobState.CANCELLED, event,
                                 "cancel", ["error", text])
        changed, before, _ = yield Script("finish", keys, args, job_rescue(job_id))
        if int(changed):
            yield global_copy(self.layout, self.settings, event)
            if not self.settings.tenant_inbox:  # (else the workers' sweep gives it back)
                yield release(self.layout, job_id)  # the model budget it held
            return JobState.CANCELLED
        return JobState(before)


class JobStore(JobFlows):
    """Job records for one Redis (``client`` must decode responses)."""

    def __init__(self, client: redis.Redis[str], settings: ClientSettings | None = None,
                 layout: KeyLayout | None = None) -> None:
        super().__init__(settings, layout)
        self.redis = client
        self._io = SyncShell(client)

    def enqueue(self, session_id: str, kind: JobKind | str, *,
                reason: CompactReason | str | None = None, instructions: str | None = None,
                target_id: str | None = None, broker_db: int | None = None,
                context_window: int | None = None,
                agent: AgentSettings | None = None) -> EnqueueResult:
        """Create a queued job record, or return the in-flight one of the same kind (coalesced).

        A more urgent compaction than the queued one upgrades it (``upgraded``: re-send it on
        ``result.route``). Instructions join a queued job that has none; other instructions, a
        running job asked for instructions, or a branch summary to another target raise
        :class:`JobConflictError`. A missing session or target raises before anything is
        written. With ``broker_db`` the script also pushes the task message (``pushed``).
        ``context_window`` (the agent's) is stored on a new record for the loop guard, and
        ``agent`` (its compaction settings) for the worker's plan.
        """
        return self._io.run(self.enqueue_flow(session_id, kind, reason, instructions, target_id,
                                              broker_db, context_window, check_agent(agent)))

    def get(self, job_id: str) -> JobRecord:
        return self._io.run(get_record(self.layout, job_id))

    def request_cancel(self, job_id: str) -> JobState:
        """Cancel a queued job at once; ask a running one to stop. Returns the state now:
        ``cancelled``, ``running`` (the worker sees the flag and stops), or the state the job
        had already ended in."""
        return self._io.run(self.cancel_flow(job_id))

    def finish(self, job_id: str, state: JobState | str, *, event: JobEvent | None = None,
               record: JobRecord | None = None, **result: Any) -> bool:
        """End the job once (see the module doc). ``result``: ``entry`` (dict), ``result_entry_id``,
        ``error``, ``model``, ``usage`` (TokenUsage, a mapping or the model layer's Usage),
        ``result`` (prune: PruneResult fields), plus event-only fields (``tokens_before``,
        ``tokens_after``, ``duration_ms``, ``old_leaf_id``, ``new_leaf_id``, ...) used when
        ``event`` is not given. Returns True if this call ended the job."""
        return self._io.run(finish_job(self.layout, self.settings, job_id, state, event,
                                       record, result))


class AsyncJobStore(JobFlows):
    """:class:`JobStore` for asyncio: the same operations, awaited."""

    def __init__(self, client: redis.asyncio.Redis[str], settings: ClientSettings | None = None,
                 layout: KeyLayout | None = None) -> None:
        super().__init__(settings, layout)
        self.redis = client
        self._io = AsyncShell(client)

    async def enqueue(self, session_id: str, kind: JobKind | str, *,
                      reason: CompactReason | str | None = None, instructions: str | None = None,
                      target_id: str | None = None, broker_db: int | None = None,
                      context_window: int | None = None,
                      agent: AgentSettings | None = None) -> EnqueueResult:
        return await self._io.run(self.enqueue_flow(session_id, kind, reason, instructions,
                                                    target_id, broker_db, context_window,
                                                    check_agent(agent)))

    async def get(self, job_id: str) -> JobRecord:
        return await self._io.run(get_record(self.layout, job_id))

    async def request_cancel(self, job_id: str) -> JobState:
        return await self._io.run(self.cancel_flow(job_id))

    async def finish(self, job_id: str, state: JobState | str, *, event: JobEvent | None = None,
                     record: JobRecord | None = None, **result: Any) -> bool:
        return await self._io.run(finish_job(self.layout, self.settings, job_id, state, event,
                                             record, result))
