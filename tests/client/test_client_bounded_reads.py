"""Large sessions in bounded Redis commands, with today's guarantees: an import written in steps
still replaces the session at once, reads in pages return what one read did, a delete frees
in the background, and a job's end frees every single-flight slot it held."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from api_client import CompactionClient, SessionFormatError
from api_client.client import imports
from api_client.contract import snapshots
from api_client.contract.redis_flows import Pipeline, SyncShell
from helpers.jobs import worker_jobs
from helpers.sessions import assistant, user

ENTRIES = 40


def _text(session_id: str, salt: str = "") -> str:
    """A session of ENTRIES messages, as its export reads (pi's key order, compact JSON)."""
    header = {"type": "session", "version": 3, "id": session_id,
              "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/"}
    lines = [json.dumps(header, separators=(",", ":"))]
    for n in range(ENTRIES):
        message = user(f"question {n}{salt}") if n % 2 == 0 else assistant(f"answer {n}{salt}")
        entry = {"type": "message", "id": f"{n:08x}", "parentId": f"{n - 1:08x}" if n else None,
                 "timestamp": "2026-01-01T00:00:00.000Z", "message": message}
        lines.append(json.dumps(entry, ensure_ascii=False, separators=(",", ":")))
    return "\n".join(lines) + "\n"


@pytest.fixture
def small_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Steps of a few entries: a 40-entry session behaves as a 20 000-entry one does."""
    monkeypatch.setattr(imports, "INLINE_BYTES", 0)
    monkeypatch.setattr(imports, "STEP_BYTES", 600)
    monkeypatch.setattr(snapshots, "ORDER_PAGE", 7)
    monkeypatch.setattr(snapshots, "LINE_BYTES", 900)


def test_a_large_import_goes_in_steps_and_replaces_the_session_at_once(
        client: CompactionClient, raw: redis.Redis[str], small_steps: None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    old = client.sessions.import_jsonl(_text("big"), session_id="big")
    assert client.sessions.export_jsonl(old) == _text("big")
    seen: list[str] = []
    execute = SyncShell.execute

    def watched(shell: SyncShell, call: Any) -> Any:
        if isinstance(call, Pipeline) and call.commands[0].name == "hset":
            seen.append(client.sessions.export_jsonl("big"))  # a reader between the steps
        return execute(shell, call)

    monkeypatch.setattr(SyncShell, "execute", watched)
    client.sessions.import_jsonl(_text("big", " again"), session_id="big", replace=True)
    assert len(seen) > 3 and set(seen) == {_text("big")}  # the old session, whole, until the end
    assert client.sessions.export_jsonl("big") == _text("big", " again")
    assert raw.keys("*:import:*") == []  # the staging keys were renamed into place
    assert client.sessions.load("big").leaf_id == f"{ENTRIES - 1:08x}"


def test_an_import_whose_steps_expired_stores_nothing(
        client: CompactionClient, raw: redis.Redis[str], small_steps: None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    execute = SyncShell.execute

    def lose_a_step(shell: SyncShell, call: Any) -> Any:
        reply = execute(shell, call)
        if isinstance(call, Pipeline) and call.commands[0].name == "hset":
            raw.delete(call.commands[0].args[0])  # as if its TTL had passed
        return reply

    monkeypatch.setattr(SyncShell, "execute", lose_a_step)
    with pytest.raises(SessionFormatError, match="staged entries expired"):
        client.sessions.import_jsonl(_text("gone"), session_id="gone")
    assert not client.sessions.exists("gone")


def test_reads_in_pages_return_what_one_read_did(client: CompactionClient,
                                                  small_steps: None) -> None:
    sid = client.sessions.import_jsonl(_text("paged"), session_id="paged")
    snap = client.sessions.load(sid)
    assert [e.id for e in snap.session.entries] == [f"{n:08x}" for n in range(ENTRIES)]
    assert client.sessions.export_jsonl(sid) == _text("paged")
    assert client.context(sid).leaf_id == f"{ENTRIES - 1:08x}"


def test_delete_unlinks_every_key_of_the_session(client: CompactionClient,
                                                 raw: redis.Redis[str]) -> None:
    sid = client.sessions.import_jsonl(_text("del"), session_id="del")
    assert client.sessions.delete(sid) and raw.keys("*{del}*") == []
    assert not client.sessions.delete(sid)


def test_the_end_of_a_speculative_job_frees_its_slot(client: CompactionClient,
                                                     raw: redis.Redis[str]) -> None:
    sid = client.sessions.import_jsonl(_text("spec"), session_id="spec")
    handle = client.compact(sid, reason="speculative")
    slot = client.layout.session(sid).inflight("speculative")
    assert raw.get(slot) == handle.id
    worker_jobs(client).acquire_lease(handle.id, "w", 10)
    client.jobs.finish(handle.id, "failed", error="no")
    assert raw.get(slot) is None  # it used to stay an hour (its safety-net TTL)
