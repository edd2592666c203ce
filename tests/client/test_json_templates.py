"""Request-path templates write the bytes the wire models would (pure; no Redis)."""

from __future__ import annotations

import json

import pytest

from api_client import ClientSettings
from api_client.client.draft_apply import _call, _record, apply_draft
from api_client.contract.errors import InvalidIdError, InvalidRequestError
from api_client.contract.job_enums import CompactReason, EventType, JobState
from api_client.contract.json_templates import SLOTS, escaped, quoted, template
from api_client.contract.keys import KeyLayout
from api_client.contract.wire import JobEvent

SETTINGS = ClientSettings(redis_url="redis://127.0.0.1:6379/0", key_prefix="tpl")
LAYOUT = KeyLayout("tpl")

# Every character a session id may hold (keys.check_session_id); quotes, backslashes and
# non-ASCII text, which the templates would escape, are refused before they are filled in.
SESSION_IDS = ["s1", "a:b:c.d-e_f", "0" + "Zz9._:-" * 36]
REFUSED_IDS = ['quote"inside', "back\\slash", "ünïcödé-会话", "emoji-😀",
               "looks-like-a-slot-\\u0000sid\\u0000", "ends-with-backslash\\", "a:b:c/d?e=f"]


@pytest.mark.parametrize("text, raw, expected", [
    ("plain", {}, "plain"),
    (f"{SLOTS['job']}-{SLOTS['sid']}", {"job": "j", "sid": "s"}, "j-s"),
    (json.dumps({"a": SLOTS["sid"], "b": [SLOTS["ts"], 1]}), {"sid": 'x"y', "ts": "T"},
     json.dumps({"a": 'x"y', "b": ["T", 1]})),
    (json.dumps(SLOTS["job"], ensure_ascii=False), {"job": "ü\\"}, json.dumps("ü\\",
                                                                            ensure_ascii=False)),
])
def test_fill_puts_each_value_in_its_slot(text: str, raw: dict[str, str], expected: str) -> None:
    values = {name: raw.get(name, "") for name in SLOTS}
    assert template(text).fill(values, {k: escaped(v) for k, v in values.items()}) == expected


def test_a_value_that_reads_like_a_stand_in_is_not_filled_again() -> None:
    text = json.dumps([SLOTS["sid"], SLOTS["job"]])
    raw = {"sid": "\\u0000job\\u0000", "job": "J", "ts": ""}
    filled = template(text).fill(raw, {k: escaped(v) for k, v in raw.items()})
    assert json.loads(filled) == ["\\u0000job\\u0000", "J"]


@pytest.mark.parametrize("session_id", SESSION_IDS)
@pytest.mark.parametrize("reason", [CompactReason.THRESHOLD, CompactReason.OVERFLOW])
@pytest.mark.parametrize("window", [None, 200_000])
def test_draft_call_matches_the_wire_models(session_id: str, reason: CompactReason,
                                            window: int | None) -> None:
    script, job_id = _call(LAYOUT, SETTINGS, session_id, reason, "apply", window)
    ts = script.args[4]
    record = _record(job_id, session_id, reason, ts, window)
    compacted = JobEvent.for_record(record, EventType.SESSION_COMPACT, timestamp=ts)
    done = JobEvent.completion(record, JobState.SUCCEEDED, duration_ms=0, timestamp=ts)
    assert script.args[1] == job_id and job_id.startswith(session_id + ":")
    assert script.args[8] == compacted.to_json()
    assert script.args[9] == done.to_json()
    assert script.args[15] == "0"  # apply: no growth still to come
    assert len(script.args) == 18 and script.args[16] == str(SETTINGS.session_ttl_s)
    assert script.args[17] == ""  # no agent settings: a draft planned with the worker's own
    # the line the draft must fit under: the request's window - reserve, else the draft's
    assert script.args[3] == ("" if window is None else str(window - SETTINGS.reserve_tokens))
    fields = json.loads(script.args[14])
    assert dict(zip(fields[::2], fields[1::2], strict=True)) == record.to_redis()
    assert len(fields) == 2 * len(record.to_redis())


@pytest.mark.parametrize("session_id", REFUSED_IDS)
def test_a_session_id_the_templates_would_escape_is_refused(session_id: str) -> None:
    with pytest.raises(InvalidIdError):
        _call(LAYOUT, SETTINGS, session_id, CompactReason.THRESHOLD, "apply", None)


def test_two_calls_differ_in_job_id_and_events() -> None:
    first, job_a = _call(LAYOUT, SETTINGS, "same", CompactReason.THRESHOLD, "apply")
    second, job_b = _call(LAYOUT, SETTINGS, "same", CompactReason.THRESHOLD, "apply")
    assert job_a != job_b
    assert json.loads(first.args[8])["jobId"] == job_a
    assert json.loads(second.args[8])["jobId"] == job_b


def test_escaped_agrees_with_json_dumps_for_every_character() -> None:
    # escaped() skips json.dumps when nothing needs escaping: every BMP character (surrogates
    # included, which json.dumps leaves alone without ensure_ascii) and a few astral ones,
    # alone and inside an id.
    chars = [chr(c) for c in range(0x10000)] + ["😀", "\U0010ffff"]
    for char in chars:
        for value in (char, f"id-{char}-x"):
            assert escaped(value) == json.dumps(value, ensure_ascii=False)[1:-1], repr(value)


def test_quoted_agrees_with_json_dumps_for_every_character() -> None:
    chars = [chr(c) for c in range(0x10000)] + ["😀", "\U0010ffff"]
    for char in chars:
        for value in (char, f"['sid-{char}:0f']"):
            assert quoted(value) == json.dumps(value), repr(value)


@pytest.mark.parametrize("window", ["200000", '1"]', True, 0, -5, 1.5])
def test_apply_draft_refuses_a_window_that_is_no_positive_int(window: object) -> None:
    # The window is written into the record's JSON argument as is: only a positive int may be.
    flow = apply_draft(LAYOUT, SETTINGS, "s1", CompactReason.THRESHOLD,
                       context_window=window)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="context_window must be a positive int"):
        next(flow)
