"""The composition root: the service's ports (``worker.service.ports``) wired to Redis, the
hook runner and the model router. The one module of the service that names the concrete
implementations; built once per worker process, lazily (prefork children build their own).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, cast

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from api_client.contract.keys import ANY_TENANT, KeyLayout
from worker.compaction import PlanCaches
from worker.compaction.facts import SEARCH as FACT_SEARCH
from worker.hooks import load_hook_runner
from worker.llm import Summarizer, build_deterministic, build_summarizer
from worker.service._control import CancelWatch, LeaseHeartbeats
from worker.service.ports import SYSTEM_CLOCK, Runtime
from worker.settings import WorkerSettings, model_chain_text
from worker.store import CommitStore
from worker.store.draft_store import DraftStore
from worker.store.entry_cache import EntryCache
from worker.store.fair_index import FairIndex, fair_index_redis
from worker.store.job_lifecycle import JobStore
from worker.store.job_start import JobStarts
from worker.store.snapshot_store import SnapshotStore
from worker.store.tenant_slots import TenantSlots
from worker.store.tenant_usage import TenantUsageStore
from worker.store.token_counts import RedisTokenCounts
from worker.tokens import TokenCache, choose_counter, get_tokenizer

__all__ = ["build_runtime", "worker_redis"]

log = logging.getLogger("worker.service")


def worker_redis(settings: WorkerSettings) -> redis.Redis[str]:
    """The worker's Redis client: decoded replies, a few quick retries, no request-path budget
    (a large session's snapshot may take longer than the client's 1 s command timeout). A
    ``RedisCluster`` when ``redis_cluster`` is set (the same command API)."""
    options: dict[str, Any] = {
        "decode_responses": True, "socket_connect_timeout": 2.0, "socket_timeout": 30.0,
        "retry": Retry(ExponentialBackoff(cap=0.5, base=0.05), 2),
    }
    if settings.client.redis_cluster:
        from redis.cluster import RedisCluster

        cluster: Any = RedisCluster.from_url(settings.client.redis_url, **options)
        return cast("redis.Redis[str]", cluster)
    return redis.Redis.from_url(settings.client.redis_url, health_check_interval=30, **options)


def build_runtime(settings: WorkerSettings, *,
                  summarizer: Callable[[], Summarizer] | None = None) -> Runtime:
    """Connect nothing yet (redis-py connects on first use); load hooks and the model router."""
    client = worker_redis(settings)
    shared = settings.client  # what the client's settings say (keys, TTLs, limits)
    layout = KeyLayout(shared.key_prefix, ANY_TENANT)
    # The process's token counts: every job and the model router count with this one.
    tokenizer = get_tokenizer(settings.tokenizer, TokenCache())
    log.info("model chain: %s", model_chain_text(settings))
    if settings.tokenizer == "tiktoken":  # load the counter now, not in the first job
        log.info("cl100k counts by %s", choose_counter("auto").name)
    log.info("fact ledger looks facts up by %s", FACT_SEARCH.name)  # the fast extra or not
    on_close: list[Callable[[], Any]] = []
    if summarizer is None:
        router = build_summarizer(settings, client, tokenizer)
        on_close.append(router.close)
        summarizer = router.for_job
    on_close.append(client.close)  # last: the router's cooldown store may still write
    fair = fair_index_redis(shared, client)
    if fair is not None and fair is not client:
        on_close.insert(0, fair.close)
    jobs = JobStore(client, shared, layout, FairIndex(fair, layout))
    cancel_flags = CancelWatch(jobs)
    on_close.insert(0, cancel_flags.close)
    heartbeats = LeaseHeartbeats()
    on_close.insert(0, heartbeats.close)
    slots = TenantSlots(client, layout, max_running=shared.max_running,
                        hold_s=settings.job_deadline_s + settings.lease_ttl_s)
    # A job's start in one step on one Redis; on a Cluster (keys in many slots) step by step.
    starts = None if shared.redis_cluster else JobStarts(
        jobs, lease_ttl_s=settings.lease_ttl_s, slots=slots, budgets=True,
        max_session_bytes=shared.max_session_bytes)
    return Runtime(
        settings=settings,
        sessions=SnapshotStore(client, layout, EntryCache(),
                               max_bytes=shared.max_session_bytes),
        jobs=jobs,
        commits=CommitStore(client, layout, session_ttl_s=shared.session_ttl_s),
        tokenizer=tokenizer,
        hooks=load_hook_runner(settings),
        new_summarizer=summarizer,
        clock=SYSTEM_CLOCK,
        drafts=DraftStore(client, layout, shared.draft_ttl_s, shared.session_ttl_s),
        on_close=on_close,
        cancel_flags=cancel_flags,
        heartbeats=heartbeats,
        token_counts=RedisTokenCounts(client, layout, session_ttl_s=shared.session_ttl_s),
        # The process's planning caches: a re-plan of a session seen before (warm, or grown
        # since) serializes and folds the facts of its new messages only.
        plan_caches=PlanCaches(),
        usage=TenantUsageStore(client, layout),
        slots=slots,
        starts=starts,
        deterministic=build_deterministic(tokenizer).for_job,
    )
