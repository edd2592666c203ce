"""What a client call does, written once as flows (no I/O): enqueue, compact (from a draft when
one is valid), observe, warm. :class:`~api_client.client.sync_client.CompactionClient` and
:class:`~api_client.client.async_client.AsyncCompactionClient` only run these flows on their
transport and wrap the jobs they name in handles.

Enqueue is one Lua call per broker kind (docs/storage.md "Enqueue"): on one Redis it admits,
records and indexes the job and, when the broker is that Redis, places the Celery task message
(whose only argument is the job id); a Redis broker of its own then gets the message in its
fair place (``place.lua``), RabbitMQ through kombu. A tenant on its own ACL user writes its
inbox in the same script. With Redis or the broker down the client raises
:class:`BrokerUnavailableError` within ``enqueue_timeout_s``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass

from api_client.client.draft_apply import (
    DraftOutcome,
    apply_draft,
    discard_note,
    refuse,
    uses_draft,
)
from api_client.client.jobs import EnqueueResult, JobFlows
from api_client.client.speculation import agent_view, look, near, next_step
from api_client.client.summaries import SummaryInput, summary_record
from api_client.client.thresholds import should_compact
from api_client.client.transport import BrokerMode, ClientFlow, OnBroker, Publish
from api_client.contract.admission import due_ms
from api_client.contract.agent_settings import AgentSettings
from api_client.contract.errors import (
    BrokerUnavailableError,
    CompactorError,
    QuotaExceededError,
    StorageFullError,
)
from api_client.contract.job_enums import CompactReason, JobKind, JobState
from api_client.contract.job_records import finish_job, get_record
from api_client.contract.keys import KeyLayout
from api_client.contract.lua_scripts import lua, script_names
from api_client.contract.redis_flows import Pipeline, Script, cmd
from api_client.contract.routing import DRAFT_APPLIED_ROUTE, Route, route_for
from api_client.contract.session.context import LlmContext, llm_context
from api_client.contract.settings import ClientSettings
from api_client.contract.snapshots import load_snapshot
from api_client.contract.task_messages import task_push
from api_client.contract.usage import DayUsage, last_days, read_usage

__all__ = ["GUARDED", "JobRef", "ObservePlan", "Orchestration", "Request"]

log = logging.getLogger("api_client.client")

# Counted and refused by the loop guard (docs/instant-compaction.md; manual never is).
GUARDED = (CompactReason.THRESHOLD, CompactReason.OVERFLOW)


@dataclass(frozen=True, slots=True)
class Request:
    kind: JobKind
    reason: CompactReason | str | None = None
    instructions: str | None = None
    target_id: str | None = None
    context_window: int | None = None
    agent: AgentSettings | None = None  # the agent's compaction settings (docs/compaction.md)


@dataclass(frozen=True, slots=True)
class JobRef:
    """A job a call enqueued, coalesced into or finished: what its handle is made of."""

    job_id: str
    session_id: str
    kind: JobKind
    coalesced: bool = False
    upgraded: bool = False
    since: str | None = None
    from_draft: bool = False  # finished on the spot by applying a speculative draft


@dataclass(frozen=True, slots=True)
class ObservePlan:
    """What observe did: ``none``, ``precompute`` or ``compact`` (see ``ObserveResult``)."""

    action: str
    job: JobRef | None = None
    draft_ready: bool = False


@dataclass(frozen=True, slots=True)
class _Tried:
    finished: str | None = None  # job id of a finished job: the applied draft, or a refusal
    from_draft: bool = False
    cause: str | None = None  # a discarded draft's cause worth reporting
    enqueued: EnqueueResult | None = None  # no draft: the job enqueued in the same script


def broker_down(err: BrokerUnavailableError) -> BrokerUnavailableError:
    return BrokerUnavailableError(str(err).replace("Redis unavailable", "broker unavailable", 1))


class Orchestration:
    """The client's calls as flows, for one settings object (thread-safe: no state)."""

    def __init__(self, settings: ClientSettings, layout: KeyLayout, broker: BrokerMode) -> None:
        self.settings = settings
        self.layout = layout
        self.broker = broker
        self.jobs = JobFlows(settings, layout)

    def compact(self, session_id: str, request: Request) -> ClientFlow[JobRef]:
        """Threshold/overflow first try the loop guard and a valid draft (with the enqueue in
        the same script on one Redis); else a plain enqueue."""
        tried = yield from self._attempt(session_id, request, time.perf_counter())
        if tried.finished is not None:
            if tried.from_draft:
                yield from self._notify_draft_applied(tried.finished)
            return JobRef(tried.finished, session_id, JobKind.COMPACT,
                          from_draft=tried.from_draft)
        return (yield from self.enqueue(session_id, request, tried.cause, tried.enqueued))

    def enqueue(self, session_id: str, request: Request, discarded: str | None = None,
                result: EnqueueResult | None = None) -> ClientFlow[JobRef]:
        if result is None:  # else compact_auto.lua enqueued it already
            result = yield from self.jobs.enqueue_flow(
                session_id, request.kind, request.reason, request.instructions,
                request.target_id, self.broker.inline_db, request.context_window, request.agent)
        if discarded:
            yield from discard_note(self.layout, self.settings, session_id, result.job_id,
                                    request.reason or CompactReason.MANUAL, discarded,
                                    created=result.outcome == "created")
        if result.must_send:
            try:
                yield from self._send(result.job_id, result.route, resend=result.upgraded,
                                      tag=result.tag)
            except BrokerUnavailableError as err:
                yield from self._unsent(result, err)
        return JobRef(result.job_id, session_id, request.kind, coalesced=result.coalesced,
                      upgraded=result.upgraded, since=result.since)

    def observe(self, session_id: str, context_tokens: int, context_window: int,
                agent: AgentSettings | None = None) -> ClientFlow[ObservePlan]:
        """Compact above the threshold (from a valid draft when there is one); below it start a
        draft when one is due (:mod:`api_client.client.speculation`), else nothing. With
        ``agent`` the threshold is the agent's (its reserve) and drafts are planned with it."""
        s = agent_view(self.settings, agent)
        if should_compact(context_tokens, context_window, s):
            job = yield from self.compact(session_id, Request(
                JobKind.COMPACT, CompactReason.THRESHOLD, context_window=context_window,
                agent=agent))
            return ObservePlan("compact", job)
        if not near(context_tokens, context_window, s):
            return ObservePlan("none")
        seen = yield from look(self.layout, s, session_id, context_tokens, context_window, agent)
        step = next_step(seen, context_tokens, context_window, s)
        if step == "ready":
            return ObservePlan("none", draft_ready=True)
        if step == "computing" and seen.inflight:
            return ObservePlan("precompute", JobRef(seen.inflight, session_id, JobKind.COMPACT,
                                                    coalesced=True))
        if step != "start":
            return ObservePlan("none")
        try:
            job = yield from self.compact(session_id, Request(
                JobKind.COMPACT, CompactReason.SPECULATIVE, context_window=context_window,
                agent=agent))
        except QuotaExceededError:
            # Drafts stop first: near its model budget, or at its queued-jobs quota, the tenant
            # gets no draft and compacts at the threshold as without speculation.
            return ObservePlan("none")
        return ObservePlan("precompute", job)

    def summarize(self, request: SummaryInput) -> ClientFlow[JobRef]:
        """A summarize job (api_client.client.summaries): indexed for the sweep, recorded, sent.
        No single flight: every request is a job of its own."""
        record = summary_record(self.layout, request, self.settings.max_prompt_tokens)
        route, key = route_for(JobKind.SUMMARIZE), self.layout.job(record.id).record
        tag = None
        if self.broker.name != "inbox":  # else the workers index and admit it
            # Indexed first, as enqueue does: a client that dies next leaves a job the sweep
            # finds.
            yield cmd("zadd", self.layout.jobs_due, {record.id: due_ms(self.settings)}, nx=True)
            # The tenant's quotas and fair order hold for summaries too (over budget: refused).
            tag = yield from self.jobs.admit_flow(record.session_id, JobKind.SUMMARIZE, None,
                                                  record.id, route, record.input)
        yield Pipeline((cmd("hset", key, mapping=record.to_redis()),
                        cmd("expire", key, self.settings.job_pending_ttl_s)))
        try:
            yield from self._send(record.id, route, tag=tag)
        except BrokerUnavailableError as err:
            yield from self._unsent(EnqueueResult(record.id, "created", JobState.QUEUED, "0-0",
                                                  route), err)
        # The job's stream is new: its completion event is the first entry after 0-0.
        return JobRef(record.id, record.session_id, JobKind.SUMMARIZE, since="0-0")

    def job(self, job_id: str) -> ClientFlow[JobRef]:
        record = yield from get_record(self.layout, job_id)
        return JobRef(record.id, record.session_id, record.kind)

    def context(self, session_id: str) -> ClientFlow[LlmContext]:
        snapshot = yield from load_snapshot(self.layout, session_id)
        return llm_context(snapshot.session.tree(), snapshot.leaf_id, revision=snapshot.revision)

    def usage(self, days: int) -> ClientFlow[list[DayUsage]]:
        """The tenant's model spend on each of the last ``days`` UTC days, today first: one
        round trip of reads (the workers write it)."""
        names = last_days(time.time(), days)
        return (yield from read_usage(self.layout, self.settings.tenant, names))

    @staticmethod
    def ping() -> ClientFlow[bool]:
        return bool((yield cmd("ping")))

    def warm(self) -> ClientFlow[None]:
        """Load every packaged script (and ``place.lua`` on a Redis broker of its own), so no
        first EVALSHA meets NOSCRIPT."""
        if self.broker.name == "redis":
            yield OnBroker(Pipeline((cmd("script_load", lua("place")),), transaction=False))
        loads = tuple(cmd("script_load", lua(name)) for name in script_names())
        if self.settings.redis_cluster:
            # A cluster pipeline refuses SCRIPT LOAD; a command of its own goes to every primary.
            # (Not `yield from loads`: the shell sends each reply in, and a tuple takes none.)
            for load in loads:  # noqa: UP028
                yield load
        else:
            yield Pipeline(loads, transaction=False)

    def _attempt(self, session_id: str, request: Request, started: float) -> ClientFlow[_Tried]:
        """The loop guard, the draft and — when no draft was there — the enqueue, in one round
        trip (automatic reasons only; ``compact_auto.lua``)."""
        if request.reason not in GUARDED:
            return _Tried()
        reason, db = CompactReason(request.reason), self.broker.inline_db
        # Combined on one Redis, where the enqueue script admits and indexes the job itself; on
        # a Cluster those keys lie in other slots, and the caller enqueues alone.
        job = None if self.settings.redis_cluster else self.jobs.enqueue_script(
            session_id, JobKind.COMPACT, reason, request.instructions, None, db,
            request.context_window, request.agent)
        outcome: DraftOutcome = yield from apply_draft(
            self.layout, self.settings, session_id, reason,
            use_draft=uses_draft(reason, request.instructions),
            context_window=request.context_window, started=started,
            then=None if job is None else job.script, agent=request.agent)
        if job is not None and outcome.status == "enqueued" and outcome.enqueue_reply:
            return _Tried(enqueued=self.jobs.enqueued(outcome.enqueue_reply, job.route, db))
        if outcome.status == "guarded" and outcome.guard_count is not None:
            job_id = yield from refuse(self.layout, self.settings, session_id, reason,
                                       outcome.guard_count, request.context_window,
                                       request.agent)
            return _Tried(finished=job_id)
        if not outcome.applied or outcome.job_id is None:
            return _Tried(cause=None if outcome.cause in (None, "nodraft") else outcome.cause)
        return _Tried(finished=outcome.job_id, from_draft=True)

    def _notify_draft_applied(self, job_id: str) -> ClientFlow[None]:
        """The session_compact hooks run on a worker; the entry is committed either way."""
        try:
            yield from self._send(job_id, DRAFT_APPLIED_ROUTE)
        except (BrokerUnavailableError, StorageFullError) as err:
            log.warning("draft applied for job %s; session_compact hooks not notified: %s",
                        job_id, err)

    def _send(self, job_id: str, route: Route, *, resend: bool = False,
              tag: int | None = None) -> ClientFlow[None]:
        """The task message: through kombu, or LPUSH (+ the task-sent event) to a Redis broker;
        with the fair order's ``tag`` into its place in the list (``place.lua``)."""
        if self.broker.name == "kombu":
            yield Publish(job_id, route, resend)
            return
        if self.broker.name == "inbox":
            # The tenant's inbox and its channel (docs/tenants.md): a worker admits the job
            # (quotas, fair order) and sends it. (A compaction's enqueue script writes it.)
            inbox = self.layout.tenant_inbox(self.settings.tenant)
            yield Pipeline((cmd("zadd", inbox, {job_id: int(time.time() * 1000)}),
                            cmd("publish", inbox, job_id)), transaction=False)
            return
        push = task_push(route.task, job_id, route.queue, route.priority,
                         task_id=f"{job_id}-p{route.priority}" if resend else None,
                         db=self.broker.db or 0, sent_event=self.settings.send_sent_event,
                         prefix=self.layout.broker)
        call: Pipeline | Script
        if tag is not None and not resend:
            call = Script("place", [push.queue_key, *self.layout.fair_index(route.queue,
                                                                           route.priority)],
                          [str(tag), job_id, push.message, str(self.settings.job_pending_ttl_s),
                           push.channel, push.event])
        else:
            calls = [cmd("lpush", push.queue_key, push.message)]
            if push.event:
                calls.append(cmd("publish", push.channel, push.event))
            call = Pipeline(tuple(calls), transaction=False)
        try:
            yield call if self.broker.name == "inline" else OnBroker(call)
        except BrokerUnavailableError as err:
            raise broker_down(err) from err

    def _unsent(self, result: EnqueueResult, err: BrokerUnavailableError) -> ClientFlow[None]:
        """The task could not be sent: an upgraded job keeps its first message (and its old
        priority); a new one is failed, so the next request does not coalesce into it."""
        if result.upgraded:
            log.warning("could not re-send upgraded job %s: %s", result.job_id, err)
            return
        with contextlib.suppress(CompactorError):
            yield from finish_job(self.layout, self.settings, result.job_id, JobState.FAILED,
                                  None, None, {"error": str(err)})
        raise err

