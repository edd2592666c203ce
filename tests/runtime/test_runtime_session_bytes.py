"""What a session costs in Redis after one compaction (docs/storage.md, "Sizing"): every key of
the session (``MEMORY USAGE ... SAMPLES 0``, exact) against the bytes of its JSONL, and what a
job adds (its record and the session's events) bounded, whatever the session's size. The demo
session (189 kB) takes 1.11 x; a session of a few kB does not meet 1.5 x yet: the job's fixed
~12 kB (the record keeps the entry the events carry too) is most of it."""

from __future__ import annotations

import pytest
import redis
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import new_session, runtime_settings

from api_client import CompactionClient
from worker.settings import WorkerSettings

MOST_RATIO = 1.5  # the session after a compaction, over its JSONL
# A job's record and the session's event stream: a fixed cost (the summary, the result, three
# events, the stream's own node), not a copy of the session.
MOST_JOB_BYTES = 16 << 10


@pytest.fixture(scope="module")
def worker_settings(module_redis: str, model: ModelServer) -> WorkerSettings:
    return runtime_settings(module_redis, models=[model.candidate()])


def session_bytes(raw: redis.Redis[str], client: CompactionClient, sid: str) -> dict[str, int]:
    """Exact bytes of every key of the session, by its name after the hash tag."""
    base = client.layout.session(sid).header.removesuffix("header")
    pattern = base.replace("{", "[{]").replace("}", "[}]") + "*"
    return {key[len(base):]: int(raw.memory_usage(key, samples=0) or 0)
            for key in raw.scan_iter(match=pattern, count=1000)}


def test_a_session_after_one_compaction_stays_near_its_jsonl(
        client: CompactionClient, module_redis: str, demo_text: str) -> None:
    raw = redis.Redis.from_url(module_redis, decode_responses=True)
    sid = new_session(client, demo_text)
    handle = client.compact(sid, reason="manual")
    handle.wait(60)
    assert handle.record().state.value == "succeeded"
    sizes = session_bytes(raw, client, sid)
    jsonl = len(demo_text.encode())
    job = sum(size for name, size in sizes.items() if name.startswith("job:")) + sizes["events"]
    print(f"session {sum(sizes.values())} B for a JSONL of {jsonl} B: {sizes}")
    assert sum(sizes.values()) <= MOST_RATIO * jsonl, sizes
    assert job <= MOST_JOB_BYTES, sizes
