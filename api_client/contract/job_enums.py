"""The job enums every side shares: a job's kind, a compaction's reason, a job's state and an
event's type (their values are what the wire and Redis hold).

A leaf apart from :mod:`api_client.contract.wire`: the routes
(:mod:`api_client.contract.routing`) need the kinds and reasons, and the wire models need a
route's default queue and priority; with the enums here both import them and neither imports
the other. It imports nothing of the contract.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["TERMINAL_STATES", "CompactReason", "EventType", "JobKind", "JobState"]


class JobKind(StrEnum):
    COMPACT = "compact"
    PRUNE = "prune"
    BRANCH_SUMMARY = "branch_summary"
    # No session: a system prompt and a prompt through the model router (the HTTP API's
    # /v1/summarize); its record lives under a session id of its own (summarize-<hex>).
    SUMMARIZE = "summarize"


class CompactReason(StrEnum):
    MANUAL = "manual"
    THRESHOLD = "threshold"
    OVERFLOW = "overflow"
    # Plan and summarize like threshold, but store a draft instead of committing (drafts.py).
    SPECULATIVE = "speculative"


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})


class EventType(StrEnum):
    COMPACTION_START = "compaction_start"
    COMPACTION_END = "compaction_end"     # terminal event of every compact job
    SESSION_COMPACT = "session_compact"   # the committed compaction entry
    PRUNE_END = "prune_end"               # terminal event of a successful prune job
    BRANCH_SUMMARY = "branch_summary"     # the committed branch_summary entry
    SESSION_TREE = "session_tree"         # terminal event of a successful branch job
    CANCELLED = "cancelled"               # terminal: prune/branch job cancelled
    FAILED = "failed"                     # terminal: prune/branch job failed
    STALE = "stale"                       # a result was discarded; the job re-plans
    DRAFT_SAVED = "draft_saved"           # a speculative job stored its draft
    DRAFT_DISCARDED = "draft_discarded"   # a draft could not be applied (``error`` = cause)
    SUMMARIZE_END = "summarize_end"       # terminal event of a successful summarize job
    MODEL_PROGRESS = "model_progress"     # a chunked summary: result {call, calls, candidate}

