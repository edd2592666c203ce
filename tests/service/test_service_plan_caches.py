"""The planning caches a worker process keeps (``Runtime.plan_caches``, ``PlanCaches``).

The composition root builds one per process and every compaction and branch job plans with it:
a second job on a session the process planned before serializes only the messages new to it.
Each job with caches of its own would serialize every message it reads again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from service.service_fakes import SESSION_ID, FakeJobs, FakeSummarizer, World, world

import worker.compaction.serialize as serialize
from api_client.contract.job_enums import CompactReason, JobKind, JobState
from api_client.contract.wire import JobRecord
from helpers.sessions import TS, assistant, chars, user
from worker.compaction import PlanCaches
from worker.hooks import BeforeCompactResult
from worker.service import run_job
from worker.settings import WorkerSettings

FIRST, SECOND = f"{SESSION_ID}:00000000000000aa", f"{SESSION_ID}:00000000000000bb"


def serialized_by(monkeypatch: pytest.MonkeyPatch) -> list[Mapping[str, Any]]:
    """The messages whose prompt parts are computed from now on (objects: kept alive here)."""
    seen: list[Mapping[str, Any]] = []
    real = serialize._message_parts

    def recording(message: Mapping[str, Any]) -> tuple[str, ...]:
        seen.append(message)
        return real(message)

    monkeypatch.setattr(serialize, "_message_parts", recording)
    return seen


def next_job(w: World, kind: JobKind, reason: CompactReason | None,
             target_id: str | None = None) -> None:
    """Another delivery to the same runtime (the same worker process)."""
    w.jobs = w.rt.jobs = FakeJobs(JobRecord(id=SECOND, kind=kind, session_id=SESSION_ID,
                                            reason=reason, target_id=target_id,
                                            state=JobState.QUEUED))


def grow(w: World, turns: int) -> None:
    for i in range(turns):
        for n, message in enumerate((user(f"n{i} " + chars(396)),
                                     assistant(f"m{i} " + chars(396)))):
            w.sessions.add({"type": "message", "id": f"n{i}x{n}", "parentId": w.sessions.leaf,
                            "timestamp": TS, "message": message})


def read_by_requests(w: World, since: int) -> list[Mapping[str, Any]]:
    return [m for r in w.summarizer.requests[since:] for m in r.conversation]


def test_the_composition_root_builds_plan_caches_per_runtime() -> None:
    from worker.service.composition import build_runtime

    settings = WorkerSettings(worker_name="w1", tokenizer="estimate")
    one, two = (build_runtime(settings, summarizer=FakeSummarizer) for _ in range(2))
    try:
        assert isinstance(one.plan_caches, PlanCaches) and len(one.plan_caches.parts) == 0
        assert one.plan_caches is not two.plan_caches  # a process's, not a module's
    finally:
        one.close()
        two.close()


@pytest.mark.parametrize("second", ["grown compaction", "branch summary"])
def test_a_second_job_of_the_process_reuses_what_the_first_planned(
        second: str, monkeypatch: pytest.MonkeyPatch) -> None:
    w = world()
    caches = w.rt.plan_caches
    serialized = serialized_by(monkeypatch)
    assert run_job(w.rt, FIRST).state == "succeeded"
    first = list(serialized)
    assert len(caches.parts) > 0 and len(caches.fact_folds) > 0  # the job used the runtime's

    asked = len(w.summarizer.requests)
    if second == "grown compaction":
        grow(w, 3)
        next_job(w, JobKind.COMPACT, CompactReason.THRESHOLD)
    else:
        next_job(w, JobKind.BRANCH_SUMMARY, None, target_id="e1")
    assert run_job(w.rt, SECOND).state == "succeeded"
    again = serialized[len(first):]
    assert w.rt.plan_caches is caches

    read = read_by_requests(w, asked)
    reused = [m for m in read if any(m is f for f in first)]
    assert reused, "the second job should read messages the first one serialized"
    # Not one of them is serialized again: their parts came from the runtime's caches.
    assert not [m for m in again if any(m is f for f in first)]
    assert again  # and the second job did serialize what was new to it


def test_a_hooks_compaction_plans_its_fact_ledger_with_the_runtimes_caches() -> None:
    w = world()
    w.hooks.before_compact_result = BeforeCompactResult(compaction={
        "summary": "the hook's summary", "firstKeptEntryId": "e6", "tokensBefore": 800})
    assert run_job(w.rt, FIRST).state == "succeeded"
    assert w.summarizer.requests == []  # the hook summarized
    assert len(w.rt.plan_caches.fact_folds) > 0 and len(w.rt.plan_caches.parts) > 0
