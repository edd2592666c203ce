"""A delivery started in one step (the runtime's ``starts``: start_job.lua on a single Redis,
worker/store/job_start.py) on in-memory ports: the job uses what the start read and wrote, and
the outcomes of the separate calls stay (tests/service/test_service_outcomes.py runs those,
``starts`` None as on a Redis Cluster)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from service.service_fakes import World, world

from api_client.contract.job_enums import CompactReason, EventType, JobKind
from api_client.contract.usage import DayUsage
from worker.service import LeaseHeldError, _compact_job, run_job
from worker.store import CommitStatus
from worker.store.job_start import JobStart
from worker.store.leases import LeaseOutcome
from worker.store.paths import FirstRead


@dataclass
class OneStep:
    """The start as the script replies it; the record from the fake jobs' own start."""

    w: World
    lease: LeaseOutcome = LeaseOutcome.ACQUIRED
    deferred: bool = False
    budget: tuple[DayUsage, dict[str, str]] | None = None
    start_event: bool = True
    first_read: FirstRead | None = None
    may_reserve: bool = True
    begun: list[str] = field(default_factory=list)

    def begin(self, job_id: str, owner: str) -> JobStart:
        self.begun.append(owner)
        if self.lease is not LeaseOutcome.ACQUIRED or self.deferred:
            return JobStart(self.lease, deferred=self.deferred)
        return JobStart(self.lease, self.w.jobs.start(job_id), budget=self.budget,
                        start_event=self.start_event, first_read=self.first_read,
                        may_reserve=self.may_reserve)


class NoReads:
    """A tenant usage port the job must not read: its start did."""

    def today(self, tenant: str, at: float) -> Any:
        raise AssertionError("the start read the budget already")

    def add(self, tenant: str, at: float, **spend: Any) -> None:
        pass


def _one_step(world_args: dict[str, Any] | None = None, **start: Any) -> tuple[World, OneStep]:
    w = world(**(world_args or {}))
    w.rt.starts = steps = OneStep(w, **start)
    return w, steps


def test_a_start_event_written_with_the_start_is_not_published_again() -> None:
    w, steps = _one_step()
    assert run_job(w.rt, w.jobs.record.id).state == "succeeded"
    assert len(steps.begun) == 1 and w.jobs.acquired == 0  # no lease call of its own
    types = [e.type for e in w.jobs.published]
    assert EventType.COMPACTION_START not in types and types
    assert all(w.jobs.ttl_set)  # the start's event gave the stream its TTL


def test_without_it_the_job_publishes_the_start_event() -> None:
    w, _ = _one_step(start_event=False)
    assert run_job(w.rt, w.jobs.record.id).state == "succeeded"
    assert w.jobs.published[0].type is EventType.COMPACTION_START
    assert w.jobs.ttl_set[0] is False


def test_the_budget_check_uses_what_the_start_read() -> None:
    over = (DayUsage(tenant="default", day="2026-01-01", input_tokens=5000),
            {"tokens_per_day": "1000"})
    w, _ = _one_step(budget=over, start_event=False)
    w.rt.usage = NoReads()
    w.rt.settings.client.over_budget_summarizer = "refuse"
    outcome = run_job(w.rt, w.jobs.record.id)
    assert (outcome.state, outcome.cause) == ("failed", "quota")
    assert EventType.COMPACTION_START not in [e.type for e in w.jobs.published]


@pytest.mark.parametrize(("start", "expected"), [
    ({"lease": LeaseOutcome.FINISHED}, "duplicate"),
    ({"deferred": True}, "deferred"),
])
def test_the_outcomes_of_a_start(start: dict[str, Any], expected: str) -> None:
    w, _ = _one_step(**start)
    outcome = run_job(w.rt, w.jobs.record.id)
    assert outcome.state == expected and w.jobs.finished == [] and w.commits.calls == []
    assert w.jobs.record.attempts == 0 and w.jobs.published == []


def test_a_start_held_elsewhere_is_left_to_a_retry() -> None:
    w, _ = _one_step(lease=LeaseOutcome.HELD)
    with pytest.raises(LeaseHeldError):
        run_job(w.rt, w.jobs.record.id)
    assert w.jobs.record.attempts == 0 and w.jobs.published == []


READ = FirstRead(100, ("{}", "1", "e7", "0", None), ("line",))  # (the fake reads nothing of it)


@pytest.mark.parametrize("reason", [CompactReason.THRESHOLD, CompactReason.MANUAL])
def test_the_first_read_goes_on_from_the_start_and_a_replan_reads_afresh(
        reason: CompactReason) -> None:
    """The job's first load of its path takes what its start read (start_job.lua); the load
    after a stale commit, a re-plan, reads the session again, as on a Redis Cluster."""
    w, _ = _one_step({"reason": reason, "script": [CommitStatus.STALE]}, first_read=READ)
    assert run_job(w.rt, w.jobs.record.id).state == "succeeded"
    assert w.sessions.firsts == [READ, None]


def test_a_compaction_that_waited_for_a_draft_reads_afresh(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Its start's read is older than the wait: the draft must fit the session as it is now."""
    monkeypatch.setattr(_compact_job, "join_running_draft", lambda ctx: "s1:00000000000000dd")
    w, _ = _one_step(first_read=READ)
    assert run_job(w.rt, w.jobs.record.id).state == "succeeded"
    assert w.sessions.firsts == [None]


def test_a_prune_reads_from_its_start_too() -> None:
    w, _ = _one_step({"kind": JobKind.PRUNE, "reason": None}, first_read=READ)
    assert run_job(w.rt, w.jobs.record.id).state == "succeeded"
    assert w.sessions.firsts == [READ]


def test_without_a_one_step_start_every_read_is_the_jobs_own() -> None:
    w = world()  # starts None: a Redis Cluster's separate calls
    assert run_job(w.rt, w.jobs.record.id).state == "succeeded"
    assert w.sessions.firsts == [None]


def test_a_start_that_saw_no_budget_gives_nothing_back_at_the_end() -> None:
    w, _ = _one_step(may_reserve=False)
    assert run_job(w.rt, w.jobs.record.id).state == "succeeded"
    ((_, _, result),) = w.jobs.finished
    assert result["release"] is False
    w, _ = _one_step()
    assert run_job(w.rt, w.jobs.record.id).state == "succeeded"
    ((_, _, result),) = w.jobs.finished
    assert "release" not in result  # the store's default: give the reservation back
