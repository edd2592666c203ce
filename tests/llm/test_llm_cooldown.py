"""The circuit breaker stores: the same rules in memory and in Redis; Redis trouble fails open."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from worker.llm.cooldown import CooldownStore, MemoryCooldownStore, RedisCooldownStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_memory_store_threshold_window_and_expiry() -> None:
    clock = Clock()
    store = MemoryCooldownStore(threshold=3, window_s=10, cooldown_s=30, clock=clock)
    assert [store.record_failure("a"), store.record_failure("a")] == [False, False]
    clock.now += 11  # the window ran out: counting starts again
    assert [store.record_failure("a"), store.record_failure("a"), store.record_failure("a")] == [
        False, False, True]
    assert store.is_cooling("a") and not store.is_cooling("b")
    clock.now += 29
    assert store.is_cooling("a")
    clock.now += 2
    assert not store.is_cooling("a")


def test_success_resets_the_count() -> None:
    store = MemoryCooldownStore(threshold=2, clock=Clock())
    store.record_failure("a")
    store.record_success("a")
    assert store.record_failure("a") is False


def test_redis_store_shares_state_and_expires(redis_url: str) -> None:
    one = RedisCooldownStore(redis.Redis.from_url(redis_url), threshold=2, window_s=5,
                             cooldown_s=0.3, prefix="t:")
    two: CooldownStore = RedisCooldownStore(redis.Redis.from_url(redis_url), threshold=2,
                                            window_s=5, cooldown_s=0.3, prefix="t:")
    assert one.record_failure("m") is False
    assert two.record_failure("m") is True  # counted together
    assert one.is_cooling("m") and two.is_cooling("m")
    client = redis.Redis.from_url(redis_url)
    fail, cool = one._keys("m")  # type: ignore[attr-defined]
    assert fail.startswith("t:fail:{") and cool.startswith("t:cool:{")
    assert client.exists(fail) == 0 and 0 < client.pttl(cool) <= 300
    time.sleep(0.35)
    assert not one.is_cooling("m")


def test_a_clear_answer_is_reused_for_recheck_s(redis_url: str) -> None:
    # One EXISTS per candidate per recheck_s, not per model call; a cooldown another worker
    # starts is seen at most recheck_s late, one this store starts at once.
    one = RedisCooldownStore(redis.Redis.from_url(redis_url), threshold=1, prefix="t:",
                             recheck_s=0.3)
    two = RedisCooldownStore(redis.Redis.from_url(redis_url), threshold=1, prefix="t:")
    client = redis.Redis.from_url(redis_url)
    client.config_resetstat()
    assert not one.is_cooling("m") and not one.is_cooling("m")
    assert client.info("commandstats")["cmdstat_exists"]["calls"] == 1
    assert two.record_failure("m") is True
    assert not one.is_cooling("m")  # within recheck_s of the clear answer
    time.sleep(0.35)
    assert one.is_cooling("m")
    assert not one.is_cooling("n") and one.record_failure("n") is True and one.is_cooling("n")


def test_a_success_resets_the_count_once_per_recheck_s(redis_url: str) -> None:
    # One DEL per candidate per recheck_s, not per model call; a failure this store counts
    # makes its next success reset at once, another worker's is forgotten up to recheck_s late.
    one = RedisCooldownStore(redis.Redis.from_url(redis_url), threshold=5, prefix="r:",
                             recheck_s=60)
    two = RedisCooldownStore(redis.Redis.from_url(redis_url), threshold=5, prefix="r:")
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    fail, _ = one._keys("m")  # type: ignore[attr-defined]
    client.config_resetstat()
    one.record_success("m")
    one.record_success("m")
    assert client.info("commandstats")["cmdstat_del"]["calls"] == 1
    two.record_failure("m")
    two.record_failure("m")
    one.record_success("m")  # within recheck_s of its last reset
    assert client.get(fail) == "2"
    assert one.record_failure("m") is False and client.get(fail) == "3"
    one.record_success("m")  # its own failure came since: reset now
    assert client.exists(fail) == 0


def test_redis_failure_window_has_an_expiry(redis_url: str) -> None:
    store = RedisCooldownStore(redis.Redis.from_url(redis_url), threshold=5, window_s=2,
                               prefix="t:")
    store.record_failure("m")
    store.record_failure("m")
    client = redis.Redis.from_url(redis_url)
    fail, _ = store._keys("m")
    assert client.get(fail) == b"2" and 0 < client.pttl(fail) <= 2000


def test_redis_outage_fails_open(own_redis: Any, caplog: pytest.LogCaptureFixture) -> None:
    store = RedisCooldownStore(redis.Redis.from_url(own_redis.url, socket_timeout=0.5,
                                                    socket_connect_timeout=0.5),
                               threshold=1, prefix="t:")
    assert store.record_failure("m") is True and store.is_cooling("m")
    own_redis.stop()
    started = time.monotonic()
    assert store.is_cooling("m") is False
    assert store.record_failure("m") is False
    store.record_success("m")
    assert time.monotonic() - started < 5
    assert "cooldown" in caplog.text
