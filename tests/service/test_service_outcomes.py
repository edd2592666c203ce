"""Every outcome ``run_job`` maps, on in-memory ports (tests/service/service_fakes.py).

One row per situation: how the world is set up (scripted commits, leases, cancel flag, hooks,
what the model does) and what the delivery must end with: its state, the error text a platform
reads, whether the model was called and something committed, and the events on the way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from service.service_fakes import JOB_ID, World, conversation, world

from api_client.contract.job_enums import CompactReason, EventType, JobKind
from api_client.contract.session.context import build_session_context
from helpers.sessions import TS, chain
from worker.hooks import BeforeCompactResult, BeforeTreeResult
from worker.llm.errors import ModelCallError, ModelCancelledError
from worker.service import LeaseHeldError, run_job
from worker.store import CommitStatus
from worker.store.leases import LeaseOutcome
from worker.summary_requests import CancelToken, SummaryRequest

STALE4 = [CommitStatus.STALE] * 4  # stale_replans = 3: four snapshots, then the job fails
THRESHOLD, MANUAL, OVERFLOW = CompactReason.THRESHOLD, CompactReason.MANUAL, CompactReason.OVERFLOW
INTERNAL = f"internal error (RuntimeError); see the worker log for job {JOB_ID}"


def _fails(text: str) -> Callable[[World], None]:
    def setup(w: World) -> None:
        def behaviour(request: SummaryRequest, cancel: CancelToken | None) -> str:
            raise ModelCallError(text)

        w.summarizer.behaviour = behaviour

    return setup


def _crashes(w: World) -> None:
    def behaviour(request: SummaryRequest, cancel: CancelToken | None) -> str:
        raise RuntimeError("a bug quoting session text: secret")

    w.summarizer.behaviour = behaviour


def _cancel_before(w: World) -> None:
    w.jobs.cancel_requested = True


def _cancel_during_call(w: World) -> None:
    """The platform cancels while the model runs; the summarizer sees the token and stops."""
    def behaviour(request: SummaryRequest, cancel: CancelToken | None) -> str:
        w.jobs.cancel_requested = True
        w.clock.advance(0.5)  # past the token's poll interval
        assert cancel is not None and cancel.is_cancelled()
        raise ModelCancelledError()

    w.summarizer.behaviour = behaviour


def _cancel_during_call_answered(w: World) -> None:
    """Cancelled during the call, but the model answers anyway: nothing may be committed."""
    def behaviour(request: SummaryRequest, cancel: CancelToken | None) -> str:
        w.jobs.cancel_requested = True
        return "too late"

    w.summarizer.behaviour = behaviour


def _deadline_during_call(w: World) -> None:
    def behaviour(request: SummaryRequest, cancel: CancelToken | None) -> str:
        w.clock.advance(w.rt.settings.job_deadline_s + 1)
        return "late summary"

    w.summarizer.behaviour = behaviour


def _lease_lost_during_call(w: World) -> None:
    """The heartbeat finds the lease expired and taken by another worker."""
    w.jobs.renew, w.jobs.reacquire = False, LeaseOutcome.HELD

    def behaviour(request: SummaryRequest, cancel: CancelToken | None) -> str:
        assert cancel is not None
        deadline = time.monotonic() + 10
        while not cancel.is_cancelled():
            assert time.monotonic() < deadline, "the heartbeat never noticed the lost lease"
            time.sleep(0.01)
        raise ModelCancelledError()

    w.summarizer.behaviour = behaviour


def _hook_cancels_compaction(w: World) -> None:
    w.hooks.before_compact_result = BeforeCompactResult(cancel=True)


def _hook_cancels_navigation(w: World) -> None:
    w.hooks.before_tree_result = BeforeTreeResult(cancel=True)


def _already_committed(w: World) -> None:
    """An earlier delivery started the job (its attempt 1) and committed entry e7."""
    w.commits.effects[JOB_ID] = "e7"
    w.jobs.record = w.jobs.record.model_copy(update={"attempts": 1})


def _lease_finished(w: World) -> None:
    w.jobs.lease = LeaseOutcome.FINISHED


def _record_finished(w: World) -> None:
    w.jobs.running = False


def _nothing(w: World) -> None:
    pass


@dataclass(frozen=True)
class Case:
    setup: Callable[[World], None]
    state: str
    error: str | None = None
    kind: JobKind = JobKind.COMPACT
    reason: CompactReason | None = THRESHOLD
    script: tuple[CommitStatus, ...] = ()
    model_calls: int | None = None  # None: not checked
    commits: tuple[str, ...] | None = None
    events: tuple[EventType, ...] | None = None
    entry_type: str | None = None
    options: dict[str, Any] = field(default_factory=dict)


START, STALE, COMPACTED = EventType.COMPACTION_START, EventType.STALE, EventType.SESSION_COMPACT
BRANCH = {"kind": JobKind.BRANCH_SUMMARY, "reason": None}

CASES = {
    # -- compaction ---------------------------------------------------------------------------
    "committed": Case(_nothing, "succeeded", model_calls=2, commits=("append_entry",),
                      events=(START, COMPACTED), entry_type="compaction"),
    "duplicate delivery: effect already recorded": Case(
        _already_committed, "succeeded", model_calls=0, commits=(), events=()),
    "duplicate delivery: the job had ended (lease)": Case(
        _lease_finished, "duplicate", model_calls=0, commits=(), events=()),
    "duplicate delivery: the job had ended (record)": Case(_record_finished, "duplicate",
                                                          model_calls=0, commits=(), events=()),
    "duplicate commit: another delivery committed meanwhile": Case(
        _nothing, "succeeded", script=(CommitStatus.DUPLICATE,), model_calls=2,
        commits=("append_entry",), events=(START, COMPACTED), entry_type="compaction"),
    "stale once, re-planned, committed": Case(
        _nothing, "succeeded", script=(CommitStatus.STALE,), model_calls=4,
        commits=("append_entry", "append_entry"), events=(START, STALE, COMPACTED)),
    "stale four times: gives up": Case(
        _nothing, "failed", script=tuple(STALE4), model_calls=8, commits=("append_entry",) * 4,
        events=(START, STALE, STALE, STALE, STALE),
        error="Auto-compaction failed: the session kept changing during the compaction: "
              "gave up after 4 snapshots"),
    "stale bound is the setting": Case(
        _nothing, "failed", script=(CommitStatus.STALE,) * 2, model_calls=4,
        commits=("append_entry",) * 2, options={"stale_replans": 1},
        error="Auto-compaction failed: the session kept changing during the compaction: "
              "gave up after 2 snapshots"),
    "cancelled before the model call": Case(_cancel_before, "cancelled", "Compaction cancelled",
                                            model_calls=0, commits=(), events=(START,)),
    "cancelled during the model call": Case(_cancel_during_call, "cancelled",
                                            "Compaction cancelled", commits=(), events=(START,)),
    "cancelled during the call, answered anyway": Case(
        _cancel_during_call_answered, "cancelled", "Compaction cancelled", commits=()),
    "cancelled as the commit ran": Case(_nothing, "cancelled", "Compaction cancelled",
                                        script=(CommitStatus.CANCELLED,),
                                        commits=("append_entry",)),
    "lease lost: the job finished elsewhere at commit": Case(
        _nothing, "abandoned", script=(CommitStatus.FINISHED,), commits=("append_entry",)),
    "lease lost during the model call": Case(_lease_lost_during_call, "abandoned", commits=(),
                                             options={"lease_ttl_s": 0.03}),
    "deadline exceeded during the model call": Case(
        _deadline_during_call, "failed", "Auto-compaction failed: job deadline of 300 s exceeded",
        commits=()),
    "hook cancels": Case(_hook_cancels_compaction, "cancelled", "Compaction cancelled",
                         model_calls=0, commits=()),
    "model fails, manual": Case(_fails("model down"), "failed", "Summarization failed: model down",
                                reason=MANUAL, commits=()),
    "model fails, threshold": Case(_fails("model down"), "failed",
                                   "Auto-compaction failed: Summarization failed: model down",
                                   commits=()),
    "model fails, overflow": Case(
        _fails("model down"), "failed",
        "Context overflow recovery failed: Summarization failed: model down", reason=OVERFLOW),
    "unexpected error: only its type is reported": Case(
        _crashes, "failed", f"Auto-compaction failed: {INTERNAL}", commits=()),
    "unexpected error, manual": Case(_crashes, "failed", INTERNAL, reason=MANUAL),
    # -- branch summary -----------------------------------------------------------------------
    "branch: committed": Case(_nothing, "succeeded", **BRANCH, model_calls=1, commits=("branch",),
                              events=(EventType.BRANCH_SUMMARY,), entry_type="branch_summary"),
    "branch: cancelled before the model call": Case(_cancel_before, "cancelled",
                                                    "Branch summary cancelled", **BRANCH,
                                                    model_calls=0, commits=()),
    "branch: cancelled during the model call": Case(_cancel_during_call, "cancelled",
                                                    "Branch summary cancelled", **BRANCH,
                                                    commits=()),
    "branch: hook cancels": Case(_hook_cancels_navigation, "cancelled", "Branch summary cancelled",
                                 **BRANCH, model_calls=0, commits=()),
    "branch: model fails (no auto prefix)": Case(_fails("model down"), "failed",
                                                 "Summarization failed: model down", **BRANCH),
    "branch: stale four times": Case(
        _nothing, "failed", **BRANCH, script=tuple(STALE4), commits=("branch",) * 4,
        error="the session kept changing during the branch summary: gave up after 4 snapshots"),
    "branch: deadline exceeded": Case(_deadline_during_call, "failed",
                                      "job deadline of 300 s exceeded", **BRANCH, commits=()),
    # -- prune --------------------------------------------------------------------------------
    "prune: nothing to prune": Case(_nothing, "succeeded", kind=JobKind.PRUNE, reason=None,
                                    model_calls=0, commits=()),
    "prune: cancelled": Case(_cancel_before, "cancelled", "Compaction cancelled",
                             kind=JobKind.PRUNE, reason=None, commits=()),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_run_job_maps_the_outcome(case: Case) -> None:
    w = world(kind=case.kind, reason=case.reason, script=case.script,
              target_id="e1" if case.kind is JobKind.BRANCH_SUMMARY else None, **case.options)
    case.setup(w)
    outcome = run_job(w.rt, JOB_ID)
    assert (outcome.state, outcome.error) == (case.state, case.error)
    if case.model_calls is not None:
        assert len(w.summarizer.requests) == case.model_calls
    if case.commits is not None:
        assert tuple(w.commits.calls) == case.commits
    if case.events is not None:
        assert tuple(e.type for e in w.jobs.published) == case.events
    if case.state in ("abandoned", "duplicate"):
        assert w.jobs.finished == []  # the job is someone else's, or over: no second ending
    else:
        [(state, event, fields)] = w.jobs.finished  # exactly one terminal state and event
        assert state.value == case.state and event is not None
        assert event.error == case.error
        assert fields.get("error") == case.error
    if case.entry_type is not None:
        assert outcome.entry_id is not None
        assert w.sessions.session.tree().by_id[outcome.entry_id].raw["type"] == case.entry_type
        assert w.sessions.leaf == outcome.entry_id


def test_a_recorded_effect_finishes_with_that_entry_without_a_model_call() -> None:
    w = world()
    _already_committed(w)
    outcome = run_job(w.rt, JOB_ID)
    assert outcome.entry_id == "e7" and w.summarizer.requests == []
    [(_, _, fields)] = w.jobs.finished
    assert fields["entry"]["id"] == "e7"


def test_a_redelivery_ends_as_the_effect_its_started_record_carries() -> None:
    """The marker is the record's ``effect`` (the start returned the record): a redelivery after
    a commit ends with that entry, no model call and no read of the older workers' marker."""
    w = world()
    w.jobs.record = w.jobs.record.model_copy(update={"attempts": 1, "effect": "e7"})
    looked: list[str] = []
    w.commits.effect = lambda job_id: looked.append(job_id) or None  # type: ignore[method-assign]
    outcome = run_job(w.rt, JOB_ID)
    assert outcome.state == "succeeded" and outcome.entry_id == "e7"
    assert w.summarizer.requests == [] and looked == []
    [(_, _, fields)] = w.jobs.finished
    assert fields["entry"]["id"] == "e7"


def test_where_the_end_is_one_step_the_commits_event_goes_with_it() -> None:
    """One Redis (``ends_in_one_step``): the job hands ``session_compact`` to its end, which
    writes it before the completion event in the same round trip; nothing published apart."""
    w = world()
    w.jobs.ends_in_one_step = True
    outcome = run_job(w.rt, JOB_ID)
    assert outcome.state == "succeeded"
    assert COMPACTED not in w.jobs.event_types
    [(_, _, fields)] = w.jobs.finished
    [told] = fields["announce"]
    assert told.type is COMPACTED and told.entry is not None
    assert told.entry["id"] == outcome.entry_id


def test_a_first_attempt_does_not_look_for_an_earlier_effect() -> None:
    """No delivery before the first: its start reads no effect (the commit checks it)."""
    w = world()
    looked: list[str] = []
    w.commits.effect = lambda job_id: looked.append(job_id) or None  # type: ignore[method-assign]
    run_job(w.rt, JOB_ID)
    assert looked == [] and w.jobs.record.attempts == 1
    _already_committed(w)
    w.commits.effect = lambda job_id: looked.append(job_id) or "e7"  # type: ignore[method-assign]
    assert run_job(w.rt, JOB_ID).entry_id == "e7" and looked == [JOB_ID]


def test_a_cancel_the_started_record_carries_stops_the_job_before_any_model_call() -> None:
    """The flag the start read with the record (an earlier delivery's cancel request) is
    seen at once, not at the cancel watch's first poll."""
    w = world()
    w.jobs.record = w.jobs.record.model_copy(update={"cancel_requested": True})
    assert not w.jobs.cancel_requested  # no poll would see it
    assert run_job(w.rt, JOB_ID).state == "cancelled" and w.summarizer.requests == []


def test_only_a_deliverys_first_event_sets_the_streams_ttl() -> None:
    """The events after the first leave the stream's TTL (and the retention) to it: two XADDs
    each instead of five commands."""
    w = world()
    run_job(w.rt, JOB_ID)
    assert [e.type.value for e in w.jobs.published] == ["compaction_start", "session_compact"]
    assert w.jobs.ttl_set == [False, True]


def test_a_committed_compaction_reports_tokens_and_the_model() -> None:
    w = world()
    outcome = run_job(w.rt, JOB_ID)
    [(_, event, fields)] = w.jobs.finished
    entry = w.sessions.session.tree().by_id[str(outcome.entry_id)].raw
    assert entry["firstKeptEntryId"] == "e6"  # 150 recent tokens: the last user turn is kept
    assert entry["summary"].startswith("summary of history")
    assert fields["model"] == "openai/model-a"
    assert fields["result"]["tokensBefore"] == entry["tokensBefore"]
    assert event is not None and event.tokens_before == entry["tokensBefore"]
    assert event.tokens_after is not None and event.tokens_after > 0
    # What the session's context now holds: the summary and the kept messages, counted.
    context = build_session_context(w.sessions.session.tree(), str(outcome.entry_id))
    assert event.tokens_after == sum(w.rt.tokenizer.count(m.message) for m in context.messages)
    assert context.messages[0].message["role"] == "compactionSummary"
    assert w.hooks.notified == ["compact_done"]


@pytest.mark.parametrize(
    ("reason", "state", "error"),
    [
        (MANUAL, "failed", "Already compacted"),
        (THRESHOLD, "succeeded", None),  # automatic compaction ends quietly
        (OVERFLOW, "succeeded", None),
    ],
)
def test_nothing_to_compact(reason: CompactReason, state: str, error: str | None) -> None:
    compacted = {"type": "compaction", "id": "e8", "parentId": "e7", "timestamp": TS,
                 "summary": "s", "firstKeptEntryId": "e6", "tokensBefore": 800}
    w = world(reason=reason, entries=[*conversation(), *chain(compacted)])
    outcome = run_job(w.rt, JOB_ID)
    assert (outcome.state, outcome.error) == (state, error)
    assert w.commits.calls == [] and w.summarizer.requests == []


def test_navigating_to_the_leaf_itself_changes_nothing() -> None:
    w = world(kind=JobKind.BRANCH_SUMMARY, reason=None, target_id="e7")
    outcome = run_job(w.rt, JOB_ID)
    assert outcome.state == "succeeded" and w.commits.calls == [] and w.hooks.notified == []


def test_a_lease_held_elsewhere_is_raised_for_a_later_look() -> None:
    w = world()
    w.jobs.lease = LeaseOutcome.HELD
    with pytest.raises(LeaseHeldError):
        run_job(w.rt, JOB_ID)
    assert w.jobs.finished == [] and w.sessions.loads == 0


def test_redis_down_lets_go_of_the_lease_and_raises_for_a_retry() -> None:
    w = world()
    w.sessions.fail_with = redis.ConnectionError("down")
    with pytest.raises(redis.ConnectionError):
        run_job(w.rt, JOB_ID)
    assert w.jobs.released == 1 and w.jobs.finished == []


@pytest.mark.parametrize("kind", [JobKind.COMPACT, JobKind.BRANCH_SUMMARY])
def test_a_stop_after_the_model_never_commits(kind: JobKind) -> None:
    w = world(kind=kind, reason=THRESHOLD if kind is JobKind.COMPACT else None, target_id="e1")
    _cancel_during_call_answered(w)
    run_job(w.rt, JOB_ID)
    assert w.commits.calls == [] and len(w.sessions.session.entries) == 8
