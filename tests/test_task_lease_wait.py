"""The job task's lease wait (worker.celery_app.tasks.run_task) when Celery cannot publish
its retry.

A delivery that meets another worker's lease asks Celery for a retry; with the broker down the
publish fails (``Reject``): the delivery waits here and looks again. The broker outage and the
lease are stand-ins (a task object whose retry cannot publish, a job that stays held), since
the point is the control flow after the publish fails: the real lease wait is
``tests/runtime/test_runtime_flower.py``.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
from celery.exceptions import Ignore, Reject, Retry

from worker.celery_app import tasks
from worker.service import LeaseHeldError

JOB = "s-held:0123456789abcdef"


class _Task:
    """What run_task uses of a bound Celery task; ``retry`` fails to publish or retries."""

    def __init__(self, publish: bool) -> None:
        settings = SimpleNamespace(task_max_retries=2, lease_ttl_s=0.0, task_retry_backoff_s=0.0)
        self.app = SimpleNamespace(compactor_settings=settings, runtime=lambda: None)
        self.publish = publish
        self.retries: list[float] = []

    def retry(self, exc: BaseException, countdown: float) -> Any:
        self.retries.append(countdown)
        if not self.publish:
            raise Reject(exc, requeue=False)
        return Retry(exc=exc, when=countdown)


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    runs: list[str] = []

    def run_job(_runtime: object, job_id: str) -> Any:
        runs.append(job_id)
        raise LeaseHeldError(job_id)

    monkeypatch.setattr(tasks, "run_job", run_job)
    return runs


def test_a_retry_that_cannot_be_published_is_left_to_the_lease_holder(
        held: list[str], caplog: pytest.LogCaptureFixture) -> None:
    task = _Task(publish=False)
    with caplog.at_level(logging.WARNING, logger="worker.tasks"), pytest.raises(Ignore):
        tasks.run_task(task, JOB)
    assert held == [JOB] * 3  # task_max_retries + 1 looks at the lease
    assert task.retries == [0.0] * 3
    messages = [r.getMessage() for r in caplog.records]
    assert sum("could not publish a retry" in m for m in messages) == 3
    assert messages[-1] == (f"job {JOB}: still held by another worker and no retry could be "
                            "published; leaving it to the lease holder")


def test_a_published_retry_ends_the_delivery_as_retry(held: list[str]) -> None:
    task = _Task(publish=True)
    with pytest.raises(Retry):
        tasks.run_task(task, JOB)
    assert held == [JOB] and task.retries == [0.0]
