"""Instant compaction end to end: speculative jobs on a real worker store drafts, the client
applies them in one Lua call (docs/instant-compaction.md)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from runtime import runtime_draft_hooks as hooks
from runtime.runtime_support import (
    completions,
    entries_of_type,
    new_session,
    runtime_settings,
    session_events,
)

from api_client import CompactionClient, JobCancelledError
from api_client.client.draft_apply import apply_draft, read_draft
from worker.compaction import build_session_context
from worker.hooks import HookSettings
from worker.settings import WorkerSettings


@pytest.fixture(scope="module")
def worker_settings(module_redis: str) -> WorkerSettings:
    return runtime_settings(module_redis, hooks=HookSettings(
        entry_points=False, plugins=["runtime.runtime_draft_hooks:Plugin"]))


@pytest.fixture
def client(client: CompactionClient) -> CompactionClient:
    hooks.CANCEL.clear()
    return client


def msg(text: str, role: str = "user") -> dict[str, object]:
    return {"role": role, "content": [{"type": "text", "text": text}], "timestamp": 1}


def draft_of(client: CompactionClient, sid: str) -> dict[str, Any] | None:
    return client.transport.io.run(read_draft(client.layout, sid))


def speculate(client: CompactionClient, sid: str) -> dict[str, Any]:
    handle = client.compact(sid, reason="speculative")
    assert handle.wait(30) is None  # no entry: a draft
    draft = draft_of(client, sid)
    assert draft is not None and draft["jobId"] == handle.id
    return draft


def discard_causes(client: CompactionClient, sid: str) -> list[str | None]:
    return [e.error for e in session_events(client, sid) if e.type.value == "draft_discarded"]


def test_speculative_job_leaves_the_session_byte_identical(client: CompactionClient,
                                                           demo_text: str) -> None:
    sid = new_session(client, demo_text)
    snap = client.sessions.load(sid)
    before, rev = client.sessions.export_jsonl(sid), snap.revision
    draft = speculate(client, sid)
    assert client.sessions.export_jsonl(sid) == before and client.sessions.revision(sid) == rev
    path = snap.session.tree().path_to(snap.leaf_id)
    assert (draft["snapshotLeafId"], draft["snapshotRevision"]) == (snap.leaf_id, rev)
    assert draft["snapshotEntries"] == len(path)
    assert draft["firstKeptEntryId"] in {e.id for e in path}
    assert draft["entry"]["summary"] == draft["summary"] and draft["tokensBefore"] > 0
    assert 0 < client.redis.ttl(client.layout.session(sid).draft) <= 900
    record = client.jobs.get(draft["jobId"])
    assert record.queue == "compactor.speculative" and record.priority == 9
    assert record.result is not None and record.result["draft"] is True


def test_draft_applied_after_the_agent_appended(client: CompactionClient,
                                                demo_text: str) -> None:
    sid = new_session(client, demo_text)
    draft = speculate(client, sid)
    appended = [client.sessions.append(sid, msg(f"meanwhile {i}")) for i in range(3)]
    handle = client.compact(sid, reason="threshold")
    assert handle.from_draft
    entry = handle.wait(0.5)
    assert isinstance(entry, dict) and entry["parentId"] == appended[-1]
    assert entry["summary"] == draft["summary"] and entry["type"] == "compaction"
    assert entry["firstKeptEntryId"] == draft["firstKeptEntryId"]
    snap = client.sessions.load(sid)
    assert snap.leaf_id == entry["id"] and draft_of(client, sid) is None
    record = handle.record()
    assert record.state.value == "succeeded" and record.result is not None
    assert record.result["fromDraft"] is True and record.result["entry"]["id"] == entry["id"]
    assert record.entry == entry == record.result["entry"]
    # ... read from the session: the record names the entry, holds no copy of it.
    stored = client.redis.hgetall(client.layout.job(handle.id).record)
    assert "entry" not in stored and entry["summary"] not in stored["result"]
    assert stored["resultEntryId"] == entry["id"]
    # The appended messages are in the context after the compaction, exactly once.
    context = build_session_context(snap.session.tree(), snap.leaf_id)
    texts = [json.dumps(m.message) for m in context.messages]
    for i in range(3):
        assert sum(f"meanwhile {i}" in t for t in texts) == 1
    types = [e.type.value for e in session_events(client, sid) if e.job_id == handle.id]
    assert types == ["session_compact", "compaction_end"]
    [end] = completions(client, sid, handle.id)
    assert end.entry == entry  # read back from the session (the stream holds its id)
    assert end.result is not None and end.result["fromDraft"] is True
    assert end.result == record.result  # its result.entry too, as the record has it
    deadline = time.monotonic() + 10  # the session_compact hooks run on a worker
    while (sid, entry["id"]) not in hooks.COMPACTED and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (sid, entry["id"]) in hooks.COMPACTED


@pytest.mark.parametrize("odd", ["a:b:c.d-e_f", "Z" * 240])
def test_applied_draft_record_for_an_unusual_id(client: CompactionClient, demo_text: str,
                                                odd: str) -> None:
    # The draft job's record travels as one JSON array that apply_draft.lua decodes: an id
    # with every punctuation a session id may hold, or near the longest, comes back as it
    # went (ids that JSON would escape are refused: tests/client/test_json_templates.py).
    sid = client.sessions.import_jsonl(demo_text, f"{odd}-{uuid.uuid4().hex[:8]}")
    speculate(client, sid)
    handle = client.compact(sid, reason="overflow", context_window=123_456)
    assert handle.from_draft
    record = handle.record()
    assert (record.id, record.session_id, record.state.value) == (handle.id, sid, "succeeded")
    assert (record.reason, record.context_window, record.attempts) == ("overflow", 123_456, 0)
    assert record.created_at == record.started_at == record.finished_at
    [end] = completions(client, sid, handle.id)
    assert end.session_id == sid and end.job_id == handle.id


def _normal_job_after_discard(client: CompactionClient, sid: str, cause: str) -> None:
    handle = client.compact(sid, reason="threshold")
    assert not handle.from_draft
    assert draft_of(client, sid) is None and discard_causes(client, sid) == [cause]
    assert client.jobs.get(handle.id).draft_discarded == cause
    handle.wait(30)  # the normal job runs


def test_draft_invalidated_by_navigating_to_another_branch(client: CompactionClient,
                                                           demo_text: str) -> None:
    sid = new_session(client, demo_text)
    speculate(client, sid)
    path = client.sessions.load(sid).session.tree().path_to(client.sessions.load(sid).leaf_id)
    client.sessions.navigate(sid, path[-3].id)
    client.sessions.append(sid, msg("let me rephrase that"))
    _normal_job_after_discard(client, sid, "offpath")


def test_draft_invalidated_by_another_compaction(client: CompactionClient,
                                                 demo_text: str) -> None:
    sid = new_session(client, demo_text)
    speculate(client, sid)
    client.compact(sid, reason="manual").wait(30)
    handle = client.compact(sid, reason="threshold")
    assert not handle.from_draft and discard_causes(client, sid) == ["compacted"]
    handle.wait(30)


def test_draft_expires_with_its_ttl(client: CompactionClient, demo_text: str) -> None:
    sid = new_session(client, demo_text)
    speculate(client, sid)
    key = client.layout.session(sid).draft
    assert client.redis.pexpire(key, 1)  # what the TTL does after draft_ttl_s
    time.sleep(0.05)
    handle = client.compact(sid, reason="threshold")
    assert not handle.from_draft and discard_causes(client, sid) == []  # none: nothing to say
    handle.wait(30)


def test_manual_with_instructions_never_uses_the_draft(client: CompactionClient,
                                                       demo_text: str) -> None:
    sid = new_session(client, demo_text)
    speculate(client, sid)
    handle = client.compact(sid, reason="manual", instructions="focus on the tests")
    assert not handle.from_draft
    handle.wait(30)
    assert handle.record().result is not None and "fromDraft" not in (handle.record().result or {})


def test_concurrent_apply_by_two_clients_makes_one_entry(
        client: CompactionClient, module_redis: str, demo_text: str,
        client_for: Callable[[str], CompactionClient]) -> None:
    sid = new_session(client, demo_text)
    speculate(client, sid)
    clients = [client_for(module_redis) for _ in range(2)]
    barrier = threading.Barrier(2)
    statuses: list[str] = []

    def apply(c: CompactionClient) -> None:
        barrier.wait()
        statuses.append(c.transport.run(apply_draft(c.layout, c.settings, sid, "threshold")).status)

    threads = [threading.Thread(target=apply, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(statuses) == ["applied", "discarded"]
    assert len(entries_of_type(client, sid, "compaction")) == 1


def test_before_compact_hook_cancel_leaves_no_draft(client: CompactionClient,
                                                    demo_text: str) -> None:
    sid = new_session(client, demo_text)
    hooks.CANCEL.add(sid)
    handle = client.compact(sid, reason="speculative")
    with pytest.raises(JobCancelledError):
        handle.wait(30)
    assert draft_of(client, sid) is None


def test_observe_precomputes_in_the_band_and_compacts_above(client: CompactionClient,
                                                            demo_text: str) -> None:
    sid = new_session(client, demo_text)
    window = 200_000  # threshold 183 616, band 22 952
    assert client.observe(sid, context_tokens=100_000, context_window=window).action == "none"
    first = client.observe(sid, context_tokens=170_000, context_window=window)
    assert first.action == "precompute" and first.handle is not None
    again = client.observe(sid, context_tokens=171_000, context_window=window)
    assert again.action == "none" or (again.handle is not None
                                      and again.handle.id == first.handle.id)
    first.handle.wait(30)
    assert client.observe(sid, context_tokens=172_000, context_window=window).draft_ready
    done = client.observe(sid, context_tokens=190_000, context_window=window)
    assert done.action == "compact" and done.from_draft
