"""The fair order across tenants and the queue-side quotas (``lua/_admit.lua``), read straight
from the broker's queue list of a real Redis (no worker: the order is what a worker would pop).

A job's tag is its enqueue time + ``fair_delay_ms`` / weight per queued job of its tenant before
it; the list is kept in tag order from the end kombu pops."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import redis

from api_client import ClientSettings, CompactionClient, JobHandle, JobKind, QuotaExceededError
from api_client.contract.keys import KeyLayout
from api_client.contract.routing import QUEUE_COMPACT, queue_list, route_for
from worker.store.fair_index import FairIndex
from worker.store.job_lifecycle import JobStore

MANUAL = route_for(JobKind.COMPACT).priority


def _clients(url: str, **overrides: object) -> dict[str, CompactionClient]:
    base = ClientSettings(redis_url=url, send_sent_event=False, **overrides)  # type: ignore[arg-type]
    return {name: CompactionClient(base, tenant=name) for name in ("a", "b")}


@pytest.fixture
def tenants(redis_url: str) -> Iterator[dict[str, CompactionClient]]:
    clients = _clients(redis_url)
    yield clients
    for c in clients.values():
        c.close()


def _sessions(client: CompactionClient, count: int) -> list[str]:
    return [client.sessions.create(f"s{i}") for i in range(count)]


def _served(raw: redis.Redis[str], prefix: str = "compactor:broker:") -> list[str]:
    """The queued job ids in the order a worker pops them (kombu: from the right end)."""
    messages = raw.lrange(queue_list(QUEUE_COMPACT, MANUAL, prefix), 0, -1)
    ids = [json.loads(base64.b64decode(json.loads(m)["body"]))[0][0] for m in messages]
    return [job_id.split(":")[0] for job_id in reversed(ids)]  # "a~s3"


def _flood(tenants: dict[str, CompactionClient], a_jobs: int, b_jobs: int) -> None:
    for sid in _sessions(tenants["a"], a_jobs):
        tenants["a"].compact(sid)
    for sid in _sessions(tenants["b"], b_jobs):
        tenants["b"].compact(sid)


def test_another_tenants_next_jobs_go_ahead_of_a_flood(
        tenants: dict[str, CompactionClient], raw: redis.Redis[str]) -> None:
    _flood(tenants, 20, 3)
    order = _served(raw)
    assert len(order) == 23
    assert order[:7] == ["a~s0", "b~s0", "a~s1", "b~s1", "a~s2", "b~s2", "a~s3"]
    assert order[6:] == [f"a~s{i}" for i in range(3, 20)]  # each tenant's own order is FIFO


def test_one_tenant_alone_is_first_come_first_served(
        tenants: dict[str, CompactionClient], raw: redis.Redis[str]) -> None:
    _flood(tenants, 12, 0)
    assert _served(raw) == [f"a~s{i}" for i in range(12)]


def test_a_delay_of_zero_is_first_come_first_served(redis_url: str,
                                                    raw: redis.Redis[str]) -> None:
    clients = _clients(redis_url, fair_delay_ms=0)
    _flood(clients, 6, 2)
    assert _served(raw) == [*(f"a~s{i}" for i in range(6)), "b~s0", "b~s1"]


def test_a_weight_of_two_takes_two_turns_to_one(
        tenants: dict[str, CompactionClient], raw: redis.Redis[str]) -> None:
    raw.hset(tenants["b"].layout.tenant_quota("b"), "weight", "2")
    _flood(tenants, 10, 4)
    assert _served(raw)[:8] == ["a~s0", "b~s0", "b~s1", "a~s1", "b~s2", "b~s3", "a~s2",
                                "a~s3"]


def test_a_started_job_leaves_the_index_and_the_tenants_queue(
        tenants: dict[str, CompactionClient], raw: redis.Redis[str], redis_url: str) -> None:
    a = tenants["a"]
    handle = a.compact(a.sessions.create("one"))
    tags, messages = a.layout.fair_index(QUEUE_COMPACT, MANUAL)
    queued = a.layout.tenant_queued("a")
    assert raw.zscore(tags, handle.id) is not None and raw.hexists(messages, handle.id)
    assert raw.zcard(queued) == 1
    worker = JobStore(redis.Redis.from_url(redis_url, decode_responses=True),
                      ClientSettings(redis_url=redis_url))
    assert worker.mark_running(handle.id) == 1
    assert raw.zscore(tags, handle.id) is None and not raw.hexists(messages, handle.id)
    assert raw.zcard(queued) == 0


def test_a_stale_pivot_is_dropped_and_the_message_still_queued(
        tenants: dict[str, CompactionClient], raw: redis.Redis[str]) -> None:
    _flood(tenants, 3, 0)
    raw.rpop(queue_list(QUEUE_COMPACT, MANUAL, "compactor:broker:"), 3)  # popped, never started
    _flood(tenants, 0, 1)
    assert _served(raw) == ["b~s0"]


def test_over_the_queued_jobs_quota_nothing_is_queued(
        tenants: dict[str, CompactionClient], raw: redis.Redis[str]) -> None:
    raw.hset(tenants["a"].layout.tenant_quota("a"), "queued_jobs_max", "2")
    sids = _sessions(tenants["a"], 3)
    tenants["a"].compact(sids[0])
    tenants["a"].compact(sids[1])
    with pytest.raises(QuotaExceededError) as caught:
        tenants["a"].compact(sids[2])
    err = caught.value
    assert (err.tenant, err.quota, err.limit, err.value, err.resets_at) == (
        "a", "queued_jobs", 2, 2, None)
    assert _served(raw) == ["a~s0", "a~s1"]
    assert not raw.keys("compactor:tenant:a:session:{s2}:job:*")
    tenants["b"].compact(tenants["b"].sessions.create("free"))  # another tenant is not held
    assert _served(raw) == ["a~s0", "b~free", "a~s1"]


def test_a_lone_job_trims_nothing_and_a_stale_one_leaves_with_the_next(
        tenants: dict[str, CompactionClient], raw: redis.Redis[str]) -> None:
    # A job alone in its tenant's queued set has nothing to trim nor anything ahead of it: its
    # admission sends no ZREMRANGEBYSCORE and no ZCOUNT. With others there, the ones queued
    # longer than job_pending_ttl_s ago (a lost message) are dropped before the quota counts.
    a = tenants["a"]
    queued = a.layout.tenant_queued("a")
    raw.config_resetstat()
    a.compact(a.sessions.create("lone"))
    stats = raw.info("commandstats")
    # the one ZREMRANGEBYSCORE left is the placing's (its index of tags), not the admission's
    assert stats["cmdstat_zremrangebyscore"]["calls"] == 1 and "cmdstat_zcount" not in stats
    old_ms = int(datetime.now(UTC).timestamp() * 1000) - 2 * 3_600_000
    raw.zadd(queued, {"a~lost:0123456789abcdef": MANUAL * 10**13 + old_ms})
    raw.hset(a.layout.tenant_quota("a"), "queued_jobs_max", "2")
    a.compact(a.sessions.create("next"))  # the lost one does not count against the quota
    assert raw.zscore(queued, "a~lost:0123456789abcdef") is None
    assert raw.zcard(queued) == 2


@pytest.mark.parametrize(("reason", "used", "refused"), [
    ("manual", 1000, "tokens_per_day"),
    ("manual", 999, None),
    ("threshold", 5000, None),       # an automatic compaction falls back in the worker
    ("speculative", 800, "tokens_per_day"),  # drafts stop first, at 80 %
    ("speculative", 799, None),
])
def test_the_model_budget_at_enqueue(tenants: dict[str, CompactionClient],
                                     raw: redis.Redis[str], reason: str, used: int,
                                     refused: str | None) -> None:
    a = tenants["a"]
    raw.hset(a.layout.tenant_quota("a"), "tokens_per_day", "1000")
    day = datetime.now(UTC).strftime("%Y-%m-%d")
    raw.hset(a.layout.tenant_usage("a", day), mapping={"input_tokens": used})
    sid = a.sessions.create("s")
    a.sessions.append(sid, {"role": "user", "content": "hello", "timestamp": 1})
    if refused is None:
        a.jobs.enqueue(sid, "compact", reason=reason)
        return
    with pytest.raises(QuotaExceededError) as caught:
        a.jobs.enqueue(sid, "compact", reason=reason)
    assert caught.value.quota == refused
    assert caught.value.resets_at is not None and caught.value.resets_at.endswith("T00:00:00Z")


def test_near_the_budget_observe_starts_no_draft(tenants: dict[str, CompactionClient],
                                                 raw: redis.Redis[str]) -> None:
    """Drafts stop first: where observe would start one, the tenant at 80 % of its model budget
    gets none (and no error); the threshold compaction itself is still enqueued."""
    a = tenants["a"]
    sid = a.sessions.create("s")
    a.sessions.append(sid, {"role": "user", "content": "hello", "timestamp": 1})
    window = 200_000
    near = window - a.settings.reserve_tokens - 4_000  # inside the draft band
    started = a.observe(sid, context_tokens=near, context_window=window)
    assert started.action == "precompute" and isinstance(started.handle, JobHandle)
    started.handle.cancel()
    raw.hset(a.layout.tenant_quota("a"), "tokens_per_day", "1000")
    raw.hset(a.layout.tenant_usage("a", datetime.now(UTC).strftime("%Y-%m-%d")),
             "draft_input_tokens", "800")
    assert a.observe(sid, context_tokens=near + 1, context_window=window).action == "none"
    raw.delete(a.layout.tenant_usage("a", datetime.now(UTC).strftime("%Y-%m-%d")))
    assert a.observe(sid, context_tokens=near + 2, context_window=window).action == "precompute"
    over = a.observe(sid, context_tokens=window, context_window=window)
    assert over.action == "compact"


def test_a_broker_redis_of_its_own_keeps_the_fair_order(redis_url: str, own_redis: Any) -> None:
    """Sessions on one Redis (a Cluster, say), the broker on another: the admission on the
    sessions' Redis gives the tag, ``place.lua`` on the broker's puts the message in its place,
    and a worker's start drops it from the broker's index."""
    own_redis.start()
    broker: redis.Redis[str] = redis.Redis.from_url(own_redis.url, decode_responses=True)
    clients = _clients(redis_url, broker_url=own_redis.url)
    _flood(clients, 6, 2)
    assert _served(broker) == ["a~s0", "b~s0", "a~s1", "b~s1", *(f"a~s{i}" for i in range(2, 6))]
    first = clients["a"].job(f"a~s0:{_token(broker, 'a~s0')}")
    worker = JobStore(redis.Redis.from_url(redis_url, decode_responses=True),
                      ClientSettings(redis_url=redis_url, broker_url=own_redis.url),
                      fair=FairIndex(broker, KeyLayout(tenant=None)))
    assert worker.mark_running(first.id) == 1
    tags, _ = clients["a"].layout.fair_index(QUEUE_COMPACT, MANUAL)
    assert broker.zscore(tags, first.id) is None and broker.zcard(tags) == 7
    for c in clients.values():
        c.close()


def _token(broker: redis.Redis[str], sid: str) -> str:
    messages = broker.lrange(queue_list(QUEUE_COMPACT, MANUAL, "compactor:broker:"), 0, -1)
    ids = [json.loads(base64.b64decode(json.loads(m)["body"]))[0][0] for m in messages]
    return next(i for i in ids if i.startswith(sid + ":")).rpartition(":")[2]


def test_a_summary_is_admitted_and_placed_like_any_job(
        tenants: dict[str, CompactionClient], raw: redis.Redis[str]) -> None:
    a = tenants["a"]
    raw.hset(a.layout.tenant_quota("a"), "tokens_per_day", "10")
    raw.hset(a.layout.tenant_usage("a", datetime.now(UTC).strftime("%Y-%m-%d")),
             "output_tokens", "10")
    with pytest.raises(QuotaExceededError):
        a.summarize("Summarize.", "some text")
    assert raw.zcard(a.layout.tenant_queued("a")) == 0  # refused: not queued
    handle = tenants["b"].summarize("Summarize.", "some text")
    assert raw.zscore(a.layout.tenant_queued("b"), handle.id) is not None
