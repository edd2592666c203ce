"""Everything a worker process shares between jobs: settings, Redis, stores, models, hooks.

Built once per process, lazily (prefork children build their own after the fork).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from api_client.keys import KeyLayout
from api_client.session_store import SessionStore
from worker.compaction import CompactionSettings, Tokenizer, get_tokenizer
from worker.hooks import HookRunner, load_hook_runner
from worker.llm import Summarizer, build_summarizer
from worker.settings import WorkerSettings
from worker.store import CommitStore
from worker.store.jobs import JobStore
from worker.tokens import TOKEN_CACHE

__all__ = ["Runtime", "build_runtime", "worker_redis"]

log = logging.getLogger("worker.service")


def worker_redis(settings: WorkerSettings) -> redis.Redis[str]:
    """The worker's Redis client: decoded replies, a few quick retries, no request-path budget
    (a large session's snapshot may take longer than the client's 1 s command timeout)."""
    return redis.Redis.from_url(
        settings.redis_url,
        decode_responses=True,
        socket_connect_timeout=2.0,
        socket_timeout=30.0,
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 2),
        health_check_interval=30,
    )


@dataclass
class Runtime:
    settings: WorkerSettings
    redis: redis.Redis[str]
    sessions: SessionStore
    jobs: JobStore
    commits: CommitStore
    tokenizer: Tokenizer
    hooks: HookRunner
    # A fresh summarizer per job (the router's per-job attempt budget).
    new_summarizer: Callable[[], Summarizer]
    on_close: list[Callable[[], Any]] = field(default_factory=list)

    @property
    def worker_id(self) -> str:
        return self.settings.worker_id

    @property
    def compaction_settings(self) -> CompactionSettings:
        return CompactionSettings(keep_recent_tokens=self.settings.keep_recent_tokens,
                                  reserve_tokens=self.settings.reserve_tokens)

    def close(self) -> None:
        for fn in self.on_close:
            try:
                fn()
            except Exception as err:  # closing must not mask the reason of a shutdown
                log.warning("runtime close: %s", err)
        self.redis.close()


def build_runtime(settings: WorkerSettings, *,
                  summarizer: Callable[[], Summarizer] | None = None) -> Runtime:
    """Connect nothing yet (redis-py connects on first use); load hooks and the model router."""
    client = worker_redis(settings)
    layout = KeyLayout(settings.key_prefix)
    on_close: list[Callable[[], Any]] = []
    tokenizer = get_tokenizer(settings.tokenizer)
    TOKEN_CACHE.resize(settings.token_cache_entries)
    if summarizer is None:
        router = build_summarizer(settings, client, tokenizer)
        on_close.append(router.close)
        summarizer = router.for_job
    return Runtime(
        settings=settings,
        redis=client,
        sessions=SessionStore(client, layout),
        jobs=JobStore(client, settings, layout),
        commits=CommitStore(client, layout, walk_limit=settings.commit_walk_limit),
        tokenizer=tokenizer,
        hooks=load_hook_runner(settings),
        new_summarizer=summarizer,
        on_close=on_close,
    )
