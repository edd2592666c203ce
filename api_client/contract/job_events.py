"""Job events as Redis holds them: one writer for every event, one reader rule (docs/storage.md
"Job events in Redis").

An event goes to its session's stream and a copy to its tenant's global stream. Every Python
writer builds those writes with :func:`event_writes` (the session stream's ``XADD`` and its
lifetime, then the global copy), and every script that emits one calls ``emit_event`` of
``lua/_events.lua``; so each event kind has one writer per side and one stored shape.

The stored shape: the stream fields ``type``, ``job`` and ``data``, the :class:`JobEvent` JSON,
but for one field: an event about an entry the job wrote (``session_compact``, ``compaction_end``,
``branch_summary``, ``session_tree``) holds that entry's id as its ``"entry"``, not the entry.
(Nor does an applied draft's ``compaction_end`` hold it in its ``result``.) The entry is in the
session's ``entries`` hash (committed before the event is written, kept as long as the session)
and once on the job record; the streams do not hold it twice more each.
Readers put it back (:func:`fill_entries`: one ``HGET`` per such event, one round trip a batch),
so every consumer sees the event it saw when the event carried the entry.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from api_client.contract.keys import KeyLayout
from api_client.contract.redis_flows import Command, Flow, Pipeline, cmd
from api_client.contract.retention import retain_args, retain_command, retain_in
from api_client.contract.settings import ClientSettings
from api_client.contract.wire import JobEvent

__all__ = [
    "decode_event", "event_fields", "event_writes", "fill_entries", "global_write",
    "queue_event", "with_entry",
]

# What a stored event's JSON holds when its entry is stored apart (its id as a string).
_ENTRY_ID = '"entry":"'


def event_fields(event: JobEvent) -> dict[str, str]:
    """The stream fields of ``event``, its entry by id when it has one (see the module doc)."""
    entry_id = event.entry.get("id") if event.entry is not None else None
    if not isinstance(entry_id, str) or not entry_id:
        return {"type": event.type.value, "job": event.job_id, "data": event.to_json()}
    wire = event.to_wire()
    wire["entry"] = entry_id
    data = json.dumps(wire, ensure_ascii=False, separators=(",", ":"))
    return {"type": event.type.value, "job": event.job_id, "data": data}


def decode_event(stream_id: str, fields: Mapping[str, str]) -> JobEvent:
    """The event of a stream entry; one stored with its entry's id comes back with
    ``entry_ref`` set and ``entry`` None until :func:`fill_entries` reads it."""
    data = fields["data"]
    if _ENTRY_ID in data:  # (in a JSON text only a key can be followed by '":"')
        wire = json.loads(data)
        entry_id = wire.get("entry")
        if isinstance(entry_id, str):
            del wire["entry"]
            return JobEvent.model_validate(wire).model_copy(
                update={"stream_id": stream_id, "entry_ref": entry_id})
    return JobEvent.model_validate_json(data).model_copy(update={"stream_id": stream_id})


def fill_entries(layout: KeyLayout, events: Sequence[JobEvent]) -> Flow[list[JobEvent]]:
    """``events`` with the entries they name read back from their sessions (one round trip for
    the batch; none when no event names one). An entry the session no longer holds (the session
    deleted or replaced since) leaves ``entry`` None."""
    wanted = [i for i, event in enumerate(events) if event.entry_ref and event.entry is None]
    if not wanted:
        return list(events)
    lines = yield Pipeline(tuple(
        cmd("hget", layout.session(events[i].session_id).entries, events[i].entry_ref)
        for i in wanted), transaction=False)
    out = list(events)
    for i, line in zip(wanted, lines, strict=True):
        if line:
            out[i] = with_entry(out[i], json.loads(line))
    return out


def with_entry(event: JobEvent, entry: dict[str, Any]) -> JobEvent:
    """``event`` with the entry it names; an applied draft's ``compaction_end`` also had it
    in its result (``result.entry``, as the job record has it), so it goes back there too."""
    update: dict[str, Any] = {"entry": entry}
    result = event.result
    if result is not None and result.get("fromDraft") is True and "entry" not in result:
        update["result"] = {**result, "entry": entry}
    return event.model_copy(update=update)


def global_write(stream: str, settings: ClientSettings, fields: Mapping[str, str]) -> Command:
    """The copy on ``stream``, the global stream of the session's tenant, after the session's
    stream got the event (lost only if the writer dies in between)."""
    return Command("xadd", (stream, dict(fields)),
                   {"maxlen": settings.event_stream_maxlen, "approximate": True})


def event_writes(layout: KeyLayout, settings: ClientSettings, event: JobEvent, *,
                 lifetime: bool = True, whole_session: bool = False) -> tuple[Command, ...]:
    """Every write of ``event`` by plain commands, for one pipeline: ``XADD`` to the session's
    stream (``MAXLEN ~ session_event_maxlen``), its lifetime (``lifetime``: the stream lives
    ``job_ttl_s`` after its last event, as ``emit_event`` has it, and the session's retention is
    refreshed; a writer that set both earlier in the same job leaves them out), then the global
    copy. The first reply is the session stream's id. The retention refresh checks only the
    stream (retain.lua's ``written`` mode), or every key of the session with ``whole_session``
    (a client's refusal or discard note: the first write of a request that wrote nothing else).
    """
    fields = event_fields(event)
    stream = layout.session(event.session_id).events
    calls: list[Command] = [Command("xadd", (stream, fields),
                                    {"maxlen": settings.session_event_maxlen,
                                     "approximate": True})]
    if lifetime:
        calls.append(cmd("expire", stream, settings.job_ttl_s))
        if whole_session:
            calls.append(retain_command(stream, settings.session_ttl_s))
        else:  # the TTL just given is capped at the session's instant, not read back
            calls.append(cmd("execute_command", *retain_args(
                stream, settings.session_ttl_s, written=True, ttl_s=settings.job_ttl_s)))
    calls.append(global_write(layout.events_of(event.session_id), settings, fields))
    return tuple(calls)


def queue_event(pipe: Any, layout: KeyLayout, settings: ClientSettings, event: JobEvent, *,
                lifetime: bool = True) -> None:
    """:func:`event_writes` queued on a redis-py pipeline of the writer's own (the worker's
    progress events): the same commands in the same order, the retention refresh through
    :func:`~api_client.contract.retention.retain_in` (the loader's way into a pipeline)."""
    session_add, global_copy = event_writes(layout, settings, event, lifetime=False)
    pipe.xadd(*session_add.args, **session_add.kwargs)
    if lifetime:
        stream = session_add.args[0]
        pipe.expire(stream, settings.job_ttl_s)
        retain_in(pipe, stream, settings.session_ttl_s, written=True, ttl_s=settings.job_ttl_s)
    pipe.xadd(*global_copy.args, **global_copy.kwargs)
