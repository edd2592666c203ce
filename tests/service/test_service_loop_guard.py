"""The loop guard on in-memory ports: ``ineffective`` flag, N automatic compactions per window.

The Redis counter (worker.store.compaction_counter) and a real worker:
tests/runtime/test_runtime_loop_guard.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from service.service_fakes import JOB_ID, World, world

from api_client import CompactionLoopError
from api_client.client.handles import outcome as handle_outcome
from api_client.contract.job_enums import CompactReason, EventType, JobState
from worker.service import run_job

THRESHOLD, MANUAL, OVERFLOW = CompactReason.THRESHOLD, CompactReason.MANUAL, CompactReason.OVERFLOW
WINDOW = 600.0


def _tokens_after(**settings: Any) -> int:
    w = world(fact_budget_tokens=0, **settings)
    run_job(w.rt, JOB_ID)
    [(_, _, fields)] = w.jobs.finished
    return int(fields["result"]["tokensAfter"])


# Summary + the kept turn of the 4-turn conversation (estimate tokens). No fact block: its size
# follows reserve_tokens, which the rows vary.
AFTER = _tokens_after()


@pytest.mark.parametrize(("reason", "window", "reserve", "share", "ineffective"), [
    # guard = share × (window - reserve); ineffective when the context after exceeds it
    (THRESHOLD, AFTER * 10, 0, 0.8, False),
    (THRESHOLD, AFTER + 100, 100, 0.8, True),                     # guard = 0.8 × AFTER
    (THRESHOLD, AFTER + 100, 100, 1.0, False),                    # guard = AFTER: not above
    (THRESHOLD, AFTER + 101, 0, 1.0, False),
    (THRESHOLD, AFTER * 2, 0, 0.5, False),                        # exactly at the guard
    (THRESHOLD, AFTER * 2 - 2, 0, 0.5, True),
    (OVERFLOW, AFTER + 100, 100, 0.8, True),
    (MANUAL, AFTER + 100, 100, 0.8, True),                        # flagged, never counted
])
def test_ineffective_flag(reason: CompactReason, window: int, reserve: int, share: float,
                          ineffective: bool) -> None:
    w = world(reason=reason, context_window=window, reserve_tokens=reserve,
              loop_guard_share=share, fact_budget_tokens=0)
    assert run_job(w.rt, JOB_ID).state == "succeeded"
    [(_, event, fields)] = w.jobs.finished
    assert event is not None and event.type is EventType.COMPACTION_END
    assert fields["result"]["tokensAfter"] == AFTER
    assert event.ineffective is ineffective
    assert fields["result"]["ineffective"] is ineffective
    assert event.result is not None and event.result["ineffective"] is ineffective


def test_nothing_to_compact_is_not_flagged() -> None:
    w = world(entries=[])
    run_job(w.rt, JOB_ID)
    [(_, event, fields)] = w.jobs.finished
    assert event is not None and event.ineffective is None
    assert "ineffective" not in fields["result"]


def _prior(w: World, ages: list[float]) -> None:
    """Automatic compactions of other jobs, committed ``age`` seconds ago."""
    now = w.clock.time()
    w.jobs.compactions.update({f"s1:{n:016x}": now - age for n, age in enumerate(ages, 1)})


@pytest.mark.parametrize(("reason", "ages", "limit", "tripped", "counted_after"), [
    (THRESHOLD, [], 3, False, 1),
    (THRESHOLD, [10, 20], 3, False, 3),                 # the third one in the window is allowed
    (THRESHOLD, [10, 20, 30], 3, True, 3),              # the fourth is not
    (OVERFLOW, [10, 20, 30], 3, True, 3),
    (THRESHOLD, [10, 20, 30], 4, False, 4),             # the limit is a setting
    (THRESHOLD, [10, 20, WINDOW + 1], 3, False, 3),     # one left the window: trimmed
    (THRESHOLD, [WINDOW + 1] * 5, 3, False, 1),         # the window passed: reset
    (MANUAL, [10, 20, 30], 3, False, 3),                # manual: never refused, never counted
    (MANUAL, [], 3, False, 0),
])
def test_loop_guard(reason: CompactReason, ages: list[float], limit: int, tripped: bool,
                    counted_after: int) -> None:
    w = world(reason=reason, loop_guard_max=limit, loop_guard_window_s=WINDOW)
    _prior(w, ages)
    before = list(w.sessions.session.entries)
    out = run_job(w.rt, JOB_ID)
    assert w.jobs.recent_compactions("s1", w.clock.time(), WINDOW) == counted_after
    [(state, event, fields)] = w.jobs.finished
    assert event is not None
    if not tripped:
        assert out.state == "succeeded" and len(w.summarizer.requests) > 0
        return
    count = len([a for a in ages if a <= WINDOW])
    assert out.state == "failed" and state is JobState.FAILED
    assert w.summarizer.requests == [] and w.commits.calls == []  # no model call, no commit
    assert w.sessions.session.entries == before
    prefix = "Auto-compaction failed" if reason is THRESHOLD else "Context overflow recovery failed"
    assert out.error == (f"{prefix}: compaction loop: session s1 had {count} automatic "
                         f"compactions within 600 s (limit {limit}); not calling the model again")
    assert event.error == out.error == fields["error"]
    guard = {"count": count, "limit": limit, "windowS": WINDOW}
    assert event.result == fields["result"] == {"loopGuard": guard}
    assert w.jobs.event_types == [EventType.COMPACTION_START]
    with pytest.raises(CompactionLoopError) as raised:  # what wait() raises from the record
        handle_outcome(event.kind, JOB_ID, JobState.FAILED, None, event.result, event.error)
    assert (raised.value.count, raised.value.limit, raised.value.window_s) == (count, limit, WINDOW)
    assert str(raised.value) == out.error and raised.value.job_id == JOB_ID


def test_trips_after_n_and_resets_after_the_window() -> None:
    """Jobs one after another on one shared counter: 3 pass, the 4th fails, manual ones pass and
    do not count, and once the window has passed automatic ones pass again."""
    shared: dict[str, float] = {}
    wall = 1_767_225_600.0
    plan = [(THRESHOLD, 0, "succeeded"), (MANUAL, 1, "succeeded"), (OVERFLOW, 1, "succeeded"),
            (THRESHOLD, 1, "succeeded"), (THRESHOLD, 1, "failed"), (MANUAL, 1, "succeeded"),
            (THRESHOLD, 594, "failed"),     # 599 s after the first: still within the window
            (THRESHOLD, 2, "succeeded"),    # 601 s: the first left the window
            (THRESHOLD, 1, "failed")]
    states = []
    for n, (reason, wait_s, _) in enumerate(plan, 1):
        wall += wait_s
        w = world(reason=reason)
        w.clock.wall = wall
        job_id = f"s1:{n:016x}"
        w.jobs.record = w.jobs.record.model_copy(update={"id": job_id})
        w.jobs.compactions = shared
        states.append(run_job(w.rt, job_id).state)
        shared = w.jobs.compactions
        assert (len(w.summarizer.requests) == 0) is (states[-1] == "failed")
    assert states == [s for _, _, s in plan]
