"""A job's record and its events, as both sides read and end them.

``finish`` ends a job exactly once: it sets the terminal state, clears the single-flight key,
drops the lease, sets the record TTL and publishes the completion event atomically
(``finish.lua``); a second call changes nothing and publishes nothing. The worker finishes the
jobs it ran; the client finishes a job it could not send (failed) and a queued one it cancels.
Each operation is a flow (:mod:`api_client.contract.redis_flows`), run by either side's shell.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, NoReturn

import redis

from api_client.contract.errors import (
    EntryNotFoundError,
    InvalidRequestError,
    JobNotFoundError,
    QuotaExceededError,
    SessionNotFoundError,
)
from api_client.contract.job_enums import JobState
from api_client.contract.job_events import event_fields, global_write
from api_client.contract.keys import (
    DEFAULT_TENANT,
    INFLIGHT_SPECULATIVE,
    JOB_KINDS,
    KeyLayout,
    tenant_of_job,
)
from api_client.contract.redis_flows import Command, Flow, Rescue, Script, cmd
from api_client.contract.reservations import release
from api_client.contract.settings import ClientSettings
from api_client.contract.usage import SpendAdd, spend_script_part
from api_client.contract.wire import JobEvent, JobRecord, TokenUsage, now_iso

__all__ = [
    "checked_enum", "completion_for", "end_job", "finish_call", "finish_job", "get_record",
    "global_copy", "job_rescue", "record_entry", "result_fields", "stream_start",
]


def checked_enum(cls: type[StrEnum], value: object, what: str) -> Any:
    try:
        return cls(value)  # type: ignore[arg-type]
    except ValueError:
        allowed = ", ".join(m.value for m in cls)  # type: ignore[attr-defined]
        raise InvalidRequestError(f"invalid {what} {value!r} (one of: {allowed})") from None


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _usage(usage: Any) -> TokenUsage | None:
    if usage is None or isinstance(usage, TokenUsage):
        return usage
    if isinstance(usage, Mapping):
        return TokenUsage.model_validate(usage)
    # The model layer's Usage dataclass (input, output, cache_read, cache_write).
    return TokenUsage(**{k: getattr(usage, k, 0) for k in ("input", "output", "cache_read",
                                                            "cache_write")})


def result_fields(**result: Any) -> list[str]:
    """Record field pairs for finish(): entry, resultEntryId, error, model, usage, draftUsage,
    costUsd, draftCostUsd, result. (finish.lua leaves ``entry`` out when the session holds the
    entry ``resultEntryId`` names: readers read it there.)"""
    out: list[str] = []
    for key, field in (("usage", "usage"), ("draft_usage", "draftUsage")):
        usage = _usage(result.get(key))
        if usage is not None:
            out += [field, _dump(usage.to_wire())]
    for key, field, as_json in (("entry", "entry", True), ("result", "result", True),
                                ("result_entry_id", "resultEntryId", False),
                                ("error", "error", False), ("model", "model", False),
                                ("cost_usd", "costUsd", False),
                                ("draft_cost_usd", "draftCostUsd", False)):
        value = result.get(key)
        if value is not None:
            out += [field, _dump(value) if as_json else str(value)]
    if "resultEntryId" not in out and isinstance(result.get("entry"), Mapping):
        entry_id = result["entry"].get("id")
        if isinstance(entry_id, str):
            out += ["resultEntryId", entry_id]
    return out


def finish_call(layout: KeyLayout, settings: ClientSettings, job_id: str, state: JobState,
                event: JobEvent | None, mode: str, extra: list[str]) -> tuple[list[str], list[str]]:
    jk = layout.job(job_id)
    # finish.lua's KEYS 3-5: the single-flight kinds (a summarize job has no such key).
    keys = [jk.record, jk.lease, *(jk.session.inflight(k) for k in JOB_KINDS),
            jk.session.events, jk.session.inflight(INFLIGHT_SPECULATIVE), jk.session.entries]
    fields = event_fields(event) if event is not None else {"type": "", "data": ""}
    args = [job_id, state.value, now_iso(), str(settings.job_ttl_s),
            str(settings.session_event_maxlen), fields["type"], fields["data"], mode,
            str(settings.session_ttl_s), *extra]
    return keys, args


def completion_for(state: JobState | str, event: JobEvent | None, record: JobRecord | None,
                   result: Mapping[str, Any]) -> tuple[JobState, JobEvent]:
    """The terminal state and completion event for finish() (built from the record if needed)."""
    final: JobState = checked_enum(JobState, state, "job state")
    if not final.terminal:
        raise InvalidRequestError(f"finish() needs a terminal state, not {final.value}")
    if event is None:
        assert record is not None
        payload = {k: v for k, v in result.items()
                   if k not in ("result_entry_id", "usage", "draft_usage")}
        event = JobEvent.completion(record, final, **payload)
    return final, event


def quota_exceeded(tenant: str, reply: str) -> QuotaExceededError:
    """``<quota> <limit> <value>`` of a ``COMPACTOR_QUOTA`` reply (``_admit.lua``) as the
    error; a per-day quota resets at the next UTC midnight."""
    quota, limit, value = reply.split()
    resets_at = None
    if quota.endswith("_per_day"):
        midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        resets_at = (midnight + timedelta(days=1)).isoformat().replace("+00:00", "Z")
    return QuotaExceededError(tenant, quota=quota, limit=_number(limit), value=_number(value),
                              resets_at=resets_at)


def _number(text: str) -> float:
    number = float(text)
    return int(number) if number.is_integer() else number


def job_rescue(job_id: str, session_id: str = "", tenant: str = DEFAULT_TENANT) -> Rescue:
    """Error replies of the job scripts: ``COMPACTOR_NOJOB`` → :class:`JobNotFoundError`,
    enqueue's ``COMPACTOR_NOSESSION`` / ``COMPACTOR_NOENTRY <id>`` → the session's errors,
    ``COMPACTOR_QUOTA ...`` → :class:`QuotaExceededError` of ``tenant``."""
    def rescue(err: redis.ResponseError) -> NoReturn:
        code, _, arg = str(err).partition(" ")
        if code == "COMPACTOR_QUOTA":
            raise quota_exceeded(tenant, arg) from err
        if code == "COMPACTOR_NOJOB":
            raise JobNotFoundError(job_id) from err
        if code == "COMPACTOR_NOSESSION":
            raise SessionNotFoundError(f"Session {session_id} not found") from err
        if code == "COMPACTOR_NOENTRY":
            raise EntryNotFoundError(arg) from err
        raise err
    return rescue


def get_record(layout: KeyLayout, job_id: str) -> Flow[JobRecord]:
    """The job's record with the entry it names read from its session in the same step
    (``lua/read_record.lua``: a finished job's record holds no copy of an entry its session
    holds; an entry the session no longer holds reads as absent)."""
    jk = layout.job(job_id)
    reply = yield Script("read_record", [jk.record, jk.session.entries], [])
    line, flat = str(reply[0]), [str(v) for v in reply[1:]]
    if not flat:
        raise JobNotFoundError(job_id)
    return JobRecord.from_redis(dict(zip(flat[::2], flat[1::2], strict=True)), line or None)


def record_entry(layout: KeyLayout, job_id: str, fields: Mapping[str, str]) -> Flow[JobRecord]:
    """The record of ``fields`` (read by a caller's own pipeline) with the entry it names
    read from its session: one ``HGET`` more when it names one it does not hold."""
    entry_id = JobRecord.entry_to_read(fields)
    line = None
    if entry_id is not None:
        line = yield cmd("hget", layout.job(job_id).session.entries, entry_id)
    return JobRecord.from_redis(fields, line)


def global_copy(layout: KeyLayout, settings: ClientSettings, event: JobEvent) -> Command:
    """The completion event's copy on the global stream (:func:`job_events.global_write`).
    finish.lua wrote it to the session stream atomically with the job's end."""
    return global_write(layout.events_of(event.session_id), settings, event_fields(event))


def finish_job(layout: KeyLayout, settings: ClientSettings, job_id: str,
               state: JobState | str, event: JobEvent | None, record: JobRecord | None,
               result: Mapping[str, Any], *, release_held: bool = True) -> Flow[bool]:
    """End the job once; True if this call ended it. ``result``: ``entry`` (dict),
    ``result_entry_id``, ``error``, ``model``, ``usage``, ``result`` (prune), plus event-only
    fields (``tokens_before``, ``duration_ms``, ...) used when ``event`` is not given.
    ``release_held``: give back the model budget the job holds (False: its worker's start saw no
    daily budget, so nothing was reserved: docs/tenants.md)."""
    if event is None and record is None:
        record = yield from get_record(layout, job_id)
    final, event = completion_for(state, event, record, result)
    keys, args = finish_call(layout, settings, job_id, final, event, "finish",
                             result_fields(**result))
    reply = yield Script("finish", keys, args, job_rescue(job_id))
    changed, before = int(reply[0]), str(reply[1])
    if changed:
        yield global_copy(layout, settings, event)
        # Ended (a queued job cancelled or failed to send): out of the tenant's queued jobs
        # (the workers' key: a client on the tenant's own ACL user leaves it to their sweep).
        # A running job left them when it started (JobStore.start).
        if not settings.tenant_inbox:
            if before != JobState.RUNNING.value:
                yield cmd("zrem", layout.queued_of_job(job_id), job_id)
            if release_held:
                yield release(layout, job_id)  # the model budget it held (reservations.py)
    return bool(changed)


def end_job(layout: KeyLayout, settings: ClientSettings, job_id: str,
            state: JobState | str, event: JobEvent | None, record: JobRecord | None,
            result: Mapping[str, Any], spend: SpendAdd | None = None,
            announce: Sequence[JobEvent] = (), *, release_held: bool = True) -> Flow[bool]:
    """:func:`finish_job` in one round trip, with the delivery's ``spend`` counted and the job's
    reservation given back in the same step (``lua/end_job.lua``): a worker's end of a job on
    one Redis. ``announce``: events of the job's commit (a compaction's ``session_compact``)
    written in the same step, before the completion event, each with its global copy. Not on
    a Redis Cluster (the tenant's keys, the global stream: other slots) nor for a client on its
    tenant's own ACL user: :func:`finish_job` there. ``release_held``: as :func:`finish_job`'s.
    """
    if event is None and record is None:
        record = yield from get_record(layout, job_id)
    final, event = completion_for(state, event, record, result)
    keys, args = finish_call(layout, settings, job_id, final, event, "finish",
                             result_fields(**result))
    tenant = tenant_of_job(job_id)
    counted_keys, counted_args = spend_script_part(layout, spend)
    keys = [*keys, layout.events_of(event.session_id), layout.tenant_reserved(tenant),
            layout.tenant_queued(tenant), *counted_keys]
    told = [part for e in announce for part in (e.type.value, event_fields(e)["data"])]
    args = [str(settings.event_stream_maxlen), *counted_args, "1" if release_held else "",
            str(len(announce)), *told, *args]
    reply = yield Script("end_job", keys, args, job_rescue(job_id))
    return bool(int(reply[0]))


_STREAM_ID = re.compile(r"\d+(-\d+)?")


def stream_start(since: str | None, start: str | None) -> str | None:
    """The reader's start id for ``events(since=...)`` (None: the reader's default)."""
    if since is None:
        return start
    if start is not None:
        raise InvalidRequestError("give events() since= or start=, not both")
    if since == "start":
        return "0-0"
    if since == "now":
        return "$"
    if not _STREAM_ID.fullmatch(since):
        raise InvalidRequestError(
            f"since={since!r}: 'start', 'now' or a stream id such as '1700000000000-0'")
    return since
