"""The failure metric's ``cause`` label: one word per kind of failure, from a bounded set."""

from __future__ import annotations

import pytest
import redis

from api_client.contract.errors import (
    AlreadyCompactedError,
    BrokerUnavailableError,
    CompactionLoopError,
    ConfigurationError,
    DanglingParentError,
    HookError,
    NothingToCompactError,
    RedisAuthenticationError,
    SessionNotFoundError,
    StaleSnapshotError,
    StorageReadOnlyError,
)
from worker.llm.errors import (
    AllCandidatesFailedError,
    AttemptBudgetExhausted,
    AuthenticationFailed,
    ContextOverflow,
    MalformedResponse,
    ModelTimeout,
    QuotaExhausted,
    RateLimited,
)
from worker.service._job_stops import DeadlineExceededError, JobCancelled
from worker.service.failure_causes import CAUSES, failure_cause


def _refused_by_redis() -> ConfigurationError:
    """A NOPERM reply as the mapping types it: a ConfigurationError caused by Redis's error."""
    try:
        raise ConfigurationError("NOPERM") from redis.exceptions.NoPermissionError("NOPERM")
    except ConfigurationError as err:
        return err


@pytest.mark.parametrize(("error", "cause"), [
    (AuthenticationFailed("401"), "model_auth"),
    (QuotaExhausted("quota"), "model_auth"),
    (ContextOverflow("too long"), "model_overflow"),
    (MalformedResponse("not JSON"), "model_response"),
    (ModelTimeout("slow"), "model_unavailable"),
    (AllCandidatesFailedError([RateLimited("429"), AuthenticationFailed("401")]), "model_auth"),
    (AllCandidatesFailedError([AuthenticationFailed("401"), ModelTimeout("t")]),
     "model_unavailable"),
    (AllCandidatesFailedError([]), "model_unavailable"),
    (AttemptBudgetExhausted("20 attempts"), "model_unavailable"),
    (DeadlineExceededError(30.0), "deadline"),
    (JobCancelled(), "cancelled"),
    (CompactionLoopError.tripped("s1", 3, 3, 600.0), "loop_guard"),
    (NothingToCompactError(), "nothing_to_do"),
    (AlreadyCompactedError(), "nothing_to_do"),
    (SessionNotFoundError("gone"), "session"),
    (DanglingParentError("dangling"), "session"),
    (BrokerUnavailableError("Redis unavailable"), "storage"),
    (redis.exceptions.OutOfMemoryError("OOM"), "storage"),
    # Redis's refusals as the one error mapping types them (redis_flows.replied): still storage.
    (StorageReadOnlyError("read-only replica"), "storage"),
    (RedisAuthenticationError("WRONGPASS"), "storage"),
    (_refused_by_redis(), "storage"),
    (ConfigurationError("a bad setting"), "other"),
    (HookError("hook"), "hook"),
    (StaleSnapshotError("stale"), "other"),
    (KeyError("bug"), "internal"),
])
def test_each_failure_has_one_cause_from_the_bounded_set(error: BaseException,
                                                          cause: str) -> None:
    assert failure_cause(error) == cause and cause in CAUSES
