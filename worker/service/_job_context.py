"""What one job's steps share, what a successful job hands back, and how new entries look."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from api_client.contract.session import JsonObject
from api_client.contract.wire import EventType, JobEvent, JobRecord, TokenUsage, now_iso
from worker.llm import Summarizer, SummaryResult, Usage
from worker.service._control import JobControl
from worker.service.ports import Runtime
from worker.tokens import JobTokenizer, counts_of

__all__ = [
    "JobContext",
    "JobSuccess",
    "branch_summary_entry",
    "calls_summary",
    "compaction_entry",
]


@dataclass
class JobContext:
    rt: Runtime
    record: JobRecord          # as of this delivery (state running, attempt counted)
    control: JobControl
    summarizer: Summarizer
    # Set when the tenant's model budget put the deterministic summarizer in the model's place
    # (``_model_budget``): the record's and the completion event's ``result.overBudget``.
    over_budget: dict[str, Any] | None = field(default=None, init=False)
    # Each message object counted once in the process: unchanged entries are the same objects
    # in the next job's snapshot (the session store's entry cache).
    tokenizer: JobTokenizer = field(init=False)

    def __post_init__(self) -> None:
        self.tokenizer = JobTokenizer(self.rt.tokenizer, counts_of(self.rt.tokenizer))

    @property
    def job_id(self) -> str:
        return self.record.id

    @property
    def session_id(self) -> str:
        return self.record.session_id

    def publish(self, type: EventType, **fields: Any) -> None:
        """A non-terminal event (start, the committed entry, stale)."""
        self.rt.jobs.publish(JobEvent.for_record(self.record, type, **fields))


@dataclass
class JobSuccess:
    entry: JsonObject | None = None
    result: dict[str, Any] = field(default_factory=dict)  # stored on the record
    model: str | None = None
    usage: Usage | None = None
    event: dict[str, Any] = field(default_factory=dict)   # extra completion-event fields
    # Speculation's tokens, apart from usage (record and completion event: draftUsage), and
    # their USD (draftCostUsd).
    draft_usage: TokenUsage | None = None
    draft_cost_usd: float | None = None


def calls_summary(
    calls: Sequence[SummaryResult],
) -> tuple[str | None, Usage | None, dict[str, Any]]:
    """(model of the main call, summed usage, per-call detail for the record)."""
    if not calls:
        return None, None, {}
    usage = Usage()
    for call in calls:
        usage = usage + call.usage
    detail = {
        "modelAttempts": sum(call.attempts for call in calls),
        "models": sorted({_label(call) for call in calls}),
        "costUsd": round(sum(call.cost_usd for call in calls), 8),
    }
    return _label(calls[0]), usage, detail


def _label(call: SummaryResult) -> str:
    if call.provider and call.model and call.model != call.provider:
        return f"{call.provider}/{call.model}"
    return call.model or call.provider


def compaction_entry(*, summary: str, short_summary: str | None, first_kept_entry_id: str,
                     tokens_before: int, details: Any, preserve_data: Any,
                     from_extension: bool) -> JsonObject:
    """A compaction entry without id/parentId (the commit script adds them, SPEC §1.3)."""
    entry: JsonObject = {"type": "compaction", "timestamp": now_iso(), "summary": summary}
    if short_summary is not None:
        entry["shortSummary"] = short_summary
    entry["firstKeptEntryId"] = first_kept_entry_id
    entry["tokensBefore"] = tokens_before
    if details is not None:
        entry["details"] = details
    if preserve_data is not None:
        entry["preserveData"] = preserve_data
    entry["fromExtension"] = from_extension
    return entry


def branch_summary_entry(*, destination: str | None, summary: str, details: Any,
                         from_extension: bool) -> JsonObject:
    """SPEC §1.4 branchWithSummary: ``fromId`` is the destination, or ``"root"``."""
    entry: JsonObject = {"type": "branch_summary", "timestamp": now_iso(),
                         "fromId": destination or "root", "summary": summary}
    if details is not None:
        entry["details"] = details
    entry["fromExtension"] = from_extension
    return entry
