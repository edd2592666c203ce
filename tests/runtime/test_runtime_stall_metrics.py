"""The stall histogram and the draft / loop-guard counters, scraped from a real worker process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import new_session
from runtime.test_runtime_metrics import metrics_worker, scrape, total, value, wait_for

from api_client import CompactionClient

STALL = "compactor_compaction_stall_seconds"
DRAFT_TOKENS = "compactor_draft_tokens_total"


def test_stall_of_a_job_and_of_a_draft(own_redis: Any, demo_text: str, tmp_path: Path) -> None:
    with CompactionClient(own_redis.url) as client, \
            metrics_worker(own_redis.url, tmp_path) as port:
        job = client.compact(new_session(client, demo_text), reason="threshold",
                             context_window=16_384 + 100)  # a 100-token threshold: ineffective
        assert isinstance(job.wait(60), dict)
        sid = new_session(client, demo_text)
        assert client.compact(sid, reason="speculative").wait(60) is None
        applied = client.compact(sid, reason="overflow")
        assert applied.from_draft
        stall_ms = applied.record().stall_ms
        wait_for(lambda: value(scrape(port), "compactor_drafts_total", outcome="applied",
                               cause="") == 1, 20)
        after = scrape(port)
    assert value(after, f"{STALL}_count", reason="threshold", source="job") == 1
    assert value(after, f"{STALL}_count", reason="overflow", source="draft") == 1
    assert value(after, f"{STALL}_count", reason="speculative", source="job") == 0
    # The draft's stall is what the client measured: one round trip, well under a second here.
    assert stall_ms is not None and 0 <= stall_ms < 1000
    draft_sum = value(after, f"{STALL}_sum", reason="overflow", source="draft")
    assert abs(draft_sum - stall_ms / 1000) < 1e-6
    assert value(after, f"{STALL}_sum", reason="threshold", source="job") > 0
    assert value(after, "compactor_loop_guard_total", event="ineffective",
                 reason="threshold") == 1
    assert total(after, "compactor_loop_guard_total", event="refused") == 0


def test_a_cold_plan_counts_what_it_tokenized(own_redis: Any, tmp_path: Path) -> None:
    # A worker new to a large session tokenizes it and says so; the counts land in the
    # session's store (loading them is tests/service/test_service_token_counts.py).
    from runtime.test_runtime_jobs import large_session_text

    with CompactionClient(own_redis.url) as client, \
            metrics_worker(own_redis.url, tmp_path) as port:
        sid = client.sessions.import_jsonl(large_session_text())
        assert isinstance(client.compact(sid, reason="manual").wait(60), dict)
        after = scrape(port)
        stored = client.redis.hlen(client.layout.session(sid).token_counts)
    tokenized = value(after, "compactor_cold_token_counts_total", source="tokenized")
    assert tokenized == stored > 50
    assert value(after, "compactor_cold_token_counts_total", source="loaded") == 0


def test_draft_tokens_are_counted_apart(own_redis: Any, model: ModelServer, demo_text: str,
                                        tmp_path: Path) -> None:
    models = json.dumps([{"provider": "openai", "model": "loop", "base_url": model.base_url,
                          "api_key": "k", "context_window": 200_000}])
    with CompactionClient(own_redis.url) as client, \
            metrics_worker(own_redis.url, tmp_path, COMPACTOR_MODELS=models) as port:
        sid = new_session(client, demo_text)
        speculative = client.compact(sid, reason="speculative")
        assert speculative.wait(60) is None
        spent = speculative.record().draft_usage
        assert spent is not None and spent.input > 0
        applied = client.compact(sid, reason="threshold")
        assert applied.from_draft and applied.record().draft_usage == spent
        wait_for(lambda: value(scrape(port), DRAFT_TOKENS, outcome="used",
                               direction="input") == spent.input, 20)
        after = scrape(port)
    for direction, tokens in (("input", spent.input), ("output", spent.output)):
        assert value(after, DRAFT_TOKENS, outcome="computed", direction=direction) == tokens
        assert value(after, DRAFT_TOKENS, outcome="used", direction=direction) == tokens
    # The model's own counter has them too: what speculation costs is a part of it.
    assert total(after, "compactor_model_tokens_total", direction="input") == spent.input
