"""The loop guard and instant compaction together (docs/instant-compaction.md): drafts applied
by the client are counted and checked in the same round trip, the client refuses at the limit
without a task or model call (a failed record, as a worker's refusal), speculative jobs of a
looping session are refused by the worker, the guard resets as the window slides, and
``ineffective`` is judged against the agent's window when the request names it."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Iterator

import pytest
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import (
    completions,
    entries_of_type,
    new_session,
    runtime_settings,
    session_events,
)

from api_client import (
    AsyncCompactionClient,
    ClientSettings,
    CompactionClient,
    CompactionLoopError,
    JobState,
)
from worker.celery_app import CompactorCelery
from worker.settings import WorkerSettings

LIMIT, WINDOW_S = 2, 4.0
GUARD = {"loop_guard_max": LIMIT, "loop_guard_window_s": WINDOW_S, "keep_recent_tokens": 300}
TINY_WINDOW = 16_384 + 100   # a 100-token threshold: every compaction leaves more than 80
HUGE_WINDOW = 10_000_000


@pytest.fixture(scope="module")
def worker_settings(module_redis: str, model: ModelServer) -> WorkerSettings:
    return runtime_settings(module_redis, models=[model.candidate()], **GUARD)


@pytest.fixture
def client(app: CompactorCelery, module_redis: str) -> Iterator[CompactionClient]:
    with CompactionClient(ClientSettings(redis_url=module_redis, **GUARD)) as c:
        yield c


def grow(client: CompactionClient, sid: str, tag: str) -> None:
    """New turns after the kept region, so an automatic compaction has work."""
    for i in range(4):
        client.sessions.append(sid, {"role": "user", "timestamp": 1, "content": [
            {"type": "text", "text": f"{tag} step {i}: " + "details " * 250}]})


def compacted(client: CompactionClient, sid: str, tag: str, reason: str = "threshold") -> str:
    grow(client, sid, tag)
    handle = client.compact(sid, reason=reason)
    assert isinstance(handle.wait(30), dict), f"{reason} compaction {tag} committed nothing"
    return handle.id


def counted(client: CompactionClient, sid: str) -> list[str]:
    return list(client.redis.zrange(client.layout.session(sid).compactions, 0, -1))


def speculate(client: CompactionClient, sid: str) -> None:
    assert client.compact(sid, reason="speculative").wait(30) is None
    assert client.redis.exists(client.layout.session(sid).draft)


def queued(client: CompactionClient) -> int:
    """Messages in the compaction queues' lists (under the broker's key prefix)."""
    return sum(client.redis.llen(client.layout.broker + name)
               for name in ("compactor.compact", "compactor.compact:3", "compactor.urgent"))


def test_the_client_refuses_at_the_limit_and_the_window_resets_it(
        client: CompactionClient, model: ModelServer, demo_text: str) -> None:
    sid = new_session(client, demo_text)
    jobs = [compacted(client, sid, f"round {n}") for n in range(LIMIT)]
    assert sorted(counted(client, sid)) == sorted(jobs)
    grow(client, sid, "one too many")
    text, calls = client.sessions.export_jsonl(sid), model.requests
    queue = queued(client)
    for reason, prefix in (("threshold", "Auto-compaction failed"),
                           ("overflow", "Context overflow recovery failed")):
        handle = client.compact(sid, reason=reason)
        assert not handle.from_draft and handle.record().state is JobState.FAILED  # at once
        with pytest.raises(CompactionLoopError) as caught:
            handle.wait(0.5)
        err = caught.value
        assert (err.count, err.limit, err.window_s, err.job_id) == (LIMIT, LIMIT, WINDOW_S,
                                                                     handle.id)
        assert str(err) == (f"{prefix}: compaction loop: session {sid} had {LIMIT} automatic "
                            f"compactions within 4 s (limit {LIMIT}); not calling the model again")
        [end] = completions(client, sid, handle.id)   # the same shape as a worker's refusal
        assert end.state is JobState.FAILED and end.error == str(err)
        assert end.result == {"loopGuard": {"count": LIMIT, "limit": LIMIT, "windowS": WINDOW_S}}
        assert handle.record().result == end.result
        glob = [f for _, f in client.redis.xrange(client.layout.global_events)
                if f["job"] == handle.id]
        assert [f["type"] for f in glob] == ["compaction_end"]
    assert model.requests == calls and client.sessions.export_jsonl(sid) == text
    assert queued(client) == queue
    # Manual compactions are neither refused nor counted: the user's way out.
    compacted(client, sid, "by hand", reason="manual")
    assert len(counted(client, sid)) == LIMIT
    # The window slides: once the oldest count is older than the window, it resumes.
    oldest = float(client.redis.zrange(client.layout.session(sid).compactions, 0, 0,
                                       withscores=True)[0][1])
    time.sleep(max(0.0, oldest + WINDOW_S - time.time()) + 0.3)
    compacted(client, sid, "after the window")
    assert len(entries_of_type(client, sid, "compaction")) == LIMIT + 2


def test_an_applied_draft_is_counted_and_a_draft_is_refused_at_the_limit(
        client: CompactionClient, module_redis: str, demo_text: str) -> None:
    sid = new_session(client, demo_text)
    compacted(client, sid, "first")
    grow(client, sid, "second")
    speculate(client, sid)
    draft = client.redis.get(client.layout.session(sid).draft)
    strict = ClientSettings(redis_url=module_redis, **{**GUARD, "loop_guard_max": 1})
    with CompactionClient(strict) as other:  # a client whose limit is already reached
        refused = other.compact(sid, reason="threshold")
        assert not refused.from_draft
        with pytest.raises(CompactionLoopError):
            refused.wait(0.5)
    # Refused before the draft was looked at: it is still stored, the session unchanged.
    assert client.redis.get(client.layout.session(sid).draft) == draft
    assert len(entries_of_type(client, sid, "compaction")) == 1
    applied = client.compact(sid, reason="threshold")
    assert applied.from_draft and isinstance(applied.wait(0.5), dict)
    assert applied.id in counted(client, sid) and len(counted(client, sid)) == LIMIT
    grow(client, sid, "third")
    with pytest.raises(CompactionLoopError):
        client.compact(sid, reason="threshold").wait(0.5)
    assert len(entries_of_type(client, sid, "compaction")) == LIMIT


def test_the_worker_refuses_a_speculative_job_of_a_looping_session(
        client: CompactionClient, model: ModelServer, demo_text: str) -> None:
    sid = new_session(client, demo_text)
    for n in range(LIMIT):
        compacted(client, sid, f"loop {n}")
    grow(client, sid, "more")
    calls = model.requests
    handle = client.compact(sid, reason="speculative")  # the client does not check these
    with pytest.raises(CompactionLoopError) as caught:
        handle.wait(30)
    assert caught.value.count == LIMIT and model.requests == calls
    assert client.redis.get(client.layout.session(sid).draft) is None
    [end] = completions(client, sid, handle.id)
    assert end.result == {"loopGuard": {"count": LIMIT, "limit": LIMIT, "windowS": WINDOW_S}}


@pytest.mark.parametrize(("window", "flag"), [(TINY_WINDOW, True), (HUGE_WINDOW, False)])
def test_the_request_window_judges_a_worker_compaction(client: CompactionClient,
                                                       demo_text: str, window: int,
                                                       flag: bool) -> None:
    sid = new_session(client, demo_text)
    handle = client.compact(sid, reason="threshold", context_window=window)
    assert isinstance(handle.wait(30), dict)
    record = handle.record()
    assert record.context_window == window
    assert record.result is not None and record.result["ineffective"] is flag
    events = {e.type.value: e for e in session_events(client, sid) if e.job_id == handle.id}
    assert events["session_compact"].ineffective is flag
    assert events["compaction_end"].ineffective is flag


@pytest.mark.parametrize(("window", "flag"), [("tight", True), (HUGE_WINDOW, False),
                                              (None, False)])
def test_an_applied_draft_is_judged_too(client: CompactionClient, demo_text: str,
                                        window: int | str | None, flag: bool) -> None:
    sid = new_session(client, demo_text)
    speculate(client, sid)
    if window == "tight":  # it fits (is applied), yet leaves more than 0.8 × the threshold
        after = json.loads(client.redis.get(client.layout.session(sid).draft) or "")["tokensAfter"]
        window = 16_384 + math.ceil(after / 0.9)
    assert not isinstance(window, str)
    handle = client.compact(sid, reason="threshold", context_window=window)
    assert handle.from_draft
    record = handle.record()
    # Without a window the worker's line (stored in the draft) decides: the worker's default
    # 128k window leaves room for the sample session.
    assert record.result is not None and record.result["ineffective"] is flag
    assert record.stall_ms is not None and 0 <= record.stall_ms < 5_000
    events = {e.type.value: e for e in session_events(client, sid) if e.job_id == handle.id}
    assert events["session_compact"].ineffective is flag
    assert events["compaction_end"].ineffective is flag


def test_the_async_client_refuses_too_and_observe_passes_the_window(
        client: CompactionClient, module_redis: str, demo_text: str) -> None:
    sid = new_session(client, demo_text)
    for n in range(LIMIT):
        compacted(client, sid, f"async {n}")
    grow(client, sid, "async more")

    async def run() -> None:
        async with AsyncCompactionClient(ClientSettings(redis_url=module_redis, **GUARD)) as ac:
            done = await ac.observe(sid, context_tokens=190_000, context_window=200_000)
            assert done.action == "compact" and done.handle is not None
            with pytest.raises(CompactionLoopError):
                await done.handle.wait(0.5)
            record = await ac.jobs.get(done.handle.id)
            assert record.state is JobState.FAILED and record.context_window == 200_000

    asyncio.run(run())
    assert len(entries_of_type(client, sid, "compaction")) == LIMIT
