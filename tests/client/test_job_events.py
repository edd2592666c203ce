"""Job events as Redis holds them (api_client/contract/job_events.py, lua/_events.lua;
docs/storage.md "Job events in Redis"): one writer per side, an entry stored by its id and put
back by the readers."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from api_client.contract.job_enums import EventType, JobKind, JobState
from api_client.contract.job_events import (
    decode_event,
    event_fields,
    event_writes,
    fill_entries,
    global_write,
)
from api_client.contract.keys import KeyLayout
from api_client.contract.redis_flows import Pipeline
from api_client.contract.settings import ClientSettings
from api_client.contract.wire import JobEvent

ROOT = Path(__file__).resolve().parents[2]
LAYOUT = KeyLayout("compactor")
SETTINGS = ClientSettings()
ENTRY = {"type": "compaction", "id": "c1", "parentId": "e9", "timestamp": "t",
         "summary": 'a "quoted" summary\nwith "entry":"lookalikes"', "firstKeptEntryId": "e5",
         "tokensBefore": 900}


def _event(type: EventType = EventType.COMPACTION_END, **fields: Any) -> JobEvent:
    return JobEvent(type=type, job_id="s1:00000000000000aa", session_id="s1",
                    kind=JobKind.COMPACT, **fields)


def _run(flow: Any, replies: dict[tuple[str, str], str | None]) -> tuple[Any, list[Any]]:
    """Drive a flow by hand: each Pipeline of HGETs answered from ``replies``."""
    sent: list[Any] = []
    try:
        call = next(flow)
        while True:
            sent.append(call)
            assert isinstance(call, Pipeline)
            call = flow.send([replies.get(c.args) for c in call.commands])
    except StopIteration as stop:
        return stop.value, sent


def test_an_event_about_an_entry_holds_its_id_and_comes_back_whole() -> None:
    event = _event(state=JobState.SUCCEEDED, entry=ENTRY, tokens_before=900, duration_ms=5)
    fields = event_fields(event)
    assert set(fields) == {"type", "job", "data"}
    data = json.loads(fields["data"])
    assert data["entry"] == "c1" and str(ENTRY["summary"]) not in fields["data"]
    stored = decode_event("1-0", fields)
    assert stored.entry is None and stored.entry_ref == "c1" and stored.stream_id == "1-0"
    line = json.dumps(ENTRY, ensure_ascii=False)
    [back], sent = _run(fill_entries(LAYOUT, [stored]),
                        {(LAYOUT.session("s1").entries, "c1"): line})
    assert len(sent) == 1  # one round trip a batch
    assert back.entry == ENTRY
    assert back.to_json() == event.to_json()  # what a consumer sees: the event as written


def test_an_event_without_an_entry_is_stored_as_it_is() -> None:
    event = _event(EventType.COMPACTION_START, result={"entry": "not a reference"})
    fields = event_fields(event)
    assert fields["data"] == event.to_json()
    decoded = decode_event("2-0", fields)
    assert decoded.entry_ref is None and decoded.result == {"entry": "not a reference"}
    [same], sent = _run(fill_entries(LAYOUT, [decoded]), {})
    assert sent == [] and same == decoded


def test_an_applied_drafts_result_gets_its_entry_back_too() -> None:
    result = {"fromDraft": True, "draftJobId": "s1:b", "tokensBefore": 900}
    stored = {"type": "compaction_end", "job": "s1:00000000000000aa",
              "data": _event(state=JobState.SUCCEEDED, result=result).to_json()[:-1]
              + ',"entry":"c1"}'}
    [back], _ = _run(fill_entries(LAYOUT, [decode_event("3-0", stored)]),
                     {(LAYOUT.session("s1").entries, "c1"): json.dumps(ENTRY)})
    assert back.entry == ENTRY and back.result == {**result, "entry": ENTRY}


def test_an_entry_the_session_no_longer_holds_leaves_the_event_without_it() -> None:
    stored = decode_event("4-0", event_fields(_event(entry=ENTRY)))
    [back], _ = _run(fill_entries(LAYOUT, [stored]), {})
    assert back.entry is None and back.entry_ref == "c1"


def test_event_writes_are_the_session_stream_its_lifetime_and_the_global_copy() -> None:
    event = _event(EventType.DRAFT_DISCARDED, error="grown")
    calls = event_writes(LAYOUT, SETTINGS, event)
    assert [c.name for c in calls] == ["xadd", "expire", "execute_command", "xadd"]
    assert calls[0].args == (LAYOUT.session("s1").events, event_fields(event))
    assert calls[0].kwargs["maxlen"] == SETTINGS.session_event_maxlen
    assert calls[1].args == (LAYOUT.session("s1").events, SETTINGS.job_ttl_s)
    assert "written" in calls[2].args  # retain.lua: only the stream was written
    assert calls[-1] == global_write(LAYOUT.events_of("s1"), SETTINGS, event_fields(event))
    whole = event_writes(LAYOUT, SETTINGS, event, whole_session=True)
    assert "written" not in whole[2].args
    assert [c.name for c in event_writes(LAYOUT, SETTINGS, event, lifetime=False)] == [
        "xadd", "xadd"]


def test_events_have_one_writer_per_side() -> None:
    """Only job_events.py (Python) and _events.lua (scripts) add to a stream."""
    allowed = {ROOT / "api_client/contract/job_events.py",
               ROOT / "api_client/contract/lua/_events.lua"}
    xadd = re.compile(r"""['"]xadd['"]|\.xadd\(|'XADD'""", re.IGNORECASE)
    writers = {path.relative_to(ROOT).as_posix()
               for folder in ("api_client", "worker")
               for path in (ROOT / folder).rglob("*")
               if path.suffix in (".py", ".lua") and path not in allowed
               and xadd.search(path.read_text(encoding="utf-8"))}
    assert writers == set()
