"""Runs one job end to end: lease → snapshot → hooks → plan → summarize → conditional commit →
events (docs/rules.md "Invariants"). Celery-free: ``worker.celery_app.tasks`` adapts it.
"""

from worker.service._control import JobControl
from worker.service._job import JobOutcome, run_job
from worker.service._job_stops import (
    TRANSIENT,
    WAIT_FOR_REDIS,
    DeadlineExceededError,
    JobCancelled,
    JobStopped,
    LeaseHeldError,
    LeaseLostError,
)
from worker.service._sweeper import Sender, Sweeper
from worker.service.composition import build_runtime, worker_redis
from worker.service.ports import Runtime

__all__ = [
    "TRANSIENT",
    "WAIT_FOR_REDIS",
    "DeadlineExceededError",
    "JobCancelled",
    "JobControl",
    "JobOutcome",
    "JobStopped",
    "LeaseHeldError",
    "LeaseLostError",
    "Runtime",
    "Sender",
    "Sweeper",
    "build_runtime",
    "run_job",
    "worker_redis",
]
