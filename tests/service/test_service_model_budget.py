"""The tenant's model budget and spend on the worker's side (worker/service/_model_budget.py):
the decision as a table a reader can check by hand, then what a job does with it, on in-memory
ports (the Redis store and a real worker: tests/runtime/test_runtime_usage.py)."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from service.service_fakes import World, world

from api_client.contract.job_enums import CompactReason, JobKind, JobState
from api_client.contract.usage import DayUsage, SpendAdd
from api_client.contract.wire import JobRecord
from worker.llm import build_deterministic
from worker.service import run_job
from worker.service._model_budget import decide
from worker.service.ports import KeepsSpend, Reservations, SpendHandover
from worker.settings import WorkerSettings
from worker.store.tenant_usage import TenantUsageStore
from worker.summary_requests import CancelToken, Spend, SummaryRequest, SummaryResult, Usage
from worker.tokens import get_tokenizer

THR, OVF, MAN, SPEC = (CompactReason.THRESHOLD, CompactReason.OVERFLOW, CompactReason.MANUAL,
                       CompactReason.SPECULATIVE)


def _day(tokens: int = 0, usd: float = 0.0, draft_tokens: int = 0) -> DayUsage:
    return DayUsage(tenant="acme", day="2026-01-01", input_tokens=tokens, usd=usd,
                    draft_input_tokens=draft_tokens)


@pytest.mark.parametrize(("reason", "day", "quota", "settings", "action"), [
    (THR, _day(999), {}, {"tokens_per_day": 1000}, "model"),
    (THR, _day(1000), {}, {"tokens_per_day": 1000}, "deterministic"),
    (OVF, _day(1000), {}, {"tokens_per_day": 1000}, "deterministic"),
    (THR, _day(1000), {}, {"tokens_per_day": 1000, "over_budget_summarizer": "refuse"}, "refuse"),
    (THR, _day(usd=0.5), {}, {"usd_per_day": 0.5}, "deterministic"),
    (THR, _day(usd=0.49), {}, {"usd_per_day": 0.5}, "model"),
    (THR, _day(10**9, 99.0), {}, {}, "model"),                       # 0 = no limit
    (THR, _day(draft_tokens=1000), {}, {"tokens_per_day": 1000}, "deterministic"),  # drafts count
    (THR, _day(500), {"tokens_per_day": "400"}, {"tokens_per_day": 1000}, "deterministic"),
    (THR, _day(5000), {"tokens_per_day": "0"}, {"tokens_per_day": 1000}, "model"),  # no limit
    (THR, _day(1000), {"tokens_per_day": "many"}, {"tokens_per_day": 1000}, "deterministic"),
    (SPEC, _day(799), {}, {"tokens_per_day": 1000}, "model"),
    (SPEC, _day(800), {}, {"tokens_per_day": 1000}, "stop_draft"),     # share 0.8
    (SPEC, _day(500), {}, {"tokens_per_day": 1000, "draft_budget_share": 0.5}, "stop_draft"),
    (SPEC, _day(usd=0.9), {"usd_per_day": "1"}, {}, "stop_draft"),
    (MAN, _day(5000), {}, {"tokens_per_day": 1000}, "refuse"),  # checked again (issue 39 M5)
])
def test_the_budget_decision(reason: CompactReason, day: DayUsage, quota: dict[str, str],
                             settings: dict[str, Any], action: str) -> None:
    record = JobRecord(id="acme~s1:00000000000000aa", kind=JobKind.COMPACT,
                       session_id="acme~s1", reason=reason)
    assert decide(record, day, quota, WorkerSettings(**settings).client).action == action


def test_every_kind_that_calls_a_model_is_checked_again() -> None:
    """Issue 39 M5: every kind but a prune (which calls no model) is refused over the budget at
    the worker too: a record that got past admission (a race, a forged record) spends nothing."""
    for kind, action in ((JobKind.BRANCH_SUMMARY, "refuse"), (JobKind.SUMMARIZE, "refuse"),
                         (JobKind.PRUNE, "model")):
        record = JobRecord(id="s1:00000000000000aa", kind=kind, session_id="s1")
        one_token = WorkerSettings(tokens_per_day=1).client
        assert decide(record, _day(10**6), {}, one_token).action == action


class FakeUsage:
    """A usage store that counts and reads only (neither ``Reservations`` nor
    ``SpendHandover``): the budget is checked once per job, the spend counted before its end."""

    def __init__(self, day: DayUsage, quota: dict[str, str] | None = None) -> None:
        self.day, self.quota = day, quota or {}
        self.added: list[dict[str, Any]] = []

    def add(self, tenant: str, at: float, **spend: Any) -> None:
        self.added.append({"tenant": tenant, **spend})

    def today(self, tenant: str, at: float) -> tuple[DayUsage, dict[str, str]]:
        return self.day, dict(self.quota)


class Metered:
    """A summarizer that keeps its spend as the router's job summarizer does."""

    def __init__(self, model: str, *, paid: bool = True) -> None:
        self.model, self.paid, self.calls, self.spend = model, paid, 0, Spend()

    def summarize(self, request: SummaryRequest,
                  cancel: CancelToken | None = None) -> SummaryResult:
        self.calls += 1
        usage = Usage(input=100, output=20, cache_read=30, cache_write=5)
        if self.paid:  # the router counts HTTP calls only: the extractive one is free
            self.spend.add(usage, 0.01)
        return SummaryResult(f"summary by {self.model}", self.model, self.model, usage, 1,
                             cost_usd=0.01)


def _budgeted(reason: CompactReason, spent: int, **settings: Any) -> tuple[World, FakeUsage,
                                                                            Metered, Metered]:
    w = world(reason=reason, tokens_per_day=1000, **settings)
    model, fallback = Metered("model"), Metered("extractive", paid=False)
    store = FakeUsage(_day(spent))
    w.rt.new_summarizer, w.rt.deterministic, w.rt.usage = (lambda: model, lambda: fallback,
                                                           store)
    return w, store, model, fallback


def test_over_budget_a_threshold_compaction_summarises_without_the_model() -> None:
    w, store, model, fallback = _budgeted(THR, 1000)
    outcome = run_job(w.rt, w.jobs.record.id)
    assert outcome.state == "succeeded" and model.calls == 0 and fallback.calls > 0
    state, event, fields = w.jobs.finished[-1]
    note = {"summarizer": "deterministic", "quota": "tokens_per_day", "limit": 1000,
            "value": 1000}
    assert state is JobState.SUCCEEDED and fields["model"] == "extractive"
    assert fields["result"]["overBudget"] == note
    assert event is not None and event.result is not None and event.result["overBudget"] == note
    assert store.added == [] and "cost_usd" not in fields  # nothing was spent


def test_under_budget_the_model_answers_and_the_spend_is_counted() -> None:
    w, store, model, fallback = _budgeted(THR, 999)
    assert run_job(w.rt, w.jobs.record.id).state == "succeeded"
    assert model.calls > 0 and fallback.calls == 0
    _, event, fields = w.jobs.finished[-1]
    assert "overBudget" not in fields["result"]
    calls = model.calls
    assert fields["cost_usd"] == pytest.approx(0.01 * calls)
    assert event is not None and event.cost_usd == pytest.approx(0.01 * calls)
    # Cache reads and writes are input the model read.
    assert store.added == [{"tenant": "default", "input_tokens": 135 * calls,
                            "output_tokens": 20 * calls, "usd": pytest.approx(0.01 * calls),
                            "draft": False, "ended": True, "release_job": None}]


def test_refused_over_budget_when_so_configured() -> None:
    w, store, model, fallback = _budgeted(THR, 1000, over_budget_summarizer="refuse")
    outcome = run_job(w.rt, w.jobs.record.id)
    assert (outcome.state, outcome.cause) == ("failed", "quota")
    assert model.calls == fallback.calls == 0 and store.added == []
    assert outcome.error is not None and "tokens_per_day quota" in outcome.error
    assert outcome.error.startswith("Auto-compaction failed: tenant 'default'")


def test_a_draft_stops_at_its_share_of_the_budget() -> None:
    w, _, model, fallback = _budgeted(SPEC, 800)
    outcome = run_job(w.rt, w.jobs.record.id)
    assert (outcome.state, outcome.cause) == ("failed", "quota")
    assert model.calls == fallback.calls == 0
    assert outcome.error is not None and "800 of 800" in outcome.error
    _, _, fields = w.jobs.finished[-1]
    assert "cost_usd" not in fields  # no model was called: nothing to bill


def test_a_manual_compaction_over_budget_is_refused_at_the_worker_too() -> None:
    w, store, model, fallback = _budgeted(MAN, 5000)
    assert run_job(w.rt, w.jobs.record.id).state == "failed"
    assert model.calls == fallback.calls == 0 and not store.added


def test_a_failed_job_still_counts_what_its_calls_cost() -> None:
    w, store, model, _ = _budgeted(MAN, 0)
    w.jobs.cancel_requested = False
    inner = model.summarize

    def then_fail(request: SummaryRequest, cancel: CancelToken | None = None) -> SummaryResult:
        inner(request, cancel)
        raise RuntimeError("a bug after the call")

    model.summarize = then_fail  # type: ignore[method-assign]
    outcome = run_job(w.rt, w.jobs.record.id)
    assert (outcome.state, outcome.cause) == ("failed", "internal")
    _, event, fields = w.jobs.finished[-1]
    assert fields["cost_usd"] == pytest.approx(0.01)
    assert event is not None and event.cost_usd == pytest.approx(0.01)
    assert [a["input_tokens"] for a in store.added] == [135]


class OneStepUsage(FakeUsage):
    """A usage store whose spend the job's end counts (``spend_add``/``counted``), with the
    budget's reservations (``reserve``/``release``)."""

    def __init__(self, day: DayUsage) -> None:
        super().__init__(day)
        self.handed: list[SpendAdd] = []
        self.counted_adds: list[SpendAdd] = []
        self.released: list[str] = []

    def spend_add(self, tenant: str, at: float, **spend: Any) -> SpendAdd:
        add = SpendAdd(tenant, "2026-01-01", spend["input_tokens"], spend["output_tokens"],
                       spend["usd"], spend["draft"], int(spend["ended"]))
        self.handed.append(add)
        return add

    def counted(self, add: SpendAdd) -> None:
        self.counted_adds.append(add)

    def reserve(self, tenant: str, day: str, tokens: int, default_limit: int,
                share: float = 1.0, **held: Any) -> tuple[bool, int, int, float]:
        return True, 0, 0, float(default_limit)

    def release(self, tenant: str, job_id: str, owner: str = "") -> None:
        self.released.append(job_id)


def _one_step(w: World) -> OneStepUsage:
    store = OneStepUsage(_day(0))
    w.rt.usage = store
    w.jobs.ends_in_one_step = True
    return store


def test_where_the_end_is_one_step_it_counts_the_spend() -> None:
    """One Redis: the spend goes to the job's end (finish's ``spend``), counted with it and the
    reservation's release in one step; nothing is counted or given back before."""
    w, _, model, _ = _budgeted(MAN, 0)
    store = _one_step(w)
    assert run_job(w.rt, w.jobs.record.id).state == "succeeded"
    _, _, fields = w.jobs.finished[-1]
    [add] = store.handed
    assert fields["spend"] is add and add.input_tokens == 135 * model.calls and add.jobs == 1
    assert store.counted_adds == [add] and store.added == [] and store.released == []


def test_an_end_that_never_gets_through_gives_the_reservation_back() -> None:
    """account()'s rule: the spend could not be counted (the one step never ran), so the
    reservation the delivery's calls hold is given back on its own."""
    w, _, _, _ = _budgeted(MAN, 0)
    store = _one_step(w)

    def down(*args: Any, **kwargs: Any) -> bool:
        raise redis.ConnectionError("gone")

    w.jobs.finish = down  # type: ignore[method-assign]
    with pytest.raises(redis.ConnectionError):
        run_job(w.rt, w.jobs.record.id)
    assert store.released == [w.jobs.record.id] and store.counted_adds == []


def test_the_real_stores_and_summarizers_have_what_the_service_looks_for() -> None:
    """The service asks for these capabilities with isinstance (ports.py): a method renamed
    here would turn reservations, the one-step end or the spend off without an error."""
    assert issubclass(TenantUsageStore, Reservations)
    assert issubclass(TenantUsageStore, SpendHandover)
    assert isinstance(build_deterministic(get_tokenizer("estimate")).for_job(), KeepsSpend)
    assert not isinstance(FakeUsage(_day()), Reservations | SpendHandover)
