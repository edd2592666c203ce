"""A tenant's model budget and spend, on the worker's side (docs/tenants.md).

Before a job calls the model (:func:`check_budget`), the spend of the job's tenant today (UTC)
is read against its ``tokens_per_day`` and ``usd_per_day`` (a field of the tenant's quota hash
overrides the setting; 0 = no limit). Over it, a threshold or overflow compaction summarises
with the deterministic summarizer (``over_budget_summarizer = "deterministic"``; the record
says so in ``result.overBudget``) or fails with :class:`QuotaExceededError` (``"refuse"``); a
speculative draft stops sooner, at ``draft_budget_share`` of the budget, so that drafts never
spend what the compactions an agent waits for need. Manual compactions, branch summaries and
summaries, admitted at enqueue (the client refuses them over budget), are checked again here
and refused over it (a job that got past admission in a race, or a record nobody admitted).

Admission reserved an estimate for the job (api_client/contract/reservations.py). Before each
model call (:class:`BudgetedSummarizer`) an estimate of the call's tokens (its prompt's
characters / 4, plus its output budget) is reserved for the job by this delivery, in one step
with the check against ``tokens_per_day`` (spent + every reservation + this call): the
delivery's calls replace the admission's estimate (and a dead delivery's calls), so nothing is
counted twice; parallel jobs cannot together pass the budget, and a prompt larger than what is
left is never sent. The job's reservation is given back when its delivery ends it
(:func:`account`), after its real spend is counted; a delivery that stops without ending it
gives back only its own. A worker killed mid-call holds it until the job's next delivery
replaces it, the job ends (the sweep's end included), or the job's deadline passes.

When a delivery ends (:func:`account`), what its model calls cost is added to its tenant's day,
drafts apart, and to the per-tenant metrics: before the job's end is published, so that whoever
sees the job ended (the agent's next compaction, a platform billing it) sees its spend too.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from api_client.contract.errors import QuotaExceededError
from api_client.contract.job_enums import CompactReason, JobKind
from api_client.contract.settings import ClientSettings
from api_client.contract.usage import DayUsage, SpendAdd, next_day_start, utc_day
from api_client.contract.wire import JobRecord
from worker.llm import Spend
from worker.llm.settings import DEFAULT_MAX_OUTPUT_TOKENS
from worker.observability import metrics
from worker.service._job_context import JobContext
from worker.service._job_stops import WAIT_FOR_REDIS
from worker.service._outage import ride_out
from worker.service.ports import KeepsSpend, Reservations, SpendHandover
from worker.summary_requests import CancelToken, Summarizer, SummaryRequest, SummaryResult

__all__ = ["Bill", "BudgetedSummarizer", "Decision", "Over", "account", "bill", "check_budget",
           "decide", "ended", "estimate_tokens", "job_spend", "over_budget"]

log = logging.getLogger("worker.service")

Action = Literal["model", "deterministic", "refuse", "stop_draft"]
_AUTOMATIC = (CompactReason.THRESHOLD, CompactReason.OVERFLOW)


@dataclass(frozen=True, slots=True)
class Over:
    """The budget a tenant is over: the quota's name, its limit (the share of it a draft may
    spend, for drafts) and the day's spend, in the quota's unit."""

    quota: str
    limit: float
    value: float

    def error(self, tenant: str, at: float) -> QuotaExceededError:
        return QuotaExceededError(tenant, quota=self.quota, limit=_shown(self.limit),
                                  value=_shown(self.value), resets_at=next_day_start(at))

    def note(self, summarizer: str) -> dict[str, object]:
        return {"summarizer": summarizer, "quota": self.quota, "limit": _shown(self.limit),
                "value": _shown(self.value)}


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    over: Over | None = None


def _shown(number: float) -> float:
    rounded = round(number, 6)
    return int(rounded) if float(rounded).is_integer() else rounded


def _limit(quota: Mapping[str, str], name: str, default: float) -> float:
    """The tenant's override of ``name`` when it reads as a number, else the setting."""
    try:
        return float(quota[name])
    except (KeyError, ValueError):
        return default


def over_budget(usage: DayUsage, quota: Mapping[str, str], settings: ClientSettings,
                share: float = 1.0) -> Over | None:
    """The first per-day budget the day's spend (drafts included) has reached ``share`` of."""
    for name, spent in (("tokens_per_day", float(usage.spent_tokens)),
                        ("usd_per_day", usage.spent_usd)):
        limit = _limit(quota, name, float(getattr(settings, name)))
        if limit > 0 and spent >= share * limit:
            return Over(name, share * limit, spent)
    return None


def checked(record: JobRecord) -> bool:
    """Jobs whose model calls the budget governs at the worker: every kind that calls a model
    (all but a prune)."""
    return record.kind is not JobKind.PRUNE


def _automatic(record: JobRecord) -> bool:
    return record.kind is JobKind.COMPACT and record.reason in _AUTOMATIC


def decide(record: JobRecord, usage: DayUsage, quota: Mapping[str, str],
           settings: ClientSettings) -> Decision:
    """What the job does about its tenant's budget (a pure function of the day's numbers)."""
    if not checked(record):
        return Decision("model")
    if record.reason is CompactReason.SPECULATIVE:
        over = over_budget(usage, quota, settings, settings.draft_budget_share)
        return Decision("stop_draft", over) if over else Decision("model")
    over = over_budget(usage, quota, settings)
    if over is None:
        return Decision("model")
    deterministic = _automatic(record) and settings.over_budget_summarizer == "deterministic"
    return Decision("deterministic" if deterministic else "refuse", over)


def check_budget(ctx: JobContext) -> None:
    """Before the job's first model call: go on, put the deterministic summarizer in the
    model's place, or raise :class:`QuotaExceededError` (the job fails, cause ``quota``)."""
    rt, record = ctx.rt, ctx.record
    if rt.usage is None or not checked(record):
        return
    usage, quota = ctx.budget or rt.usage.today(record.tenant, rt.clock.time())
    decision = decide(record, usage, quota, rt.settings.client)
    if decision.over is None:
        # Without a tokens_per_day nothing is reserved: a call checks nothing against it.
        budget = _limit(quota, "tokens_per_day", float(rt.settings.client.tokens_per_day))
        if budget > 0 and isinstance(rt.usage, Reservations):
            ctx.summarizer = BudgetedSummarizer(ctx.summarizer, ctx, rt.usage)
        return
    ctx.summarizer = _over(ctx, decision.over)


def _over(ctx: JobContext, over: Over) -> Summarizer:
    """The deterministic summarizer in the model's place (an automatic compaction, when so
    configured), else :class:`QuotaExceededError`."""
    rt, record = ctx.rt, ctx.record
    deterministic = (_automatic(record)
                     and rt.settings.client.over_budget_summarizer == "deterministic")
    if deterministic and rt.deterministic is not None:
        ctx.over_budget = over.note("deterministic")
        metrics.observe_tenant_budget(record.tenant, "deterministic")
        log.info("job %s: tenant %s over its %s (%s of %s): the deterministic summarizer "
                 "answers", ctx.job_id, record.tenant, over.quota, over.value, over.limit)
        return rt.deterministic()
    stopped = record.reason is CompactReason.SPECULATIVE
    metrics.observe_tenant_budget(record.tenant, "draft_stopped" if stopped else "refused")
    raise over.error(record.tenant, rt.clock.time())


def estimate_tokens(request: SummaryRequest) -> int:
    """What a call may cost at most, about: its prompt (4 characters a token) and its output
    budget (as the router clamps it)."""
    chars = len(request.system_prompt) + len(request.prompt)
    return -(-chars // 4) + min(request.max_tokens, DEFAULT_MAX_OUTPUT_TOKENS)


class BudgetedSummarizer:
    """The job's summarizer behind its tenant's ``tokens_per_day``: each call reserves its
    estimate first (see the module doc); over the budget the call is not sent."""

    def __init__(self, inner: Summarizer, ctx: JobContext, store: Reservations) -> None:
        self.inner, self._ctx, self._store = inner, ctx, store
        self._day = utc_day(ctx.rt.clock.time())
        self._share = (ctx.rt.settings.client.draft_budget_share
                       if ctx.record.reason is CompactReason.SPECULATIVE else 1.0)
        self._lock = threading.Lock()
        self.reserved = 0
        self.owner = uuid.uuid4().hex[:16]  # this delivery's token on its reservation
        self._until = time.time() + ctx.rt.settings.job_deadline_s + ctx.rt.settings.lease_ttl_s

    @property
    def spend(self) -> Spend | None:
        return _spend_of(self.inner)

    @property
    def progress(self) -> Any:
        return self.inner.progress  # type: ignore[attr-defined]  # AttributeError: none

    @progress.setter
    def progress(self, value: Any) -> None:
        self.inner.progress = value  # type: ignore[attr-defined]

    def summarize(self, request: SummaryRequest,
                  cancel: CancelToken | None = None) -> SummaryResult:
        ctx, wanted, store = self._ctx, estimate_tokens(request), self._store
        # Ridden out: a Redis blip between two calls must not throw away the calls made.
        done, spent, held, limit = ride_out(ctx.control, "budget", lambda: store.reserve(
            ctx.record.tenant, self._day, wanted, int(ctx.rt.settings.client.tokens_per_day),
            self._share, job_id=ctx.job_id, owner=self.owner, until=self._until))
        if not done:
            log.info("job %s: a call of ~%d tokens refused: tenant %s has spent %d and "
                     "reserved %d of %g", ctx.job_id, wanted, ctx.record.tenant, spent, held,
                     limit)
            over = Over("tokens_per_day", limit, float(spent + held + wanted))
            return _over(ctx, over).summarize(request, cancel)
        with self._lock:
            self.reserved += wanted
        return self.inner.summarize(request, cancel)

    def settle(self) -> None:
        """Give back what this delivery's calls reserved (its real spend is counted instead):
        a delivery that stops without ending the job (taken over) leaves the job's own."""
        with self._lock:
            tokens, self.reserved = self.reserved, 0
        if tokens:
            self._store.release(self._ctx.record.tenant, self._ctx.job_id, self.owner)


def _release_job(ctx: JobContext) -> None:
    """The job ends: whatever it holds goes (admission's estimate, any delivery's calls). A
    delivery whose calls reserved nothing leaves it to the job's end, which gives back what
    the job holds too (``finish_job``'s release, after the terminal state)."""
    store = ctx.rt.usage
    if not isinstance(store, Reservations) or not _holds(ctx):
        return
    try:
        ride_out(ctx.control, "usage", lambda: store.release(
            ctx.record.tenant, ctx.job_id))
    except WAIT_FOR_REDIS as err:
        log.warning("job %s: reservation of tenant %s not given back: %s", ctx.job_id,
                    ctx.record.tenant, err)


def _holds(ctx: JobContext) -> bool:
    """This delivery's calls reserved some of the budget (else the job's end gives back what
    the job holds: ``finish_job``'s release)."""
    return (isinstance(ctx.rt.usage, Reservations)
            and isinstance(ctx.summarizer, BudgetedSummarizer) and ctx.summarizer.reserved > 0)


def job_spend(ctx: JobContext) -> Spend | None:
    """What this delivery's model calls cost (None: no model was called). The router's job
    summarizer keeps it; a summarizer of another kind (tests, hooks) reports none."""
    spend = _spend_of(ctx.summarizer)
    return spend if isinstance(spend, Spend) and spend.calls else None


def _spend_of(summarizer: Summarizer) -> Spend | None:
    return summarizer.spend if isinstance(summarizer, KeepsSpend) else None


@dataclass(frozen=True, slots=True)
class Bill:
    """What the delivery that ends a job owes: ``costs``, the USD fields of the job's record
    and completion event; ``spend``, its spend for the job's end to count in the same step
    (None: counted already, or nothing to count)."""

    costs: dict[str, Any]
    spend: SpendAdd | None = None


def bill(ctx: JobContext, draft_cost_usd: float | None = None) -> Bill:
    """What the delivery's model calls cost (it ends the job next): ``cost_usd`` (none when no
    model was called) and ``draft_cost_usd`` (what its drafts cost, when drafts are involved).
    Where the job's end is one step (:func:`_one_step`) the spend goes with it
    (:attr:`Bill.spend`; the reservation too: :func:`account`'s rule); else it is counted
    here, before the end."""
    spend = job_spend(ctx)
    owed = None
    if _one_step(ctx):
        owed = _handed_over(ctx, spend)
    else:
        account(ctx, spend, ended=True)
    costs: dict[str, Any] = {} if spend is None else {"cost_usd": round(spend.cost_usd, 8)}
    if draft_cost_usd is not None:
        costs["draft_cost_usd"] = round(draft_cost_usd, 8)
    return Bill(costs, owed)


def _one_step(ctx: JobContext) -> bool:
    """The job's end counts the spend and gives the reservation back in its own step
    (``JobRecords.ends_in_one_step``: one Redis), and the usage store can hand the spend over
    (:class:`SpendHandover`)."""
    store = ctx.rt.usage
    return ctx.rt.jobs.ends_in_one_step and (store is None or isinstance(store, SpendHandover))


def _handed_over(ctx: JobContext, spend: Spend | None) -> SpendAdd | None:
    """The spend for the job's end to count (None: nothing to count); in the metrics now."""
    if spend is None:
        return None
    read, output, draft = _observe(ctx, spend)
    store = ctx.rt.usage
    if not isinstance(store, SpendHandover):  # no usage store (_one_step checked the rest)
        return None
    return store.spend_add(ctx.record.tenant, ctx.rt.clock.time(), input_tokens=read,
                           output_tokens=output, usd=spend.cost_usd, draft=draft, ended=True)


def ended(ctx: JobContext, owed: Bill, end: Callable[[], bool]) -> bool:
    """Run the job's ``end`` (``JobRecords.finish`` with ``owed.spend``), waited out as the
    job's end always is; then the spend counts as counted. An end that never got through
    gives the job's reservation back on its own (the spend could not be counted), then
    raises."""
    try:
        done = ride_out(ctx.control, "finish", end, until_memory=True)
    except WAIT_FOR_REDIS:
        if _one_step(ctx):
            _release_job(ctx)
        raise
    store = ctx.rt.usage
    if owed.spend is not None and isinstance(store, SpendHandover):
        store.counted(owed.spend)
    return done


def account(ctx: JobContext, spend: Spend | None, *, ended: bool) -> None:
    """Add the delivery's spend to its tenant's day and metrics (``ended``: this delivery
    ends the job, which then counts as one). A Redis that stays away loses the count, not the
    job: its end is written next, or waited for as the job's end always is. The reservation
    goes with the spend, in one step (an admission in between would count the job twice), or
    after it when the spend could not be counted, so that one of them always counts. (Where
    the job's end is one step, :func:`bill` hands the spend to it instead: the spend, the
    reservation and the end change together, and :func:`ended` gives the reservation back on
    its own when that step never gets through.)"""
    counted = _count(ctx, spend, ended=ended)
    if ended and not counted:
        _release_job(ctx)
    elif isinstance(ctx.summarizer, BudgetedSummarizer):
        try:
            ride_out(ctx.control, "usage", ctx.summarizer.settle)
        except WAIT_FOR_REDIS as err:
            log.warning("job %s: reservation of tenant %s not given back: %s", ctx.job_id,
                        ctx.record.tenant, err)


def _count(ctx: JobContext, spend: Spend | None, *, ended: bool) -> bool:
    """Count the spend; when the delivery ends the job and holds a reservation, give it back in
    the same step. True when both were done."""
    if spend is None:
        return False
    record = ctx.record
    read, output, draft = _observe(ctx, spend)
    store = ctx.rt.usage
    if store is None:
        return False
    at = ctx.rt.clock.time()
    release = ctx.job_id if ended and _holds(ctx) else None
    try:
        ride_out(ctx.control, "usage", lambda: store.add(
            record.tenant, at, input_tokens=read, output_tokens=output,
            usd=spend.cost_usd, draft=draft, ended=ended, release_job=release))
    except WAIT_FOR_REDIS as err:
        log.warning("job %s: spend of tenant %s not counted: %s", ctx.job_id, record.tenant, err)
        return False
    return release is not None


def _observe(ctx: JobContext, spend: Spend) -> tuple[int, int, bool]:
    """The spend in the per-tenant metrics; (tokens read, output tokens, a draft's?)."""
    usage, draft = spend.usage, ctx.record.reason is CompactReason.SPECULATIVE
    read = usage.input + usage.cache_read + usage.cache_write
    metrics.observe_tenant_spend(ctx.record.tenant, "draft" if draft else "applied", read,
                                 usage.output, spend.cost_usd)
    return read, usage.output, draft
