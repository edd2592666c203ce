"""Celery tasks: thin adapters from a delivered job id to :func:`worker.service.run_job`.

A task validates its one argument, runs the service, and maps what escapes it: a job another
worker runs is looked at again later; Redis trouble is retried with exponential backoff;
everything else has already ended the job (record + completion event) inside the service.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from api_client.errors import InvalidIdError, JobNotFoundError
from api_client.keys import split_job_id
from api_client.wire import TASK_NAMES
from worker.service import TRANSIENT, LeaseHeldError, run_job

if TYPE_CHECKING:
    from worker.app import CompactorCelery

__all__ = ["register_tasks", "run_task"]

log = logging.getLogger("worker.tasks")


def run_task(task: Any, job_id: object) -> dict[str, Any]:
    """The body of every Compactor task (``task`` is the bound Celery task)."""
    try:
        split_job_id(job_id)
    except InvalidIdError as err:
        log.error("rejected a task: %s", err)
        return {"jobId": repr(job_id), "state": "rejected", "error": str(err)}
    assert isinstance(job_id, str)
    app: CompactorCelery = task.app
    settings = app.compactor_settings
    try:
        return run_job(app.runtime(), job_id).to_json()
    except JobNotFoundError:
        # The record expired (or never existed): nothing left to do for this message.
        log.warning("job %s: no record; message dropped", job_id)
        return {"jobId": job_id, "state": "missing", "error": "job record not found"}
    except LeaseHeldError as err:
        # Look again once the other worker's lease would have run out: by then it has finished
        # the job (this delivery then ends as a duplicate) or died (this one takes over).
        raise task.retry(exc=err, countdown=settings.lease_ttl_s, max_retries=None) from err
    except TRANSIENT as err:
        delay = settings.task_retry_backoff_s * 2 ** task.request.retries
        log.warning("job %s: Redis unavailable (%s); retry in %.1f s", job_id, err, delay)
        raise task.retry(exc=err, countdown=delay, max_retries=settings.task_max_retries) from err


def register_tasks(app: CompactorCelery) -> None:
    """One task per job kind, under the client's task names (the record says what to do)."""
    for name in TASK_NAMES.values():
        app.task(name=name, bind=True, shared=False, acks_late=True,
                 reject_on_worker_lost=True)(_task_body(name))


def _task_body(name: str) -> Any:
    def body(self: Any, job_id: object) -> dict[str, Any]:
        return run_task(self, job_id)

    body.__name__ = body.__qualname__ = name.rpartition(".")[2]
    return body
