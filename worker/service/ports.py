"""What the service sees of its collaborators: small Protocols, and the bundle a job runs with.

The service (``run_job`` and the job kinds) depends only on these. The Redis implementations
(``api_client``'s session and job stores, ``worker.store.CommitStore``), the pluggy hook runner
and the model router are wired in one place, ``worker.service.composition``; tests/service runs
the service on in-memory implementations of the same Protocols.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from api_client.contract.job_enums import JobState
from api_client.contract.session import Entry, JsonObject
from api_client.contract.snapshots import Snapshot
from api_client.contract.usage import DayUsage, SpendAdd
from api_client.contract.wire import JobEvent, JobRecord
from worker.compaction import CompactionSettings, PlanCaches, Preparation
from worker.hooks import (
    BeforeCompactResult,
    BeforeTreeResult,
    CancelSignal,
    CompactingResult,
    TreePreparation,
)
from worker.settings import WorkerSettings
from worker.store import CommitOutcome
from worker.store.job_start import JobStart
from worker.store.leases import LeaseOutcome
from worker.store.paths import FirstRead, PathSnapshot, Reach
from worker.summary_requests import Spend, Summarizer
from worker.tokens import Tokenizer

__all__ = [
    "SYSTEM_CLOCK",
    "Clock",
    "Commits",
    "Drafts",
    "Hooks",
    "JobLeases",
    "JobRecords",
    "JobStarts",
    "KeepsSpend",
    "Reservations",
    "Runtime",
    "Sessions",
    "SpendHandover",
    "TenantUsage",
    "TokenCounts",
]

log = logging.getLogger("worker.service")


class Sessions(Protocol):
    """Snapshots of a session: all of it (entries, stored leaf, revision), or the end of the
    leaf's path that a plan needs (``worker.store.paths``)."""

    def load(self, session_id: str) -> Snapshot: ...

    def load_path(self, session_id: str, reach: Reach,
                  first: FirstRead | None = None) -> PathSnapshot:
        """``first``: the read's start, done with the job's start (``JobStart.first_read``)."""
        ...


class Commits(Protocol):
    """The conditional writes of a job (one per job: its recorded effect, the record's
    ``effect``) and what they read; ``effect``: the marker a worker of an older version kept
    apart from the record (read on a redelivery only)."""

    def effect(self, job_id: str) -> str | None: ...

    def entry(self, session_id: str, entry_id: str) -> JsonObject | None: ...

    def append_entry(self, job_id: str, snapshot_leaf: str | None, entry: Mapping[str, Any],
                     result: Mapping[str, Any]) -> CommitOutcome: ...

    def branch(self, job_id: str, snapshot_leaf: str | None, destination: str | None,
               entry: Mapping[str, Any] | None, result: Mapping[str, Any]) -> CommitOutcome: ...

    def rewrite(self, job_id: str, rewrites: Sequence[tuple[str, str]],
                result: Mapping[str, Any] | None, *, rewrites_seen: int,
                snapshot_leaf: str | None = None,
                pruned_through: str | None = None) -> CommitOutcome: ...


class JobLeases(Protocol):
    """Who runs a job now, and whether it should stop (``JobControl`` polls these)."""

    def acquire_lease(self, job_id: str, worker_id: str, ttl_s: float) -> LeaseOutcome: ...

    def renew_lease(self, job_id: str, worker_id: str, ttl_s: float) -> bool: ...

    def release_lease(self, job_id: str, worker_id: str) -> bool: ...

    def lease_holder(self, job_id: str) -> str | None:
        """The owner of the job's live lease (``<worker id>/<delivery>``), if any."""
        ...

    def is_cancel_requested(self, job_id: str) -> bool: ...

    def cancel_requested_among(self, job_ids: Sequence[str]) -> set[str]:
        """The ids whose cancel flag is set, read in one round trip."""
        ...


class CancelFlags(Protocol):
    """The cancel flags of a process's running jobs (``worker.service._control.CancelWatch``)."""

    def watch(self, job_id: str) -> threading.Event:
        """An event set once the job's cancel flag is seen set."""
        ...

    def forget(self, job_id: str) -> None: ...


class Heartbeats(Protocol):
    """The lease renewals of a process's running jobs (``worker.service._control``'s
    ``LeaseHeartbeats``)."""

    def keep(self, key: object, period_s: float, beat: Callable[[], bool]) -> None:
        """Call ``beat`` every ``period_s`` until :meth:`drop` or it returns False."""
        ...

    def drop(self, key: object) -> None:
        """No more beats for ``key``; returns once none is running."""
        ...


class TokenCounts(Protocol):
    """A session's token counts shared by the workers (``worker.store.token_counts``)."""

    def load(self, session_id: str) -> list[tuple[bytes, int]]:
        """(content digest, count) pairs stored for the session; [] when none or unreadable."""
        ...

    def save(self, session_id: str, counts: Iterable[tuple[bytes, int]]) -> int: ...


class JobRecords(JobLeases, Protocol):
    """A job's record and events, from the worker's side."""

    # ``finish`` counts the delivery's spend, gives the job's reservation back and writes the
    # commit's events in the job's end, one step (one Redis); False where one script cannot
    # reach those keys (a Redis Cluster, a tenant's own ACL user): the service counts the spend
    # and publishes the events before the end.
    ends_in_one_step: bool

    def mark_running(self, job_id: str, attempt: int | None = None) -> int | None: ...

    def start(self, job_id: str) -> JobRecord | None:
        """``mark_running`` (one more attempt) and the record as it now is (None: finished)."""
        ...

    def get(self, job_id: str) -> JobRecord: ...

    def publish(self, event: JobEvent, *, ttl_set: bool = False) -> str:
        """A non-terminal event; ``ttl_set``: an earlier one of the delivery set the stream's
        TTL ('' returned: Redis refused it)."""
        ...

    def finish(self, job_id: str, state: JobState | str, *, event: JobEvent | None = None,
               record: JobRecord | None = None, **result: Any) -> bool: ...

    def recent_compactions(self, session_id: str, now: float, window_s: float) -> int:
        """Automatic compactions of the session committed in the window (the loop guard)."""
        ...

    def count_compaction(self, session_id: str, job_id: str, now: float,
                         window_s: float) -> None: ...


class TenantUsage(Protocol):
    """A tenant's model spend per UTC day (``worker.store.tenant_usage.TenantUsageStore``,
    which is :class:`Reservations` and :class:`SpendHandover` too; the in-memory stores of
    tests/service may be neither)."""

    def add(self, tenant: str, at: float, *, input_tokens: int, output_tokens: int, usd: float,
            draft: bool, ended: bool, release_job: str | None = None) -> None:
        """Count a delivery's spend (``release_job``: and give back what that job holds, in
        the same step)."""
        ...

    def today(self, tenant: str, at: float) -> tuple[DayUsage, dict[str, str]]:
        """The spend of the day of ``at`` and the tenant's quota overrides."""
        ...


@runtime_checkable
class Reservations(Protocol):
    """A usage store that reserves each model call's estimate (docs/tenants.md); without it a
    job's budget is checked once, before its first call."""

    def reserve(self, tenant: str, day: str, tokens: int, default_limit: int,
                share: float = 1.0, *, job_id: str, owner: str,
                until: float) -> tuple[bool, int, int, float]:
        """Reserve a call's estimate for the job's delivery unless over the day's budget:
        (reserved?, spent, reserved before, limit)."""
        ...

    def release(self, tenant: str, job_id: str, owner: str = "") -> None:
        """Give back what the job (with ``owner``: that delivery) holds."""
        ...


@runtime_checkable
class SpendHandover(Protocol):
    """A usage store that hands a delivery's spend to the job's end, which counts it in its
    own step (:attr:`JobRecords.ends_in_one_step`); without it the spend is counted before."""

    def spend_add(self, tenant: str, at: float, *, input_tokens: int, output_tokens: int,
                  usd: float, draft: bool, ended: bool) -> SpendAdd:
        """What :meth:`TenantUsage.add` would count, for ``JobRecords.finish``'s ``spend``."""
        ...

    def counted(self, add: SpendAdd) -> None:
        """The job's end counted ``add``."""
        ...


@runtime_checkable
class KeepsSpend(Protocol):
    """A summarizer that keeps what its model calls cost (``worker.llm.router.JobSummarizer``);
    one that does not (a test's) reports no spend."""

    @property
    def spend(self) -> Spend | None: ...


class JobStarts(Protocol):
    """A delivery's start in one step (``worker.store.job_start.JobStarts``, a single Redis):
    lease, tenant slot, record running, what the budget check reads, the start event."""

    def begin(self, job_id: str, owner: str) -> JobStart: ...


class TenantSlots(Protocol):
    """Per-tenant concurrency (``worker.store.tenant_slots.TenantSlots``)."""

    def take(self, job_id: str) -> bool:
        """True: run the job now (a slot of its tenant is held for it, or no cap applies)."""
        ...

    def release(self, job_id: str) -> None: ...

    def defer(self, job_id: str) -> None:
        """The job stays queued; the sweep sends it again shortly."""
        ...


class Drafts(Protocol):
    """Where a speculative job stores its draft (``worker.store.draft_store.DraftStore``),
    where a compaction finds the stale draft it extends, and which speculative job of a session
    a worker runs right now (an automatic compaction joins it)."""

    def save(self, job_id: str, draft: str) -> str: ...

    def get(self, session_id: str) -> dict[str, Any] | None: ...

    def running(self, session_id: str) -> str | None: ...

    def planned_on(self, job_id: str, leaf_id: str) -> None: ...

    def snapshot_of(self, job_id: str) -> str | None: ...


class Hooks(Protocol):
    """The hook events the service dispatches (docs/hooks.md "The five events");
    ``worker.hooks.HookRunner``."""

    def has_hooks(self, event: str) -> bool:
        """Does any hook handle ``event`` (``session_before_compact`` gets the whole branch)?"""
        ...

    def before_compact(self, preparation: Preparation, branch_entries: Sequence[Entry],
                       custom_instructions: str | None, cancel: CancelSignal | None, *,
                       session_id: str | None = None) -> BeforeCompactResult | None: ...

    def compacting(self, session_id: str | None, messages: Sequence[Mapping[str, Any]], *,
                   cancel: CancelSignal | None = None) -> CompactingResult | None: ...

    def compact_done(self, entry: Mapping[str, Any], from_extension: bool, *,
                     session_id: str | None = None) -> None: ...

    def before_tree(self, preparation: Mapping[str, Any] | TreePreparation,
                    cancel: CancelSignal | None, *,
                    session_id: str | None = None) -> BeforeTreeResult | None: ...

    def tree_done(self, new_leaf_id: str | None, old_leaf_id: str | None,
                  summary_entry: Mapping[str, Any] | None, from_extension: bool | None, *,
                  session_id: str | None = None) -> None: ...


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds for deadlines and durations."""
        ...

    def time(self) -> float:
        """Wall-clock seconds since the epoch (``prunedAt``)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of :meth:`monotonic` (a wait bounded by a job's deadline)."""
        ...


class _SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


SYSTEM_CLOCK: Clock = _SystemClock()


@dataclass
class Runtime:
    """Everything a worker process shares between jobs (built by ``composition.build_runtime``)."""

    settings: WorkerSettings
    sessions: Sessions
    jobs: JobRecords
    commits: Commits
    tokenizer: Tokenizer
    hooks: Hooks
    # A fresh summarizer per job (the router's per-job attempt budget).
    new_summarizer: Callable[[], Summarizer]
    clock: Clock = SYSTEM_CLOCK
    drafts: Drafts | None = None  # speculative jobs fail without it
    # One poll for every running job's cancel flag; None: each job reads its own flag.
    cancel_flags: CancelFlags | None = None
    # One thread renews every running job's lease; None: each job's on a thread of its own.
    heartbeats: Heartbeats | None = None
    # A session's token counts shared with the other workers; None: each process counts alone.
    token_counts: TokenCounts | None = None
    # The tenants' model spend and budgets; None: neither counted nor checked.
    usage: TenantUsage | None = None
    # The summarizer of an automatic compaction over its tenant's model budget (no model
    # call); None: such a compaction is refused instead.
    deterministic: Callable[[], Summarizer] | None = None
    # What planning keeps from one job to the next (``worker.compaction.caches``: bounded, by
    # object identity): every compaction and branch job of the process plans with this one.
    plan_caches: PlanCaches = field(default_factory=PlanCaches)
    # Per-tenant concurrency caps (max_running); None: no cap is applied.
    slots: TenantSlots | None = None
    # A job's start in one round trip (with ``slots`` and ``usage``); None: the ports' separate
    # calls (a Redis Cluster: worker.service._delivery_start).
    starts: JobStarts | None = None
    on_close: list[Callable[[], Any]] = field(default_factory=list)

    @property
    def worker_id(self) -> str:
        return self.settings.worker_id

    @property
    def compaction_settings(self) -> CompactionSettings:
        return CompactionSettings(keep_recent_tokens=self.settings.client.keep_recent_tokens,
                                  reserve_tokens=self.settings.client.reserve_tokens)

    def close(self) -> None:
        for fn in self.on_close:
            try:
                fn()
            except Exception as err:  # closing must not mask the reason of a shutdown
                log.warning("runtime close: %s", err)
