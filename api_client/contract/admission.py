"""A tenant's admission of a new job: its quotas and its place in the fair order across
tenants (``lua/_admit.lua`` does both in one step; docs/tenants.md).

On one Redis the enqueue script admits the job itself, after its single-flight check (a job that
coalesces is never admitted), and places its task message in the fair order when the broker is
that Redis; a Redis broker of its own gets the message at the tag the script returns
(``place.lua``), RabbitMQ in arrival order. On a Redis Cluster the tenant's keys lie in another
slot than the session's: ``admit.lua`` runs first, and a job that then coalesces into one
already queued leaves the tenant's queue again (as ``jobs_due`` does).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from api_client.contract.job_enums import CompactReason, JobKind
from api_client.contract.keys import KeyLayout
from api_client.contract.reservations import admission_estimate
from api_client.contract.routing import Route
from api_client.contract.settings import ClientSettings

__all__ = ["Admission", "admission", "due_ms"]


@dataclass(frozen=True, slots=True)
class Admission:
    """The tenant keys and the policy ARGV of one admission (``_admit.lua``)."""

    keys: tuple[str, str, str]  # queued jobs, quota overrides, today's usage
    policy: str
    fair_index: tuple[str, str]  # the route's queue list's tags and messages


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
              reason: CompactReason | None, route: Route,
              summary_input: Mapping[str, Any] | None = None,
              context_window: int | None = None) -> Admission:
    """The admission of a new job; ``summary_input``: a summarize job's request (its prompt
    and output budget are its reservation), ``context_window``: the request's, which caps a
    compaction's (api_client/contract/reservations.py)."""
    tenant, plain = layout.resolve(session_id)
    now = time.time()
    day = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d")
    fields = (int(now * 1000), route.priority, settings.fair_delay_ms, settings.weight,
              settings.queued_jobs_max, settings.tokens_per_day, settings.usd_per_day,
              _budget(settings, kind, reason), settings.draft_budget_share,
              settings.job_pending_ttl_s,
              *_reservation(kind, summary_input, context_window, plain))
    return Admission((layout.tenant_queued(tenant), layout.tenant_quota(tenant),
                      layout.tenant_usage(tenant, day)), " ".join(map(str, fields)),
                     layout.fair_index(route.queue, route.priority))


def _reservation(kind: JobKind, summary_input: Mapping[str, Any] | None,
                 context_window: int | None, field: str) -> tuple[int, int, int, int, str]:
    """estimate, fit, span cap, output and the session's field of the bytes count (an id has
    no white space: one word of the policy)."""
    e = admission_estimate(kind, summary_input, context_window)
    return e.tokens, int(e.fit), e.span_cap, e.output, field


def due_ms(settings: ClientSettings) -> int:
    """When the workers' sweep first looks at a new job (``requeue_after_s`` from now)."""
    return int((time.time() + settings.requeue_after_s) * 1000)
