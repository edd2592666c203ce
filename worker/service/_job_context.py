"""What one job's steps share, what a successful job hands back, and how new entries look."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from api_client.contract.job_enums import EventType
from api_client.contract.session import JsonObject
from api_client.contract.usage import DayUsage
from api_client.contract.wire import AgentSettings, JobEvent, JobRecord, TokenUsage, now_iso
from worker.compaction.prepare import CompactionSettings
from worker.llm import Summarizer, SummaryResult, Usage
from worker.service._control import JobControl
from worker.service._outage import ride_out
from worker.service.ports import Runtime
from worker.store.paths import FirstRead, PathSnapshot, Reach
from worker.tokens import JobTokenizer, Tokenizer, counts_of, get_tokenizer

__all__ = [
    "JobContext",
    "JobSuccess",
    "agent_compaction_settings",
    "branch_reserve_tokens",
    "branch_summary_entry",
    "calls_summary",
    "compaction_entry",
    "job_tokenizer",
]


@dataclass
class JobContext:
    rt: Runtime
    record: JobRecord          # as of this delivery (state running, attempt counted)
    control: JobControl
    summarizer: Summarizer
    # What the job's start read for the budget check (the day's spend, the tenant's quota:
    # worker.store.job_start); None: the check reads them itself.
    budget: tuple[DayUsage, dict[str, str]] | None = None
    # compaction_start went with the job's start (start_job.lua): the job does not publish it.
    start_published: bool = False
    # The start of the job's read of its session's path, done with its start (start_job.lua):
    # the job's first load_path goes on from it; None: read (a re-plan always reads again).
    first_read: FirstRead | None = None
    # False: the start saw no daily budget that may apply; nothing was reserved for the job,
    # and its end gives nothing back (docs/tenants.md).
    may_reserve: bool = True
    # Set when the tenant's model budget put the deterministic summarizer in the model's place
    # (``_model_budget``): the record's and the completion event's ``result.overBudget``.
    over_budget: dict[str, Any] | None = field(default=None, init=False)
    # Each message object counted once in the process: unchanged entries are the same objects
    # in the next job's snapshot (the session store's entry cache).
    tokenizer: JobTokenizer = field(init=False)
    # An event of this delivery is on the session's stream: it set the stream's TTL.
    _stream_ttl_set: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        inner = job_tokenizer(self.rt.tokenizer, self.record.agent)
        self.tokenizer = JobTokenizer(inner, counts_of(inner))
        self._stream_ttl_set = self.start_published  # the start's event set it

    @property
    def compaction_settings(self) -> CompactionSettings:
        """The plan's keep and reserve: the request's agent settings, field by field, else
        the worker's (docs/compaction.md)."""
        return agent_compaction_settings(self.rt.compaction_settings, self.record.agent)

    @property
    def cut_version(self) -> str | None:
        """The agent whose cut the plan makes (its summary format's version: pi 1.6 or 0.73,
        ``worker.compaction.agent_cut``); None: Compactor's own cut."""
        return None if self.record.agent is None else self.record.agent.summary_format

    @property
    def branch_reserve_tokens(self) -> int:
        return branch_reserve_tokens(self.rt.settings.branch_reserve_tokens, self.record.agent)

    @property
    def job_id(self) -> str:
        return self.record.id

    @property
    def session_id(self) -> str:
        return self.record.session_id

    def load_path(self, reach: Reach) -> PathSnapshot:
        """The leaf's path as far as ``reach`` (``Sessions.load_path``), from what the job's
        start read when this is the job's first read (a re-plan reads afresh)."""
        first, self.first_read = self.first_read, None
        if first is None:
            return self.rt.sessions.load_path(self.session_id, reach)
        return self.rt.sessions.load_path(self.session_id, reach, first)

    def publish_start(self) -> None:
        """``compaction_start``, unless the job's start wrote it already."""
        if not self.start_published:
            self.publish(EventType.COMPACTION_START)

    def publish(self, type: EventType, **fields: Any) -> None:
        """A non-terminal event (start, the committed entry, stale)."""
        event = JobEvent.for_record(self.record, type, **fields)
        if self.rt.jobs.publish(event, ttl_set=self._stream_ttl_set):
            self._stream_ttl_set = True

    def announce(self, type: EventType, **fields: Any) -> tuple[JobEvent, ...]:
        """An event of the committed change (``session_compact``) for the job's end to write
        (:attr:`JobSuccess.announce`) where the end is one step (one Redis: one round trip for
        both); else published now, waited out as a publish after a commit is."""
        if self.rt.jobs.ends_in_one_step:
            return (JobEvent.for_record(self.record, type, **fields),)
        ride_out(self.control, "publish", lambda: self.publish(type, **fields))
        return ()


# The tokenizers a request may name, built once per process (their per-message counts serve
# every job that names them, as the worker's own do).
_NAMED: dict[str, Tokenizer] = {}


def job_tokenizer(own: Tokenizer, agent: AgentSettings | None) -> Tokenizer:
    """The tokenizer a job plans with: the one its agent settings name (``estimate`` is pi's
    chars/4), else the worker's own."""
    name = None if agent is None else agent.tokenizer
    if name is None or name == own.name:
        return own
    if name not in _NAMED:
        _NAMED[name] = get_tokenizer(name)
    return _NAMED[name]


def agent_compaction_settings(own: CompactionSettings,
                              agent: AgentSettings | None) -> CompactionSettings:
    """``own`` with what ``agent`` names in its place (keep-recent and reserve tokens)."""
    if agent is None:
        return own
    return CompactionSettings(
        keep_recent_tokens=agent.keep_recent_tokens or own.keep_recent_tokens,
        reserve_tokens=agent.reserve_tokens or own.reserve_tokens)


def branch_reserve_tokens(own: int, agent: AgentSettings | None) -> int:
    """The branch summary's reserve: the agent's ``branchReserveTokens``, else the worker's."""
    return own if agent is None or agent.branch_reserve_tokens is None else (
        agent.branch_reserve_tokens)


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
    # Events of the commit the job's end writes, before its completion event, in its one step
    # (JobContext.announce: only where the end is one step).
    announce: tuple[JobEvent, ...] = ()


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
    """A compaction entry without id/parentId (the commit script adds them:
    docs/rules.md "Session file")."""
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
    """branchWithSummary (docs/rules.md "Tree, leaf and labels"): ``fromId`` is the destination, or
    ``"root"``."""
    entry: JsonObject = {"type": "branch_summary", "timestamp": now_iso(),
                         "fromId": destination or "root", "summary": summary}
    if details is not None:
        entry["details"] = details
    entry["fromExtension"] = from_extension
    return entry
