"""One delivery of one job, end to end: lease → run → exactly one terminal state and event."""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from api_client.contract.errors import (
    CompactionLoopError,
    CompactorError,
    PromptTooLargeError,
    QuotaExceededError,
)
from api_client.contract.job_enums import CompactReason, EventType, JobKind, JobState
from api_client.contract.keys import split_job_id, tenant_of_job
from api_client.contract.redaction import redact_secrets
from api_client.contract.redis_conn import storage_full
from api_client.contract.reservations import refusal_result
from api_client.contract.wire import JobEvent, JobRecord, job_error_text
from worker.observability import metrics
from worker.service._branch_job import run_branch
from worker.service._compact_job import run_compact
from worker.service._control import JobControl
from worker.service._delivery_start import begin
from worker.service._job_context import JobContext, JobSuccess
from worker.service._job_stops import (
    STORAGE_FULL,
    TRANSIENT,
    WAIT_FOR_REDIS,
    JobCancelled,
    JobStopped,
    LeaseHeldError,
    LeaseLostError,
)
from worker.service._model_budget import Bill, account, bill, check_budget, ended, job_spend
from worker.service._prune_job import run_prune
from worker.service._speculative import count_discarded, run_speculative
from worker.service._summarize_job import run_summarize
from worker.service.failure_causes import failure_cause
from worker.service.ports import Runtime
from worker.store.job_start import JobStart
from worker.store.leases import LeaseOutcome

__all__ = ["JobOutcome", "run_job"]

log = logging.getLogger("worker.service")

_LOCAL_POLL_S = 0.1

HANDLERS: Mapping[JobKind, Callable[[JobContext], JobSuccess]] = {
    JobKind.COMPACT: run_compact,
    JobKind.PRUNE: run_prune,
    JobKind.BRANCH_SUMMARY: run_branch,
    JobKind.SUMMARIZE: run_summarize,
}


def _handler(record: JobRecord) -> Callable[[JobContext], JobSuccess]:
    if record.reason is CompactReason.SPECULATIVE:
        return run_speculative
    count_discarded(record)
    return HANDLERS[record.kind]


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """What this delivery did. ``state``: a terminal job state, ``duplicate`` (the job had
    ended already), ``abandoned`` (another worker took it over) or ``deferred`` (its tenant
    ran ``max_running`` jobs already: still queued, sent again)."""

    job_id: str
    state: str
    entry_id: str | None = None
    error: str | None = None
    # What Flower shows on the task's page (its result): the request and who answered it.
    reason: str | None = None
    model: str | None = None
    cause: str | None = None  # why it failed (worker.service.failure_causes)

    def to_json(self) -> dict[str, Any]:
        shown = {"reason": self.reason, "model": self.model, "cause": self.cause}
        return {"jobId": self.job_id, "state": self.state, "entryId": self.entry_id,
                "error": self.error, **{k: v for k, v in shown.items() if v is not None}}


def run_job(rt: Runtime, job_id: str) -> JobOutcome:
    """Run ``job_id`` if no other worker does. Raises :class:`LeaseHeldError` when one does, and
    the transient Redis errors (for a Celery retry) after letting go of the lease."""
    split_job_id(job_id)
    # One owner per delivery, not per process: two deliveries of one job on the same worker (a
    # retry and a takeover message, say) must not both hold the lease and run the model.
    owner = f"{rt.worker_id}/{secrets.token_hex(4)}"
    try:
        start = begin(rt, job_id, owner)
        if start.lease is LeaseOutcome.HELD:
            start = _after_local_run(rt, job_id, owner)
        if start.lease is LeaseOutcome.FINISHED:
            return JobOutcome(job_id, "duplicate")
        if start.lease is LeaseOutcome.HELD:
            raise LeaseHeldError(job_id)
        return _run_started(rt, job_id, owner, start)
    except WAIT_FOR_REDIS:
        # (A start whose reply was lost may hold it: one step took the lease and the rest.)
        try:
            rt.jobs.release_lease(job_id, owner)
        except WAIT_FOR_REDIS as err:  # expires on its own
            log.debug("job %s: lease not released: %s", job_id, err)
        raise


def _after_local_run(rt: Runtime, job_id: str, owner: str) -> JobStart:
    """Another delivery in this very process runs the job (a duplicate message): wait for it to
    end here, then start again (usually ``FINISHED``: this delivery is the duplicate). A holder
    elsewhere is left to the retry or the sweep (``HELD``)."""
    local = f"{rt.worker_id}/"
    holder = rt.jobs.lease_holder(job_id)
    if not (holder and holder.startswith(local)):
        return JobStart(LeaseOutcome.HELD)
    deadline = rt.clock.monotonic() + rt.settings.job_deadline_s
    while holder and holder.startswith(local):
        if rt.clock.monotonic() > deadline:
            return JobStart(LeaseOutcome.HELD)
        time.sleep(_LOCAL_POLL_S)
        holder = rt.jobs.lease_holder(job_id)
    return begin(rt, job_id, owner)


def _run_started(rt: Runtime, job_id: str, owner: str, start: JobStart) -> JobOutcome:
    """Within its tenant's max_running cap (else put back, still queued), the job runs."""
    if start.deferred:
        log.info("job %s: its tenant runs max_running jobs already; put back", job_id)
        metrics.observe_tenant_deferred(tenant_of_job(job_id))
        return JobOutcome(job_id, "deferred", cause="max_running")
    try:
        return _start(rt, job_id, owner, start)
    finally:
        if rt.slots is not None:
            rt.slots.release(job_id)


def _start(rt: Runtime, job_id: str, owner: str, start: JobStart) -> JobOutcome:
    record = start.record  # the record as it now is, running
    if record is None:
        return JobOutcome(job_id, "duplicate")
    attempt = record.attempts
    log.info("job %s (%s) attempt %d started", job_id, record.kind.value, attempt)
    metrics.observe_started(record.kind.value, record.reason, attempt, record.created_at,
                            record.started_at)
    s = rt.settings
    with JobControl(rt.jobs, job_id, owner, deadline_s=s.job_deadline_s,
                    lease_ttl_s=s.lease_ttl_s, clock=rt.clock, flags=rt.cancel_flags,
                    cancel_requested=record.cancel_requested,
                    heartbeats=rt.heartbeats) as control:
        ctx = JobContext(rt, record, control, rt.new_summarizer(), budget=start.budget,
                         start_published=start.start_event, first_read=start.first_read,
                         may_reserve=start.may_reserve)
        try:
            success = _earlier_effect(ctx) or _run(ctx)
        except LeaseLostError:
            return _abandoned(ctx)
        except JobStopped as stop:
            return _stopped(ctx, stop)
        except TRANSIENT:
            raise
        except STORAGE_FULL as err:
            # A full Redis refused the commit (every other write of a job is waited out or
            # dropped): the session is unchanged; the failure is recorded once memory is back.
            return _fail(ctx, str(storage_full(err, "the commit")), cause="storage")
        except CompactionLoopError as err:  # the client raises it again from loopGuard
            return _fail(ctx, str(err), result={"loopGuard": err.to_result()},
                         cause="loop_guard")
        except CompactorError as err:
            # A summarizer stopped by the token raises its own error: report the real reason.
            refused = (refusal_result(err)
                       if isinstance(err, QuotaExceededError | PromptTooLargeError) else None)
            return (_stopped(ctx, control.stop_reason) if control.stop_reason
                    else _fail(ctx, str(err), refused, cause=failure_cause(err)))
        except Exception as err:  # a bug must still end the job, or it stays "running"
            log.exception("job %s: unexpected error", job_id)
            # The record and events are visible to platforms: name the error type only, the
            # text may quote session content (the log above keeps the details for operators).
            return _fail(ctx, f"internal error ({type(err).__name__}); see the worker log for "
                              f"job {job_id}", cause="internal")
    return _succeed(ctx, success)


def _run(ctx: JobContext) -> JobSuccess:
    """The tenant's model budget first (it may put the deterministic summarizer in the model's
    place, or refuse the job), then the job's kind."""
    check_budget(ctx)
    _report_progress(ctx)
    return _handler(ctx.record)(ctx)


def _report_progress(ctx: JobContext) -> None:
    """A job of many model calls (a long session in chunks) says where it is: one
    ``model_progress`` event per answered call, "call i of about n"."""
    if not hasattr(ctx.summarizer, "progress"):
        return  # a summarizer of its own (tests, hooks) reports nothing

    def progress(call: int, calls: int, candidate: str) -> None:
        ctx.publish(EventType.MODEL_PROGRESS,
                    result={"call": call, "calls": calls, "candidate": candidate})

    ctx.summarizer.progress = progress


def _observed(ctx: JobContext, outcome: JobOutcome) -> JobOutcome:
    metrics.observe_job(ctx.record.kind.value, ctx.record.reason, outcome.state,
                        ctx.control.elapsed_ms() / 1000)
    return outcome


def _earlier_effect(ctx: JobContext) -> JobSuccess | None:
    """An earlier delivery committed but died before finishing: finish with its result. The
    marker is the record's ``effect`` (the start read the record). A first attempt has no
    earlier delivery (each start counts one; the commit scripts check the effect again in any
    case); a redelivery without it may follow a worker of an older version, which kept the
    marker in the session's ``effects`` hash (read only then: docs/recovery.md)."""
    if ctx.record.attempts <= 1:
        return None
    effect = ctx.record.effect
    if effect is None:
        effect = ctx.rt.commits.effect(ctx.job_id)
    if effect is None:
        return None
    log.info("job %s: already committed by an earlier delivery (entry %r)", ctx.job_id, effect)
    result = dict(ctx.record.result or {})
    entry = ctx.rt.commits.entry(ctx.session_id, effect) if effect else None
    models = result.get("models") or [None]
    event = {"result": result, "tokens_before": result.get("tokensBefore"),
             "tokens_after": result.get("tokensAfter"), "old_leaf_id": result.get("oldLeafId"),
             "new_leaf_id": result.get("newLeafId")}
    return JobSuccess(entry=entry, result=result, model=models[0], event=event)


def _succeed(ctx: JobContext, success: JobSuccess) -> JobOutcome:
    owed = bill(ctx, success.draft_cost_usd)
    costs = owed.costs
    fields = {k: v for k, v in success.event.items() if v is not None}
    result = success.result
    if ctx.over_budget is not None:  # the record and the event say who summarised, and why
        result = fields["result"] = {**result, "overBudget": ctx.over_budget}
    event = JobEvent.completion(ctx.record, JobState.SUCCEEDED, entry=success.entry,
                                model=success.model, duration_ms=ctx.control.elapsed_ms(),
                                draft_usage=success.draft_usage, **costs, **fields)
    _end(ctx, owed, JobState.SUCCEEDED, event, success.announce, entry=success.entry,
         model=success.model, usage=success.usage, draft_usage=success.draft_usage,
         result=result)
    before, after = success.event.get("tokens_before"), success.event.get("tokens_after")
    saved = (before - after if isinstance(before, int) and isinstance(after, int)
             else (success.result or {}).get("tokensSaved"))  # a prune job says it itself
    if isinstance(saved, int):
        metrics.observe_tokens_saved(ctx.record.kind.value, saved)
    entry_id = success.entry.get("id") if success.entry else None
    log.info("job %s succeeded in %d ms (entry %s)", ctx.job_id, ctx.control.elapsed_ms(), entry_id)
    return _observed(ctx, JobOutcome(ctx.job_id, JobState.SUCCEEDED.value, entry_id,
                                     reason=_reason(ctx), model=success.model))


def _error_text(record: JobRecord, message: str) -> str:
    # Every client reads the record and the events: no credential a hook or Redis quoted.
    return job_error_text(record.kind, JobState.FAILED, record.reason, redact_secrets(message))


def _fail(ctx: JobContext, message: str, result: dict[str, Any] | None = None, *,
          cause: str = "other") -> JobOutcome:
    error = _error_text(ctx.record, message)
    owed = bill(ctx)  # a job that fails after its model calls still cost them
    costs = owed.costs
    event = JobEvent.completion(ctx.record, JobState.FAILED, error=error, result=result,
                                duration_ms=ctx.control.elapsed_ms(), **costs)
    extra: dict[str, Any] = {} if result is None else {"result": result}
    _end(ctx, owed, JobState.FAILED, event, error=error, **extra)
    log.info("job %s failed (%s): %s", ctx.job_id, cause, error)
    metrics.observe_failure(ctx.record.kind.value, cause)
    return _observed(ctx, JobOutcome(ctx.job_id, JobState.FAILED.value, error=error,
                                     reason=_reason(ctx), cause=cause))


def _stopped(ctx: JobContext, stop: JobStopped) -> JobOutcome:
    if isinstance(stop, LeaseLostError):
        # The summarizer saw the token turn (it raises its own error): the job now belongs to
        # the worker holding the lease; ending it here would fail that worker's run.
        return _abandoned(ctx)
    if not isinstance(stop, JobCancelled):
        return _fail(ctx, str(stop), cause=failure_cause(stop))
    text = job_error_text(ctx.record.kind, JobState.CANCELLED)
    owed = bill(ctx)
    costs = owed.costs
    event = JobEvent.completion(ctx.record, JobState.CANCELLED, error=text, aborted=True,
                                duration_ms=ctx.control.elapsed_ms(), **costs)
    _end(ctx, owed, JobState.CANCELLED, event, error=text)
    log.info("job %s cancelled", ctx.job_id)
    metrics.observe_failure(ctx.record.kind.value, "cancelled")
    return _observed(ctx, JobOutcome(ctx.job_id, JobState.CANCELLED.value, error=text,
                                     reason=_reason(ctx), cause="cancelled"))


def _end(ctx: JobContext, owed: Bill, state: JobState, event: JobEvent,
         announce: tuple[JobEvent, ...] = (), **fields: Any) -> None:
    """End the job as ``state`` with its completion ``event`` and record ``fields``: what the
    delivery owes (``owed``) goes with it (:func:`ended`)."""
    ended(ctx, owed, lambda: ctx.rt.jobs.finish(
        ctx.job_id, state, event=event, **fields, **owed.costs,
        **_spend(ctx, owed, announce)))


def _spend(ctx: JobContext, owed: Bill, announce: tuple[JobEvent, ...] = ()) -> dict[str, Any]:
    """``finish``'s ``spend`` and ``announce`` when the end writes them (a store of one step:
    ``JobContext.announce``), and ``release=False`` when nothing was reserved for the job (its
    start saw no daily budget: ``JobContext.may_reserve``), else nothing."""
    extra: dict[str, Any] = {} if owed.spend is None else {"spend": owed.spend}
    if not ctx.may_reserve:
        extra["release"] = False
    return {**extra, "announce": announce} if announce else extra


def _abandoned(ctx: JobContext) -> JobOutcome:
    """Another worker took the job over: this delivery stops without ending it; what its
    model calls cost is its tenant's all the same."""
    log.warning("job %s: taken over by another worker; this delivery stops", ctx.job_id)
    account(ctx, job_spend(ctx), ended=False)
    return JobOutcome(ctx.job_id, "abandoned")


def _reason(ctx: JobContext) -> str | None:
    return ctx.record.reason.value if ctx.record.reason else None
