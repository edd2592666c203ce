"""What to do after one failed model attempt: a pure function of the failure and the policy.

Defaults, and why they differ from the reference (docs/rules.md "Automatic compaction": 2 000 ms
base, 3 retries, a
30 s wait cap before switching candidate):

* ``base_delay_ms`` 1 000, ``factor`` 2, ``max_backoff_ms`` 8 000, jitter ±20 %: waits of about
  1 s then 2 s. A worker slot is held while we sleep, and the next candidate is usually a
  better use of it than a 4th attempt on a provider that is struggling.
* ``attempts_per_candidate`` 3 (the first try plus 2 retries; the reference makes 4).
* ``max_wait_ms`` 30 000: a ``retry-after`` hint is honoured (we never retry earlier than asked),
  but a wait longer than this moves to the next candidate instead of holding the slot; unlike
  the reference, the last candidate does not wait it out either.
* A timeout moves to the next candidate at once (a hung provider must not hold a job); only the
  last candidate retries after a timeout.
* ``job_attempt_budget`` 20: HTTP attempts per job, over all its calls and candidates; each
  answered chunk of a chunked call gives its attempt back (``router.AttemptBudget``), so a
  long session is not cut off by it while failures still are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from worker.llm.errors import ErrorKind

__all__ = ["Action", "Decision", "Failure", "RetryPolicy", "backoff_ms", "decide"]

Action = Literal["retry", "next_candidate", "stop"]


@dataclass(frozen=True)
class RetryPolicy:
    base_delay_ms: int = 1_000
    factor: float = 2.0
    max_backoff_ms: int = 8_000
    jitter: float = 0.2  # the backoff is scaled by a factor in [1 - jitter, 1 + jitter]
    max_wait_ms: int = 30_000
    attempts_per_candidate: int = 3
    job_attempt_budget: int = 20


@dataclass(frozen=True)
class Failure:
    kind: ErrorKind
    attempt: int  # attempts made on this candidate, the failed one included (1 = first try)
    job_attempts: int = 1  # HTTP attempts the job has spent of its budget, the failed one too
    retry_after_ms: int | None = None
    last_candidate: bool = False
    jitter_random: float = 0.5  # uniform in [0, 1); 0.5 means "no jitter"


@dataclass(frozen=True)
class Decision:
    action: Action
    delay_ms: int = 0
    reason: str = ""


def backoff_ms(policy: RetryPolicy, attempt: int, jitter_random: float) -> int:
    """Exponential backoff after failed attempt number ``attempt`` (1-based), jittered."""
    raw = min(policy.base_delay_ms * policy.factor ** max(0, attempt - 1), policy.max_backoff_ms)
    spread = 1 + policy.jitter * (2 * min(max(jitter_random, 0.0), 1.0) - 1)
    return max(0, round(raw * spread))


def decide(policy: RetryPolicy, failure: Failure) -> Decision:
    if failure.kind == "cancelled":
        return Decision("stop", reason="cancelled")
    if failure.kind == "permanent":
        return Decision("next_candidate", reason="permanent error")
    if failure.kind == "overflow":
        return Decision("next_candidate", reason="context overflow (never retried unchanged)")
    if failure.job_attempts >= policy.job_attempt_budget:
        return Decision("next_candidate", reason="job attempt budget spent")
    if failure.kind == "timeout" and not failure.last_candidate:
        return Decision("next_candidate", reason="timeout")
    if failure.attempt >= policy.attempts_per_candidate:
        return Decision("next_candidate", reason=f"{failure.attempt} attempts failed")
    delay = backoff_ms(policy, failure.attempt, failure.jitter_random)
    if failure.retry_after_ms is not None:
        delay = max(delay, failure.retry_after_ms)
    if delay > policy.max_wait_ms:
        return Decision("next_candidate",
                        reason=f"wait of {delay} ms exceeds the {policy.max_wait_ms} ms cap")
    return Decision("retry", delay_ms=delay, reason=f"retry in {delay} ms")
