"""The circuit breaker: a candidate failing ``threshold`` times within ``window_s`` is cooled down.

Shared by every worker through Redis (``RedisCooldownStore``); ``MemoryCooldownStore`` serves a
single process (no Redis given). Redis trouble never blocks a summary: the store then answers
"not cooling" and forgets the failure (fail open), and logs why.

Keys (``prefix`` defaults to ``compactor:llm:``):
``<prefix>fail:<candidate>`` — failure counter, expires ``window_s`` after the first failure;
``<prefix>cool:<candidate>`` — present while the candidate is cooled down (expires by itself).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import redis

__all__ = ["CooldownStore", "MemoryCooldownStore", "RedisCooldownStore"]

log = logging.getLogger(__name__)


class CooldownStore(Protocol):
    def is_cooling(self, candidate: str) -> bool: ...

    def record_failure(self, candidate: str) -> bool:
        """Count one failure; True when this one starts a cooldown."""
        ...

    def record_success(self, candidate: str) -> None: ...


class RedisCooldownStore:
    def __init__(self, client: redis.Redis[Any], *, threshold: int = 5, window_s: float = 60.0,
                 cooldown_s: float = 60.0, prefix: str = "compactor:llm:",
                 recheck_s: float = 1.0) -> None:
        self._redis = client
        # A "not cooling" answer is reused for recheck_s: every model call asked Redis first
        # (an EXISTS per call, ~1 % of a busy worker's CPU). Another worker's cooldown is thus
        # seen up to recheck_s late; this process's own is seen at once. "Cooling" answers
        # always come from Redis, so an outage still fails open.
        self.recheck_s = recheck_s
        self._clear_until: dict[str, float] = {}
        # Likewise a success resets the failure count (a DEL per call) at most once per
        # recheck_s, unless this process counted a failure since: another worker's failures
        # are then forgotten up to recheck_s late.
        self._reset_until: dict[str, float] = {}
        self.threshold = threshold
        self._window_ms = max(1, int(window_s * 1000))
        self._cooldown_ms = max(1, int(cooldown_s * 1000))
        self._prefix = prefix

    def _keys(self, candidate: str) -> tuple[str, str]:
        # Both keys share a hash tag: the MULTI below must stay in one Redis Cluster slot.
        tag = "{" + hashlib.sha1(candidate.encode()).hexdigest()[:12] + "}"
        return f"{self._prefix}fail:{tag}{candidate}", f"{self._prefix}cool:{tag}{candidate}"

    def is_cooling(self, candidate: str) -> bool:
        import redis

        now = time.monotonic()
        if self._clear_until.get(candidate, 0.0) > now:
            return False
        try:
            cooling = bool(self._redis.exists(self._keys(candidate)[1]))
        except redis.RedisError as err:
            log.warning("cooldown check skipped (%s): %s", candidate, err)
            return False
        if not cooling:
            self._clear_until[candidate] = now + self.recheck_s
        return cooling

    def record_failure(self, candidate: str) -> bool:
        import redis

        fail_key, cool_key = self._keys(candidate)
        self._reset_until.pop(candidate, None)
        try:
            with self._redis.pipeline(transaction=True) as pipe:
                # SET NX starts the window with its expiry; INCR keeps that expiry.
                pipe.set(fail_key, 0, px=self._window_ms, nx=True)
                pipe.incr(fail_key)
                count = int(pipe.execute()[1])
            if count < self.threshold:
                return False
            self._clear_until.pop(candidate, None)
            with self._redis.pipeline(transaction=True) as pipe:
                pipe.set(cool_key, str(int(time.time() * 1000) + self._cooldown_ms),
                         px=self._cooldown_ms)
                pipe.delete(fail_key)
                pipe.execute()
            log.warning("model candidate %s cooled down for %d ms after %d failures",
                        candidate, self._cooldown_ms, count)
            return True
        except redis.RedisError as err:
            log.warning("cooldown bookkeeping skipped (%s): %s", candidate, err)
            return False

    def remaining_s(self, candidates: list[str]) -> dict[str, float]:
        """Seconds left of each candidate's cooldown (0 when not cooling), in one pipeline;
        raises redis errors (the metrics scrape reports them)."""
        pipe = self._redis.pipeline(transaction=False)
        for candidate in candidates:
            pipe.pttl(self._keys(candidate)[1])
        replies = pipe.execute()
        return {c: max(0, int(ms)) / 1000 for c, ms in zip(candidates, replies, strict=True)}

    def record_success(self, candidate: str) -> None:
        import redis

        now = time.monotonic()
        if self._reset_until.get(candidate, 0.0) > now:
            return
        try:
            self._redis.delete(self._keys(candidate)[0])
        except redis.RedisError as err:
            log.warning("cooldown reset skipped (%s): %s", candidate, err)
            return
        self._reset_until[candidate] = now + self.recheck_s


class MemoryCooldownStore:
    """The same rules inside one process."""

    def __init__(self, *, threshold: int = 5, window_s: float = 60.0, cooldown_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.threshold = threshold
        self._window_s = window_s
        self._cooldown_s = cooldown_s
        self._clock = clock
        self._lock = threading.Lock()
        self._failures: dict[str, tuple[float, int]] = {}  # candidate -> (window start, count)
        self._cool_until: dict[str, float] = {}

    def is_cooling(self, candidate: str) -> bool:
        with self._lock:
            return self._cool_until.get(candidate, 0.0) > self._clock()

    def record_failure(self, candidate: str) -> bool:
        now = self._clock()
        with self._lock:
            start, count = self._failures.get(candidate, (now, 0))
            if now - start > self._window_s:
                start, count = now, 0
            count += 1
            if count < self.threshold:
                self._failures[candidate] = (start, count)
                return False
            self._failures.pop(candidate, None)
            self._cool_until[candidate] = now + self._cooldown_s
            return True

    def record_success(self, candidate: str) -> None:
        with self._lock:
            self._failures.pop(candidate, None)
