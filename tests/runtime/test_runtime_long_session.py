"""A session of any size compacts: 20 000 entries (~5.4 M tokens of the reference sessions'
turns) and no earlier compaction, against a loopback model with a 200k window. The summary
takes ~30 chunk calls, more than the job's attempt budget of 20: the budget follows the chunk
plan. The threshold compaction's prune pass rewrites ~6 600 lines in bounded steps."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import running_worker, runtime_settings

from api_client import ClientSettings, CompactionClient
from helpers.long_sessions import build, jsonl
from worker.celery_app import CompactorCelery
from worker.settings import WorkerSettings

ENTRIES = 20_000


@pytest.fixture(scope="module")
def app(module_redis: str, model: ModelServer) -> Iterator[CompactorCelery]:
    settings: WorkerSettings = runtime_settings(
        module_redis, models=[model.candidate()], job_deadline_s=120.0,
        visibility_timeout_s=180.0)
    with running_worker(settings) as worker_app:
        yield worker_app


def test_a_20k_entry_session_without_an_earlier_compaction_compacts(
        app: CompactorCelery, module_redis: str, model: ModelServer, pi_dir: Path) -> None:
    text = jsonl(build(ENTRIES, fixtures=pi_dir))
    # A 30 MB import takes a few seconds: the request-path budget is not for it.
    with CompactionClient(ClientSettings(redis_url=module_redis, enqueue_timeout_s=60)) as client:
        sid = client.sessions.import_jsonl(text, session_id="long-session")
        before = model.requests
        handle = client.compact(sid, reason="threshold")
        entry = handle.wait(timeout=120)
        assert isinstance(entry, dict) and entry["type"] == "compaction"
        result = handle.record().result or {}
        assert result["modelAttempts"] == model.requests - before > 20  # one call per chunk
        assert len(result["prunedEntryIds"]) > 5_000  # the prune pass, in bounded steps
        assert client.sessions.export_jsonl(sid).count('"prunedAt"') == len(
            result["prunedEntryIds"])
        # Operators see where such a job is: one progress event per answered chunk.
        progress = [e.result for e in client.events(sid, since="start", follow=False)
                    if e.type.value == "model_progress" and e.job_id == handle.id]
        assert [p["call"] for p in progress if p] == list(range(1, len(progress) + 1))
        assert len(progress) > 20 and progress[-1] is not None
        assert progress[-1]["call"] == progress[-1]["calls"]
        context = client.context(sid)  # the summary and the kept messages only
        assert entry["summary"][:40] in context.messages[0]["content"][0]["text"]
        assert len(context.messages) < 200
