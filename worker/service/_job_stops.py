"""Why a job stopped before its end, and the errors the task layer maps to Celery retries."""

from __future__ import annotations

import redis

from api_client.contract.errors import BrokerUnavailableError, CompactorError
from api_client.contract.redis_conn import STORAGE_FULL

__all__ = [
    "STORAGE_FULL",
    "TRANSIENT",
    "WAIT_FOR_REDIS",
    "DeadlineExceededError",
    "JobCancelled",
    "JobStopped",
    "LeaseHeldError",
    "LeaseLostError",
]


class JobStopped(CompactorError):
    """The job must stop now and commit nothing."""


class JobCancelled(JobStopped):
    def __init__(self) -> None:
        super().__init__("Compaction cancelled")


class DeadlineExceededError(JobStopped):
    def __init__(self, deadline_s: float) -> None:
        self.deadline_s = deadline_s
        super().__init__(f"job deadline of {deadline_s:g} s exceeded")


class LeaseLostError(JobStopped):
    """Another worker took the job over (this one stalled past its lease): leave it to that one."""

    def __init__(self) -> None:
        super().__init__("lease lost to another worker")


class LeaseHeldError(CompactorError):
    """Another live worker runs this job; this delivery should look again later."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id} is running on another worker")


# Infrastructure failures worth a Celery retry: Redis unreachable or timing out.
TRANSIENT: tuple[type[BaseException], ...] = (
    BrokerUnavailableError, redis.ConnectionError, redis.TimeoutError,
)
# What a delivery waits out before its work (lease, running state) and after it (the job's end):
# Redis unreachable, or full (it takes writes again once memory is freed). A refused *commit*
# is not waited for: the job fails with the storage cause (worker.service._job).
WAIT_FOR_REDIS: tuple[type[BaseException], ...] = (*TRANSIENT, *STORAGE_FULL)
