"""The stale loop: plan on a snapshot, commit conditionally, re-plan a bounded number of times."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from api_client.contract.errors import StaleSnapshotError
from api_client.contract.job_enums import EventType
from worker.observability import metrics
from worker.service._job_context import JobContext
from worker.service._job_stops import JobCancelled, LeaseLostError
from worker.store import CommitOutcome, CommitStatus

__all__ = ["settle", "with_replans"]

T = TypeVar("T")


def settle(ctx: JobContext, outcome: CommitOutcome, what: str, round_no: int) -> bool:
    """True when the change is in (by this delivery or an earlier one); False: re-plan.

    Raises when the job must stop: cancelled meanwhile, or finished by someone else.
    """
    if outcome.applied:
        return True
    if outcome.status is CommitStatus.CANCELLED:
        raise JobCancelled()
    if outcome.status is CommitStatus.FINISHED:
        raise LeaseLostError()
    metrics.observe_stale(ctx.record.kind.value)
    ctx.publish(EventType.STALE, result={
        "step": what, "replan": round_no + 1, "maxReplans": ctx.rt.settings.stale_replans,
        "revision": outcome.revision,
    })
    return False


def with_replans(ctx: JobContext, what: str, attempt: Callable[[int], T | None]) -> T:
    """Run ``attempt(round)`` until it returns a value; None means stale. Bounded."""
    limit = ctx.rt.settings.stale_replans
    for round_no in range(limit + 1):
        ctx.control.check()
        value = attempt(round_no)
        if value is not None:
            return value
    raise StaleSnapshotError(
        f"the session kept changing during the {what}: gave up after {limit + 1} snapshots"
    )
