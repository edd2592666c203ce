"""Routing: task names, queues and Celery priorities, defined here once; the worker registers its
tasks under :data:`TASK_NAMES` and consumes :data:`QUEUES`. With the Redis transport a *lower*
Celery priority number is served first, and producers and consumers must agree on
:data:`BROKER_TRANSPORT_OPTIONS` (``priority_steps`` and ``sep`` name the Redis lists).

Apart from the wire models (:mod:`api_client.contract.wire`), which import it for a record's
default queue and priority; it takes the kinds and reasons it routes from
:mod:`api_client.contract.job_enums`, and imports nothing of the models.
"""

from __future__ import annotations

from bisect import bisect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from api_client.contract.job_enums import CompactReason, JobKind
from api_client.contract.keys import KeyLayout

__all__ = [
    "AMQP_MAX_PRIORITY",
    "BROKER_TRANSPORT_OPTIONS",
    "DRAFT_APPLIED_ROUTE",
    "PRIORITY_BRANCH",
    "PRIORITY_MANUAL",
    "PRIORITY_OVERFLOW",
    "PRIORITY_PRUNE",
    "PRIORITY_SPECULATIVE",
    "PRIORITY_THRESHOLD",
    "QUEUES",
    "QUEUE_BRANCH",
    "QUEUE_COMPACT",
    "QUEUE_PRUNE",
    "QUEUE_SPECULATIVE",
    "QUEUE_URGENT",
    "TASK_BRANCH_SUMMARY",
    "TASK_COMPACT",
    "TASK_DRAFT_APPLIED",
    "TASK_NAMES",
    "TASK_PRUNE",
    "TASK_SUMMARIZE",
    "Route",
    "all_routes",
    "broker_priority",
    "is_amqp",
    "queue_arguments",
    "queue_list",
    "redis_transport_options",
    "route_for",
    "shown_kwargs",
]


TASK_COMPACT = "compactor.compact"
TASK_PRUNE = "compactor.prune"
TASK_BRANCH_SUMMARY = "compactor.branch_summary"
# After a client applied a draft: a worker runs the session_compact hooks (arg: the job id).
TASK_DRAFT_APPLIED = "compactor.draft_applied"
TASK_SUMMARIZE = "compactor.summarize"
TASK_NAMES: Mapping[JobKind, str] = {
    JobKind.COMPACT: TASK_COMPACT,
    JobKind.PRUNE: TASK_PRUNE,
    JobKind.BRANCH_SUMMARY: TASK_BRANCH_SUMMARY,
    JobKind.SUMMARIZE: TASK_SUMMARIZE,
}

QUEUE_URGENT = "compactor.urgent"     # overflow recovery: the agent is stuck until it is done
QUEUE_COMPACT = "compactor.compact"   # threshold and manual compaction
QUEUE_PRUNE = "compactor.prune"
QUEUE_BRANCH = "compactor.branch"
QUEUE_SPECULATIVE = "compactor.speculative"  # drafts: never ahead of a real compaction
QUEUES: tuple[str, ...] = (QUEUE_URGENT, QUEUE_COMPACT, QUEUE_BRANCH, QUEUE_PRUNE,
                           QUEUE_SPECULATIVE)

# Redis transport: 0 is served first. Values sit on BROKER_TRANSPORT_OPTIONS' steps.
PRIORITY_OVERFLOW = 0
PRIORITY_THRESHOLD = 3
PRIORITY_BRANCH = 3
PRIORITY_MANUAL = 6
PRIORITY_PRUNE = 6
PRIORITY_SPECULATIVE = 9

BROKER_TRANSPORT_OPTIONS: Mapping[str, Any] = {
    "priority_steps": [0, 3, 6, 9],
    "sep": ":",
    "queue_order_strategy": "priority",
}


def queue_list(queue: str, priority: int, prefix: str = "") -> str:
    """kombu's Redis list for ``queue`` at ``priority``: ``<queue>`` for step 0, else
    ``<queue><sep><step>``, the step the largest of ``priority_steps`` not above the priority
    (kombu's ``Channel._q_for_pri``); ``prefix``: the transport's ``global_keyprefix``."""
    steps: list[int] = list(BROKER_TRANSPORT_OPTIONS["priority_steps"])
    step = steps[bisect(steps, priority) - 1]
    sep: str = BROKER_TRANSPORT_OPTIONS["sep"]
    return f"{prefix}{queue}{sep}{step}" if step else prefix + queue


def redis_transport_options(key_prefix: str) -> dict[str, Any]:
    """:data:`BROKER_TRANSPORT_OPTIONS` and kombu's ``global_keyprefix``: every key and channel
    of the broker (queue lists, unacked index, bindings, events) under ``<key_prefix>:broker:``
    (:attr:`~api_client.contract.keys.KeyLayout.broker`), so one ACL pattern covers them."""
    return {**BROKER_TRANSPORT_OPTIONS, "global_keyprefix": KeyLayout(key_prefix).broker}

# RabbitMQ (``amqp://``): priority queues (``x-max-priority``) serve the *higher* number first,
# so the Redis-style priority above is sent as ``AMQP_MAX_PRIORITY - priority``. Client and
# worker declare the queues with the same arguments (RabbitMQ refuses a mismatch).
AMQP_MAX_PRIORITY = 9
AMQP_SCHEMES = frozenset({"amqp", "amqps", "pyamqp"})


def is_amqp(broker_url: str) -> bool:
    return broker_url.partition("://")[0].lower() in AMQP_SCHEMES


def queue_arguments(broker_url: str) -> dict[str, Any]:
    """Arguments every Compactor queue is declared with on this broker."""
    return {"x-max-priority": AMQP_MAX_PRIORITY} if is_amqp(broker_url) else {}


def broker_priority(priority: int, broker_url: str) -> int:
    """The Celery message priority for a route's priority (lower = sooner) on this broker."""
    return AMQP_MAX_PRIORITY - priority if is_amqp(broker_url) else priority


@dataclass(frozen=True, slots=True)
class Route:
    task: str
    queue: str
    priority: int


_COMPACT_ROUTES = {
    CompactReason.OVERFLOW: Route(TASK_COMPACT, QUEUE_URGENT, PRIORITY_OVERFLOW),
    CompactReason.THRESHOLD: Route(TASK_COMPACT, QUEUE_COMPACT, PRIORITY_THRESHOLD),
    CompactReason.MANUAL: Route(TASK_COMPACT, QUEUE_COMPACT, PRIORITY_MANUAL),
    CompactReason.SPECULATIVE: Route(TASK_COMPACT, QUEUE_SPECULATIVE, PRIORITY_SPECULATIVE),
}
DRAFT_APPLIED_ROUTE = Route(TASK_DRAFT_APPLIED, QUEUE_COMPACT, PRIORITY_MANUAL)
_ROUTES = {
    JobKind.PRUNE: Route(TASK_PRUNE, QUEUE_PRUNE, PRIORITY_PRUNE),
    JobKind.BRANCH_SUMMARY: Route(TASK_BRANCH_SUMMARY, QUEUE_BRANCH, PRIORITY_BRANCH),
    # Its caller waits for the answer, as an agent waits for a threshold compaction.
    JobKind.SUMMARIZE: Route(TASK_SUMMARIZE, QUEUE_COMPACT, PRIORITY_THRESHOLD),
}


def route_for(kind: JobKind, reason: CompactReason | None = None) -> Route:
    """Where a job goes. ``reason`` only matters for ``compact`` (default ``manual``)."""
    if kind is JobKind.COMPACT:
        return _COMPACT_ROUTES[reason or CompactReason.MANUAL]
    return _ROUTES[kind]


def shown_kwargs(route: Route) -> str:
    """What Flower shows as a task's kwargs (``kwargsrepr``): a compaction's reason. The task
    itself takes only the job id; its name already says the kind."""
    reason = next((r for r, known in _COMPACT_ROUTES.items() if known == route), None)
    return "{}" if reason is None else repr({"reason": reason.value})


def all_routes() -> list[Route]:
    """Every route a job may take."""
    return [*_COMPACT_ROUTES.values(), *_ROUTES.values()]

