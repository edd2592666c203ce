"""The retry policy as a table: one failed attempt in, one decision out."""

from __future__ import annotations

import pytest

from worker.llm.retry_policy import Decision, Failure, RetryPolicy, backoff_ms, decide

# defaults: 1000 ms base, x2, 8000 cap, ±20 %, 30 s wait cap, 3 per candidate, 20 per job
P = RetryPolicy()
SMALL = RetryPolicy(base_delay_ms=10, factor=3, max_backoff_ms=50, jitter=0.5, max_wait_ms=100,
                    attempts_per_candidate=5, job_attempt_budget=6)


@pytest.mark.parametrize(
    ("policy", "failure", "expected"),
    [
        # transient: exponential backoff 1000, 2000, then the candidate is done after 3 attempts
        (P, Failure("transient", attempt=1), Decision("retry", 1000, "retry in 1000 ms")),
        (P, Failure("transient", attempt=2), Decision("retry", 2000, "retry in 2000 ms")),
        (P, Failure("transient", attempt=3), Decision("next_candidate", 0, "3 attempts failed")),
        # jitter: the injected random value spreads the delay by ±20 %
        (P, Failure("transient", attempt=1, jitter_random=0.0),
         Decision("retry", 800, "retry in 800 ms")),
        (P, Failure("transient", attempt=2, jitter_random=0.75),
         Decision("retry", 2200, "retry in 2200 ms")),
        # retry-after is honoured when longer than the backoff, ignored when shorter
        (P, Failure("transient", attempt=1, retry_after_ms=5000),
         Decision("retry", 5000, "retry in 5000 ms")),
        (P, Failure("transient", attempt=1, retry_after_ms=10),
         Decision("retry", 1000, "retry in 1000 ms")),
        (P, Failure("transient", attempt=1, retry_after_ms=30000),
         Decision("retry", 30000, "retry in 30000 ms")),
        # ... up to the cap: a longer wait moves on, even on the last candidate
        (P, Failure("transient", attempt=1, retry_after_ms=30001),
         Decision("next_candidate", 0, "wait of 30001 ms exceeds the 30000 ms cap")),
        (P, Failure("transient", attempt=1, retry_after_ms=120000, last_candidate=True),
         Decision("next_candidate", 0, "wait of 120000 ms exceeds the 30000 ms cap")),
        # timeouts move on at once, except on the last candidate
        (P, Failure("timeout", attempt=1), Decision("next_candidate", 0, "timeout")),
        (P, Failure("timeout", attempt=1, last_candidate=True),
         Decision("retry", 1000, "retry in 1000 ms")),
        (P, Failure("timeout", attempt=3, last_candidate=True),
         Decision("next_candidate", 0, "3 attempts failed")),
        # permanent, overflow, cancelled: never retried
        (P, Failure("permanent", attempt=1), Decision("next_candidate", 0, "permanent error")),
        (P, Failure("permanent", attempt=1, last_candidate=True),
         Decision("next_candidate", 0, "permanent error")),
        (P, Failure("overflow", attempt=1),
         Decision("next_candidate", 0, "context overflow (never retried unchanged)")),
        (P, Failure("cancelled", attempt=1), Decision("stop", 0, "cancelled")),
        (P, Failure("cancelled", attempt=1, job_attempts=99), Decision("stop", 0, "cancelled")),
        # the per-job budget
        (P, Failure("transient", attempt=1, job_attempts=19),
         Decision("retry", 1000, "retry in 1000 ms")),
        (P, Failure("transient", attempt=1, job_attempts=20),
         Decision("next_candidate", 0, "job attempt budget spent")),
        # a small policy: factor 3, backoff cap 50, jitter ±50 %
        (SMALL, Failure("transient", attempt=1), Decision("retry", 10, "retry in 10 ms")),
        (SMALL, Failure("transient", attempt=2), Decision("retry", 30, "retry in 30 ms")),
        (SMALL, Failure("transient", attempt=3), Decision("retry", 50, "retry in 50 ms")),
        (SMALL, Failure("transient", attempt=4, jitter_random=0.0),
         Decision("retry", 25, "retry in 25 ms")),
        (SMALL, Failure("transient", attempt=5),
         Decision("next_candidate", 0, "5 attempts failed")),
        (SMALL, Failure("transient", attempt=1, retry_after_ms=101),
         Decision("next_candidate", 0, "wait of 101 ms exceeds the 100 ms cap")),
        (SMALL, Failure("transient", attempt=2, job_attempts=6),
         Decision("next_candidate", 0, "job attempt budget spent")),
    ],
)
def test_decide(policy: RetryPolicy, failure: Failure, expected: Decision) -> None:
    assert decide(policy, failure) == expected


@pytest.mark.parametrize(
    ("attempt", "jitter_random", "expected"),
    [(1, 0.5, 1000), (2, 0.5, 2000), (3, 0.5, 4000), (4, 0.5, 8000), (9, 0.5, 8000),
     (1, 0.0, 800), (1, 1.0, 1200), (1, -3.0, 800), (1, 7.0, 1200), (0, 0.5, 1000)],
)
def test_backoff(attempt: int, jitter_random: float, expected: int) -> None:
    assert backoff_ms(P, attempt, jitter_random) == expected
