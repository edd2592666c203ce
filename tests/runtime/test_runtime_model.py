"""Jobs whose summaries come from a loopback model server over real HTTP: coalescing, concurrent
appends and stale commits, cancellation, the job deadline."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from runtime import runtime_hooks
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import (
    CALLS_AT_ONCE,
    completions,
    entries_of_type,
    new_session,
    runtime_settings,
    session_events,
)

from api_client import CompactionClient, JobCancelledError, JobFailedError
from helpers.waits import wait_until
from worker.hooks import HookSettings
from worker.settings import WorkerSettings

DEADLINE_S = 3.0


@pytest.fixture(scope="module")
def worker_settings(module_redis: str, model: ModelServer) -> WorkerSettings:
    return runtime_settings(
        module_redis, models=[model.candidate()], job_deadline_s=DEADLINE_S,
        hooks=HookSettings(entry_points=False, plugins=["runtime.runtime_hooks:Plugin"]))


@pytest.fixture
def client(client: CompactionClient, model: ModelServer) -> Iterator[CompactionClient]:
    runtime_hooks.ON_COMPACTING.clear()
    yield client
    model.release()
    runtime_hooks.ON_COMPACTING.clear()


def msg(text: str, role: str = "user") -> dict[str, object]:
    return {"role": role, "content": [{"type": "text", "text": text}], "timestamp": 1}


def test_summary_comes_from_the_model(client: CompactionClient, demo_text: str) -> None:
    sid = new_session(client, demo_text)
    handle = client.compact(sid, reason="manual")
    entry = handle.wait(30)
    assert isinstance(entry, dict) and "Loopback summary" in entry["summary"]
    record = handle.record()
    assert record.model == "openai/loop" and record.usage is not None and record.usage.input > 0


def test_requests_coalesce_into_the_running_job(client: CompactionClient, model: ModelServer,
                                                demo_text: str) -> None:
    sid = new_session(client, demo_text)
    model.stall_next(1)
    first = client.compact(sid, reason="manual")
    assert model.in_flight.wait(10)
    second = client.compact(sid, reason="manual")
    urgent = client.compact(sid, reason="overflow")  # running already: no upgrade, same job
    assert (second.id, urgent.id) == (first.id, first.id)
    assert second.coalesced and urgent.coalesced
    model.release()
    entries = [h.wait(30) for h in (first, second, urgent)]
    assert entries[0] == entries[1] == entries[2]
    assert len(entries_of_type(client, sid, "compaction")) == 1
    assert len(completions(client, sid, first.id)) == 1


def test_a_queued_job_is_upgraded_by_an_overflow_request(client: CompactionClient,
                                                         model: ModelServer,
                                                         demo_text: str) -> None:
    busy = [new_session(client, demo_text) for _ in range(2)]
    held = model.held
    model.stall_next(2 * CALLS_AT_ONCE)  # both worker threads wait on the model
    blockers = [client.compact(s, reason="manual") for s in busy]
    wait_until(lambda: model.held - held == 2 * CALLS_AT_ONCE, what="both worker threads held")
    sid = new_session(client, demo_text)
    queued = client.compact(sid, reason="manual")
    urgent = client.compact(sid, reason="overflow")
    assert urgent.id == queued.id and urgent.upgraded
    assert client.jobs.get(queued.id).queue == "compactor.urgent"
    model.release()
    entry = urgent.wait(30)
    assert isinstance(entry, dict) and entry == queued.wait(30)
    for b in blockers:
        b.wait(30)
    assert len(entries_of_type(client, sid, "compaction")) == 1


def test_agent_appends_while_the_job_runs(client: CompactionClient, demo_text: str) -> None:
    sid = new_session(client, demo_text)
    appended: list[str] = []
    runtime_hooks.ON_COMPACTING.append(
        lambda s: appended.extend(client.sessions.append(s, msg(f"meanwhile {i}"))
                                  for i in range(3)))
    handle = client.compact(sid, reason="manual")
    entry = handle.wait(30)
    assert isinstance(entry, dict) and entry["parentId"] == appended[-1]  # child of the new leaf
    stored = {e.id for e in client.sessions.load(sid).session.entries}
    assert set(appended) <= stored
    assert "stale" not in [e.type.value for e in session_events(client, sid)]


def test_stale_snapshot_is_replanned(client: CompactionClient, demo_text: str) -> None:
    sid = new_session(client, demo_text)
    snap = client.sessions.load(sid)
    path = snap.session.tree().path_to(snap.leaf_id)
    fork = path[-3].id
    moved: list[str] = []

    def agent_edits_an_earlier_message(s: str) -> None:
        client.sessions.navigate(s, fork)
        moved.append(client.sessions.append(s, msg("let me rephrase that")))

    runtime_hooks.ON_COMPACTING.append(agent_edits_an_earlier_message)
    handle = client.compact(sid, reason="manual")
    entry = handle.wait(30)
    assert isinstance(entry, dict) and entry["parentId"] == moved[0]
    events = [e.type.value for e in session_events(client, sid) if e.job_id == handle.id]
    assert events.count("stale") == 1 and events[-1] == "compaction_end"
    assert len(entries_of_type(client, sid, "compaction")) == 1
    assert {snap.leaf_id, moved[0]} <= {e.id for e in client.sessions.load(sid).session.entries}


def test_cancel_a_running_job(client: CompactionClient, model: ModelServer, demo_text: str) -> None:
    sid = new_session(client, demo_text)
    rev, text = client.sessions.revision(sid), client.sessions.export_jsonl(sid)
    model.stall_next(1)
    handle = client.compact(sid, reason="manual")
    assert model.in_flight.wait(10)
    assert handle.cancel().value == "running"  # the worker stops at its next check
    started = time.monotonic()
    with pytest.raises(JobCancelledError, match="Compaction cancelled"):
        handle.wait(10)
    assert time.monotonic() - started < 2
    [end] = completions(client, sid, handle.id)
    assert (end.type.value, end.state.value if end.state else None, end.aborted) == (
        "compaction_end", "cancelled", True)
    assert client.sessions.revision(sid) == rev and client.sessions.export_jsonl(sid) == text


def test_manual_job_past_its_deadline_fails_and_changes_nothing(
        client: CompactionClient, model: ModelServer, demo_text: str) -> None:
    sid = new_session(client, demo_text)
    rev, text = client.sessions.revision(sid), client.sessions.export_jsonl(sid)
    model.stall_next(1)
    started = time.monotonic()
    handle = client.compact(sid, reason="manual")
    with pytest.raises(JobFailedError, match=f"job deadline of {DEADLINE_S:g} s exceeded"):
        handle.wait(20)
    assert DEADLINE_S <= time.monotonic() - started < DEADLINE_S + 3
    assert client.sessions.revision(sid) == rev and client.sessions.export_jsonl(sid) == text
