"""The loop guard through a real worker, Redis and loopback model: the (N+1)th automatic
compaction within the window fails with CompactionLoopError before any model call."""

from __future__ import annotations

import pytest
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import completions, new_session, runtime_settings

from api_client import CompactionClient, CompactionLoopError, JobFailedError
from worker.settings import WorkerSettings

LIMIT = 2
WINDOW_S = 600.0


@pytest.fixture(scope="module")
def worker_settings(module_redis: str, model: ModelServer) -> WorkerSettings:
    return runtime_settings(module_redis, models=[model.candidate()], keep_recent_tokens=200,
                            loop_guard_max=LIMIT, loop_guard_window_s=WINDOW_S)


def _turns(client: CompactionClient, sid: str, n: int) -> None:
    """New turns after a compaction, so the next one has something to summarise."""
    for i in range(n):
        client.sessions.append_many(sid, [
            {"role": "user", "content": f"step {i}: " + "more work " * 120, "timestamp": 1},
            {"role": "assistant", "content": [{"type": "text", "text": "done " * 120}],
             "provider": "openai", "model": "loop", "timestamp": 2},
        ])


def test_the_n_plus_first_threshold_compaction_fails_without_a_model_call(
        client: CompactionClient, model: ModelServer, demo_text: str) -> None:
    sid = new_session(client, demo_text)
    for n in range(LIMIT):
        if n:
            _turns(client, sid, 4)
        entry = client.compact(sid, reason="threshold").wait(60)
        assert entry is not None and entry["type"] == "compaction"
    key = client.layout.session(sid).compactions
    assert client.redis.zcard(key) == LIMIT and 0 < client.redis.ttl(key) <= WINDOW_S
    _turns(client, sid, 4)
    text, calls = client.sessions.export_jsonl(sid), model.requests

    handle = client.compact(sid, reason="threshold")
    with pytest.raises(CompactionLoopError) as raised:
        handle.wait(60)
    expected = (f"Auto-compaction failed: compaction loop: session {sid} had {LIMIT} automatic "
                f"compactions within 600 s (limit {LIMIT}); not calling the model again")
    assert str(raised.value) == expected and isinstance(raised.value, JobFailedError)
    assert (raised.value.count, raised.value.limit) == (LIMIT, LIMIT)
    assert model.requests == calls                       # no model call
    assert client.sessions.export_jsonl(sid) == text     # the session is unchanged
    [event] = completions(client, sid, handle.id)
    assert event.error == expected and event.result == {
        "loopGuard": {"count": LIMIT, "limit": LIMIT, "windowS": WINDOW_S}}
    record = client.jobs.get(handle.id)
    assert record.state.value == "failed" and record.result == event.result

    # A manual compaction is never refused, and does not count.
    assert client.compact(sid).wait(60) is not None
    assert model.requests > calls and client.redis.zcard(key) == LIMIT
