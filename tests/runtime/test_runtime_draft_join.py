"""An automatic compaction joins the session's draft still in flight (docs/instant-compaction.md)
instead of starting over: it waits for the speculative job, then commits the draft as it is
when it fits, else extends it; and a draft that would keep everything is never stored nor
applied. A real worker (threads pool, in this process) and a loopback model that holds the
draft's call until the test releases it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from recovery.recovery_support import wait_until
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import new_session, runtime_settings

from api_client import CompactionClient, JobHandle
from api_client.client.draft_apply import read_draft
from api_client.contract.session import parse_entry
from worker.compaction import CompactionSettings, prepare_compaction
from worker.service._draft_join import keeps_everything
from worker.settings import WorkerSettings
from worker.tokens import EstimateTokenizer

RESERVE = 16_384  # reserve_tokens, the client's and the worker's default
HUGE_WINDOW = 10_000_000
KEEP = 300


@pytest.fixture(scope="module")
def worker_settings(module_redis: str, model: ModelServer) -> WorkerSettings:
    # A short kept part: a few appended turns give the next plan a cut after the draft's.
    return runtime_settings(module_redis, models=[model.candidate()], keep_recent_tokens=KEEP)


@pytest.fixture
def fresh_model(model: ModelServer) -> ModelServer:
    model.release()
    model.latency_s = 0.0
    return model


def msg(text: str, role: str = "user") -> dict[str, object]:
    if role == "assistant":
        return {"role": "assistant", "content": [{"type": "text", "text": text}],
                "api": "openai-completions", "provider": "openai", "model": "loop",
                "usage": {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0,
                          "totalTokens": 15}, "stopReason": "stop", "timestamp": 1}
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def draft_of(client: CompactionClient, sid: str) -> dict[str, Any] | None:
    return client.transport.run(read_draft(client.layout, sid))


def wait_for(check: Any, timeout: float, what: str) -> Any:
    return wait_until(check, timeout, what, 0.02)


def draft_in_flight(client: CompactionClient, model: ModelServer, sid: str) -> JobHandle:
    """A speculative job whose model call the loopback model holds."""
    model.stall_next(1)
    spec = client.compact(sid, reason="speculative")
    assert model.in_flight.wait(30), "the draft job never called the model"
    return spec


def threshold_joins(client: CompactionClient, sid: str, window: int) -> JobHandle:
    handle = client.compact(sid, reason="threshold", context_window=window)
    assert not handle.from_draft  # nothing stored yet: the client enqueued the job
    wait_for(lambda: handle.record().state.value == "running", 30, "the threshold job to start")
    return handle


def test_a_threshold_job_joins_the_draft_in_flight_and_applies_it(
        client: CompactionClient, fresh_model: ModelServer, demo_text: str) -> None:
    sid = new_session(client, demo_text)
    spec = draft_in_flight(client, fresh_model, sid)
    client.sessions.append(sid, msg("and one more thing"))  # the agent went on meanwhile
    handle = threshold_joins(client, sid, HUGE_WINDOW)
    fresh_model.release()
    entry = handle.wait(30)
    assert spec.wait(30) is None  # the draft job stored its draft
    draft = draft_of(client, sid)
    assert draft is not None and draft["jobId"] == spec.id
    record = handle.record()
    assert record.result and record.result["joinedDraft"] == spec.id
    assert isinstance(entry, dict) and entry["summary"] == draft["summary"]
    assert entry["firstKeptEntryId"] == draft["firstKeptEntryId"]
    # The joined job made no model call of its own; it used the draft's (counted apart).
    assert record.model is None and record.usage is None
    assert record.draft_usage is not None and record.draft_usage.output > 0


def test_a_joined_draft_that_no_longer_fits_is_extended(
        client: CompactionClient, fresh_model: ModelServer, demo_text: str) -> None:
    sid = new_session(client, demo_text)
    spec = draft_in_flight(client, fresh_model, sid)
    for i in range(6):  # far more than the kept part: the extension has a span to summarise
        client.sessions.append(sid, msg(f"meanwhile {i}: " + "check the parser " * 150))
    # A window whose line no compacted context meets: the draft cannot be applied as it is.
    handle = threshold_joins(client, sid, RESERVE + 100)
    fresh_model.release()
    entry = handle.wait(30)
    assert spec.wait(30) is None
    record = handle.record()
    assert record.result and record.result["extendedDraft"] == spec.id
    assert "joinedDraft" not in record.result
    assert record.usage is not None  # it summarised the span since the draft's snapshot
    assert isinstance(entry, dict)
    # The update's prompt carried the draft's summary as the previous summary.
    assert any("<previous-summary>" in p for p in fresh_model.prompts[-3:])


def test_a_draft_that_would_keep_everything_is_never_stored_nor_applied(
        client: CompactionClient, fresh_model: ModelServer) -> None:
    sid = client.sessions.create()
    ids = [client.sessions.append(sid, msg("fix the import job")),
           client.sessions.append(sid, msg("Looking at it.", "assistant"))]
    # The plan of this session cuts at its first message: nothing to summarise.
    lines = client.redis.hmget(client.layout.session(sid).entries, ids)
    path = [parse_entry(json.loads(line)) for line in lines if line]
    plan_settings = CompactionSettings(keep_recent_tokens=KEEP, reserve_tokens=RESERVE)
    prep = prepare_compaction(path, plan_settings, EstimateTokenizer())
    assert prep is not None and keeps_everything(prep)
    spec = client.compact(sid, reason="speculative")
    assert spec.wait(30) is None
    result = spec.record().result or {}
    assert result.get("draft") is False
    assert draft_of(client, sid) is None
    handle = client.compact(sid, reason="threshold", context_window=HUGE_WINDOW)
    assert not handle.from_draft

