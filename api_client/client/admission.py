"""A tenant's admission of a new job: its quotas and its place in the fair order across
tenants (``lua/_admit.lua`` does both in one step; README "Tenants").

When the broker is the sessions' Redis the enqueue script admits the job itself (one round
trip). Otherwise ``admit.lua`` runs on the tenant's keys first and the job's task goes to the
priority it returned; a job that then coalesces into one already queued leaves the tenant's
queue again (as ``jobs_due`` does).
"""

from __future__ import annotations

import time
from bisect import bisect_right
from dataclasses import dataclass
from datetime import UTC, datetime

from api_client.contract.keys import KeyLayout, split_tenant
from api_client.contract.settings import ClientSettings
from api_client.contract.wire import BROKER_TRANSPORT_OPTIONS, CompactReason, JobKind, Route

__all__ = ["Admission", "admission", "lower_steps", "route_at_step"]

_STEPS: list[int] = list(BROKER_TRANSPORT_OPTIONS["priority_steps"])


@dataclass(frozen=True, slots=True)
class Admission:
    """The tenant keys and the policy ARGV of one admission (``_admit.lua``)."""

    keys: tuple[str, str, str]  # queued jobs, quota overrides, today's usage
    policy: str


def lower_steps(priority: int) -> list[int]:
    """The priority steps below ``priority`` a job of the fair order may move down to."""
    return _STEPS[bisect_right(_STEPS, priority):]


def route_at_step(route: Route, step: int) -> Route:
    """``route`` moved ``step`` priority lists down (0: itself)."""
    if step <= 0:
        return route
    lower = lower_steps(route.priority)
    return Route(route.task, route.queue, lower[min(step, len(lower)) - 1])


def _budget(settings: ClientSettings, kind: JobKind, reason: CompactReason | None) -> str:
    """How the model budget bears on the new job: ``refuse`` it when over, ``draft``: refuse
    at draft_budget_share of it (drafts stop first), ``none``: never at enqueue (a prune calls
    no model; an automatic compaction falls back to the deterministic summarizer)."""
    if kind is JobKind.PRUNE:
        return "none"
    if reason is CompactReason.SPECULATIVE:
        return "draft"
    if reason in (CompactReason.THRESHOLD, CompactReason.OVERFLOW):
        return "refuse" if settings.over_budget_summarizer == "refuse" else "none"
    return "refuse"


def admission(layout: KeyLayout, settings: ClientSettings, session_id: str, kind: JobKind,
              reason: CompactReason | None, route: Route) -> Admission:
    tenant = split_tenant(layout.qualified(session_id))[0]
    now = time.time()
    day = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d")
    fields = (int(now * 1000), route.priority, settings.fair_share_jobs, settings.weight,
              settings.queued_jobs_max, settings.tokens_per_day, settings.usd_per_day,
              _budget(settings, kind, reason), settings.draft_budget_share,
              settings.job_pending_ttl_s, len(lower_steps(route.priority)))
    return Admission((layout.tenant_queued(tenant), layout.tenant_quota(tenant),
                      layout.tenant_usage(tenant, day)), " ".join(map(str, fields)))
