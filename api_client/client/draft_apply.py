"""Speculative compaction drafts: their JSON shape and the client's one-round-trip apply.

A speculative job (``compact(reason="speculative")``) plans and summarizes like a threshold
compaction on a snapshot, then stores a **draft** at ``<p>:session:{<sid>}:draft`` instead of
committing (the session is untouched). ``compact(reason="threshold" | "overflow")`` without
custom instructions first runs ``apply_draft.lua``: one EVALSHA that either appends the draft's
compaction entry as a child of the current leaf and writes a finished (``succeeded``) job record
with its events, or names the cause (:data:`DISCARD_CAUSES`); the normal job then runs.

The validity rule. A draft summarises a prefix of the path up to its cut point; entries appended
after its snapshot only lengthen the kept part, and stay in the context after it, exactly once.
It is applied when all hold:

1. the session exists and the draft's snapshot leaf is on the current leaf's path (the prefix it
   summarised is unchanged: no navigation elsewhere);
2. no compaction entry was appended on that path since the snapshot;
3. it fits: ``tokensAfter`` (summary + kept entries at the snapshot, counted by the worker)
   plus the entries appended since (their stored JSON line lengths / 4, oh-my-pi's estimate,
   which overcounts) is at most ``window - reserve_tokens`` (the request's ``context_window``,
   else the window the draft was computed for: its ``threshold``; the reserve is the request's
   agent settings' when they name one);
4. it was planned with the request's agent settings (its ``agentKey`` is :func:`plan_key` of
   them: '' = the worker's own; docs/compaction.md);
5. it was planned with the agent's own cut (settings naming a ``summaryFormat``, ``pi-*``):
   only on the current state, its snapshot leaf *is* the current leaf (same state, same
   settings: the agent's cut by construction). What was appended since may move the agent's
   cut, so such a draft is never applied by this script once the session moved on.

A draft failing 1, 2 or 4 (or unreadable) is deleted (``offpath``, ``compacted``, ``settings``,
``corrupt``, ``nosession``). One failing only 3 (``grown``) or 5 (``moved``) is kept: it is
*stale*, not wrong, and the job that runs instead, or the next speculative job, commits it as
it is when the agent's cut of the current state is the draft's (``moved`` only), else extends
it (its summary as the ``<previous-summary>`` of an update over the new span only:
``worker.compaction.extension``). A request without agent settings (or without a summary
format) keeps rules 1-4: the draft's cut, planned a little earlier, is Compactor's.

Draft JSON fields (camelCase): ``jobId``, ``snapshotLeafId``, ``snapshotRevision``,
``firstKeptEntryId``, ``tokensBefore``, ``tokensAfter`` (of the snapshot's compacted context),
``summary``, ``shortSummary`` (when the entry has one), ``details``, ``fromExtension``,
``entry`` (the entry without id/parentId/timestamp), ``lineTail`` (the stored line after
``timestamp``, filled in by the script), ``snapshotEntries``, ``snapshotTokens``, ``createdAt``,
``ineffectiveAbove`` (the worker's loop-guard line, tokens), ``threshold`` (the line it must fit
under: window - reserve of the window it was computed for), ``usage`` (the model tokens it cost,
its extensions summed), ``leadMs`` (enqueue → stored), ``baseJobId`` (the draft it extended),
``agentKey`` (the agent settings it was planned with, :func:`plan_key`; absent = none).

The same call is the client's loop guard (docs/instant-compaction.md, loop guard): with
``loop_guard_max`` automatic compactions already counted for the session within the window, it
writes nothing and the client records the refusal (:func:`refuse`) instead of applying or
enqueuing; an applied draft is counted like a worker's commit and judged ``ineffective`` by the
same line (the request's ``context_window`` when it named one, else the worker's).
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from api_client.client.jobs import check_context_window
from api_client.contract.agent_settings import AgentSettings, plan_key
from api_client.contract.errors import CompactionLoopError, InvalidRequestError
from api_client.contract.job_enums import CompactReason, EventType, JobKind, JobState
from api_client.contract.job_events import event_writes, global_write
from api_client.contract.json_templates import SLOTS, Template, escaped, template
from api_client.contract.keys import KeyLayout
from api_client.contract.redis_flows import Command, Flow, Pipeline, Script, cmd
from api_client.contract.routing import QUEUE_COMPACT, route_for
from api_client.contract.settings import ClientSettings
from api_client.contract.stored_bytes import StoredBytes, utf8_len
from api_client.contract.wire import JobEvent, JobRecord, job_error_text, now_iso

__all__ = [
    "DISCARD_CAUSES", "DraftOutcome", "apply_draft", "check_call", "check_draft", "check_reply",
    "discard_note", "fit_line", "ineffective_above", "read_draft", "refuse", "uses_draft",
]

DISCARD_CAUSES: tuple[str, ...] = (
    "nodraft", "nosession", "corrupt", "offpath", "compacted", "grown", "noid",
    "settings",  # planned with other agent settings than the request's (docs/compaction.md)
    "moved",  # an agent-cut draft of an earlier state: kept, the job extends it (rule 5)
)
_WALK_LIMIT = 10_000
_CANDIDATES = 4


@dataclass(frozen=True, slots=True)
class DraftOutcome:
    """What an apply (or check) did: ``applied`` with the new job and entry, ``valid`` (check),
    or ``discarded`` with the cause (``nodraft``: there was none)."""

    status: str
    job_id: str | None = None
    entry: dict[str, Any] | None = None
    cause: str | None = None
    growth_tokens: int | None = None
    ineffective: bool | None = None
    stall_ms: float | None = None
    guard_count: int | None = None  # guarded: automatic compactions within the window
    lead_ms: int | None = None  # valid/stale (check): how long the draft took, enqueue → stored
    enqueue_reply: tuple[Any, ...] | None = None  # enqueued: enqueue.lua's reply

    @property
    def applied(self) -> bool:
        return self.status == "applied"


def uses_draft(reason: CompactReason | str, instructions: str | None) -> bool:
    """Only automatic compactions without custom instructions may take a draft."""
    return reason in (CompactReason.THRESHOLD, CompactReason.OVERFLOW) and not instructions


def _record(job_id: str, session_id: str, reason: CompactReason, ts: str,
            context_window: int | None = None, state: JobState = JobState.SUCCEEDED,
            **fields: Any) -> JobRecord:
    route = route_for(JobKind.COMPACT, reason)
    return JobRecord(id=job_id, kind=JobKind.COMPACT, session_id=session_id, state=state,
                     reason=reason, priority=route.priority, queue=route.queue, created_at=ts,
                     started_at=ts, finished_at=ts, context_window=context_window, **fields)


def ineffective_above(settings: ClientSettings, context_window: int | None,
                      reserve_tokens: int | None = None) -> int | None:
    """The loop guard's line for a request that named the agent's window: ``loop_guard_share
    × (window - reserve_tokens)`` tokens (the worker's rule, ``worker.service._loop_guard``;
    the request's reserve when its agent settings name one)."""
    reserve = reserve_tokens or settings.reserve_tokens
    if not context_window or context_window <= reserve:
        return None
    return int(settings.loop_guard_share * (context_window - reserve))


@dataclass(frozen=True, slots=True)
class _DraftTexts:
    """A draft job's record fields (one JSON array of field/value pairs: apply_draft.lua decodes
    it only when a draft applies, so the common call carries one argument, not thirty) and its
    two events, with stand-ins for job, session and time: rendered by the wire models once per
    reason, filled per call."""

    fields: Template
    compacted: Template
    done: Template

    def fill(self, job_id: str, session_id: str, ts: str) -> tuple[str, str, str]:
        raw = {"job": job_id, "sid": session_id, "ts": ts}
        in_json = {name: escaped(value) for name, value in raw.items()}
        return (self.fields.fill(raw, in_json), self.compacted.fill(raw, in_json),
                self.done.fill(raw, in_json))


@lru_cache(maxsize=8)
def _draft_texts(reason: CompactReason) -> _DraftTexts:
    ts = SLOTS["ts"]
    record = _record(SLOTS["job"], SLOTS["sid"], reason, ts)
    compacted = JobEvent.for_record(record, EventType.SESSION_COMPACT, timestamp=ts)
    done = JobEvent.completion(record, JobState.SUCCEEDED, duration_ms=0, timestamp=ts)
    fields = [x for pair in record.to_redis().items() for x in pair]
    return _DraftTexts(template(json.dumps(fields, ensure_ascii=False, separators=(",", ":"))),
                       template(compacted.to_json()), template(done.to_json()))


def fit_line(settings: ClientSettings, context_window: int | None,
             reserve_tokens: int | None = None) -> int | None:
    """The most tokens a draft's context may hold for a request that named the agent's window:
    ``window - reserve_tokens`` (should_compact's threshold; the request's reserve when its
    agent settings name one); None: the draft's own."""
    reserve = reserve_tokens or settings.reserve_tokens
    return None if not context_window else context_window - reserve


def _call(layout: KeyLayout, settings: ClientSettings, session_id: str, reason: CompactReason,
          mode: str, context_window: int | None = None, ahead: int = 0,
          agent: AgentSettings | None = None) -> tuple[Script, str]:
    s = layout.session(session_id)
    job_id = layout.new_job_id(session_id)
    ts = now_iso()
    fields, compacted, done = _draft_texts(reason).fill(job_id, layout.qualified(session_id), ts)
    if context_window is not None:  # the record's one field that is not a stand-in
        fields = f'{fields[:-1]},"contextWindow","{context_window}"]'
    key = plan_key(agent)  # the settings a draft must have been planned with
    if key:
        fields = f'{fields[:-1]},"agent",{json.dumps(key)}]'
    record_key = layout.job_record_prefix(session_id) + job_id.rpartition(":")[2]
    keys = [*s.data(), s.draft, record_key, s.events, s.compactions]
    reserve = None if agent is None else agent.reserve_tokens
    above = ineffective_above(settings, context_window, reserve)
    line = fit_line(settings, context_window, reserve)
    candidates = secrets.token_hex(4 * _CANDIDATES)  # _CANDIDATES ids of 8 hex digits
    args = [mode, job_id, str(_WALK_LIMIT), "" if line is None else str(line), ts,
            " ".join(candidates[i:i + 8] for i in range(0, len(candidates), 8)),
            str(settings.job_ttl_s), str(settings.session_event_maxlen), compacted, done,
            str(settings.loop_guard_max), repr(float(settings.loop_guard_window_s)),
            repr(time.time()), "" if above is None else str(above), fields, str(max(0, ahead)),
            str(settings.session_ttl_s), key]
    return Script("apply_draft", keys, args), job_id


def _global_copies(layout: KeyLayout, settings: ClientSettings, job_id: str,
                   events: tuple[tuple[str, str], ...], stall_ms: float | None,
                   *more: Command) -> Pipeline:
    # As the worker's commits: the session stream got the events atomically; the global stream
    # (another Cluster slot) gets its copies right after, with the measured stall (call →
    # entry in hand) on the record for the worker's stall metric.
    calls = [global_write(layout.global_events, settings,
                          {"type": kind, "job": job_id, "data": data}) for kind, data in events]
    if stall_ms is not None:
        calls.append(cmd("hset", layout.job(job_id).record, "stallMs", str(stall_ms)))
    return Pipeline((*calls, *more), transaction=False)


def apply_draft(layout: KeyLayout, settings: ClientSettings, session_id: str,
                reason: CompactReason | str, *, use_draft: bool = True,
                context_window: int | None = None, started: float | None = None,
                then: Script | None = None,
                agent: AgentSettings | None = None) -> Flow[DraftOutcome]:
    """The loop guard, then (``use_draft``) the session's draft if it is still valid: one
    EVALSHA (see the module doc). ``guarded``: the guard refused, nothing written yet (see
    :func:`refuse`); ``clear``: the guard let a request without a draft pass. ``started``
    (``time.perf_counter()`` at the call) stores the measured stall on the record.

    ``then`` (enqueue.lua's call: its keys and its one argument) runs in the same script when
    there was no draft to apply and the guard let the request pass (``compact_auto.lua``):
    ``enqueued`` with its reply.
    ``agent``: the request's agent settings; a draft planned with others is discarded
    (``settings``) and the normal job runs.
    """
    why = CompactReason(reason)
    if why not in (CompactReason.THRESHOLD, CompactReason.OVERFLOW):
        raise InvalidRequestError(f"a draft is applied by a threshold or overflow compaction, "
                                  f"not {why.value}")
    # The window goes into the record's JSON argument as written: a number, or nothing.
    context_window = check_context_window(context_window)
    script, job_id = _call(layout, settings, session_id, why, "apply" if use_draft else "guard",
                           context_window, agent=agent)
    if then is not None:  # compact_auto.lua's layout: apply_draft's keys and args, then then's
        script = Script("compact_auto", [*script.keys, *then.keys], [*script.args, *then.args],
                        then.rescue)
    raw = yield script
    if str(raw[0]) == "enqueued":
        return DraftOutcome("enqueued", enqueue_reply=tuple(raw[1:]))
    reply = [str(x) for x in raw]
    if reply[0] == "guarded":
        return DraftOutcome("guarded", guard_count=int(reply[1]))
    if reply[0] != "applied":
        return DraftOutcome(reply[0], cause=reply[1] if len(reply) > 1 else None)
    _, _, _, line, result, ev1, ev2 = reply
    stall_ms = None if started is None else round((time.perf_counter() - started) * 1000, 3)
    # The entry's bytes join the tenant's count (never refused, as a worker's commit) in the same
    # round trip: a client that dies before it leaves the count short by one compaction entry.
    counted = StoredBytes.of(layout, session_id, cluster=settings.redis_cluster,
                             counted=not settings.tenant_inbox)
    yield _global_copies(layout, settings, job_id, (
        (EventType.SESSION_COMPACT.value, ev1), (EventType.COMPACTION_END.value, ev2)),
        stall_ms, counted.as_command("add", utf8_len(line)))
    return DraftOutcome("applied", job_id=job_id, entry=dict(json.loads(line)),
                        ineffective=json.loads(result).get("ineffective"), stall_ms=stall_ms)


def refuse(layout: KeyLayout, settings: ClientSettings, session_id: str,
           reason: CompactReason | str, count: int,
           context_window: int | None = None, agent: AgentSettings | None = None) -> Flow[str]:
    """The loop guard refused an automatic compaction at the client: a failed job record and
    its ``compaction_end`` event, exactly as a worker's refusal (``result.loopGuard``; ``wait()``
    raises :class:`CompactionLoopError`), without a task message or a model call. One pipeline;
    returns the job id."""
    why = CompactReason(reason)
    job_id = layout.new_job_id(session_id)
    err = CompactionLoopError.tripped(session_id, count, settings.loop_guard_max,
                                      settings.loop_guard_window_s)
    error = job_error_text(JobKind.COMPACT, JobState.FAILED, why, str(err))
    result = {"loopGuard": err.to_result()}
    record = _record(job_id, layout.qualified(session_id), why, now_iso(), context_window,
                     JobState.FAILED,
                     error=error, result=result, agent=agent)
    event = JobEvent.completion(record, JobState.FAILED, error=error, result=result,
                                duration_ms=0)
    key = layout.job(job_id).record
    yield Pipeline((
        Command("hset", (key,), {"mapping": record.to_redis()}),
        cmd("expire", key, settings.job_ttl_s),
        *event_writes(layout, settings, event, whole_session=True),
    ), transaction=False)
    return job_id


def check_call(layout: KeyLayout, settings: ClientSettings, session_id: str,
               context_window: int | None = None, ahead: int = 0,
               agent: AgentSettings | None = None) -> Script:
    """apply_draft.lua in ``check`` mode (``ahead``: tokens the context will still grow before
    the draft would be applied; ``agent``: the request's settings, which the draft's must be)."""
    return _call(layout, settings, session_id, CompactReason.THRESHOLD, "check",
                 check_context_window(context_window), ahead, agent)[0]


def check_reply(reply: list[str]) -> DraftOutcome:
    """``valid`` (it would apply), ``stale`` (kept, but it no longer fits: extend it) or
    ``discarded`` with the cause (deleted; ``nodraft``: there was none)."""
    if reply[0] in ("valid", "stale"):
        return DraftOutcome(reply[0], growth_tokens=int(reply[1]),
                            lead_ms=int(reply[2]) if reply[2:] and reply[2] else None)
    return DraftOutcome("discarded", cause=reply[1])


def check_draft(layout: KeyLayout, settings: ClientSettings, session_id: str,
                context_window: int | None = None, ahead: int = 0,
                agent: AgentSettings | None = None) -> Flow[DraftOutcome]:
    """Would the draft apply now (see the validity rule)? Read-only unless it is invalid
    (then it is deleted)."""
    reply = yield check_call(layout, settings, session_id, context_window, ahead, agent)
    return check_reply([str(x) for x in reply])


def discard_note(layout: KeyLayout, settings: ClientSettings, session_id: str, job_id: str,
                 reason: CompactReason | str, cause: str, *, created: bool) -> Flow[None]:
    """After a discarded draft: the ``draft_discarded`` event (on the job that runs instead) and,
    on a job this request created, its ``draftDiscarded`` field (the worker's metric)."""
    record = JobRecord(id=job_id, kind=JobKind.COMPACT, session_id=layout.qualified(session_id),
                       reason=CompactReason(reason), queue=QUEUE_COMPACT)
    event = JobEvent.for_record(record, EventType.DRAFT_DISCARDED, error=cause)
    calls: list[Command] = []
    if created:
        calls.append(cmd("hset", layout.job(job_id).record, "draftDiscarded", cause))
    yield Pipeline((*calls, *event_writes(layout, settings, event, whole_session=True)),
                   transaction=False)


def read_draft(layout: KeyLayout, session_id: str) -> Flow[dict[str, Any] | None]:
    """The stored draft (for inspection), or None."""
    raw = yield cmd("get", layout.session(session_id).draft)
    return None if raw is None else dict(json.loads(raw))
