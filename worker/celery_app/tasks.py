"""Celery tasks: thin adapters from a delivered job id to :func:`worker.service.run_job`.

A task validates its one argument, runs the service, and maps what escapes it: a job another
worker runs is looked at again later; Redis trouble is retried inside the delivery with
exponential backoff (the message stays unacked, so it is never dropped), and ends the job
``failed`` once the retries are used up; everything else has already ended the job (record +
completion event) inside the service.

What Celery records for a delivery (its events, so Flower, and the worker log) is the job's end:
succeeded → SUCCESS (the outcome), failed → FAILURE with :class:`JobFailedError` carrying the
job's error text, cancelled → REVOKED, waiting for another worker's lease → RETRY. A delivery
that finds the job ended already reports that end again: the task id is the job id, so a late
duplicate must not turn a failed job green. Failures are final (the record says so): the message
is acked (``task_acks_on_failure_or_timeout``), never redelivered.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from celery.exceptions import Ignore, Reject
from celery.worker.request import Request

from api_client.contract.errors import InvalidIdError, JobFailedError, JobNotFoundError
from api_client.contract.job_enums import JobState
from api_client.contract.keys import split_job_id
from api_client.contract.routing import TASK_DRAFT_APPLIED, TASK_NAMES
from worker.celery_app.compactor_celery import CompactorCelery
from worker.service import WAIT_FOR_REDIS, JobOutcome, LeaseHeldError, run_job
from worker.service._outage import ride_out_until

__all__ = ["EXPECTED_FAILURES", "register_tasks", "run_task"]

log = logging.getLogger("worker.tasks")

# A job's own failure is no worker fault: Celery logs these in one line, without a traceback.
EXPECTED_FAILURES = (JobFailedError, JobNotFoundError, InvalidIdError)


def run_task(task: Any, job_id: object) -> dict[str, Any]:
    """The body of every Compactor task (``task`` is the bound Celery task)."""
    try:
        split_job_id(job_id)
    except InvalidIdError as err:
        log.error("rejected a task: %s", err)
        raise
    assert isinstance(job_id, str)
    with contextlib.suppress(AttributeError):  # the revoked event's runtime
        task.request.compactor_started = time.monotonic()
    app: CompactorCelery = task.app
    settings = app.compactor_settings
    for attempt in range(settings.task_max_retries + 1):
        try:
            return _report(task, app, run_job(app.runtime(), job_id))
        except JobNotFoundError:
            # The record expired (or never existed): nothing left to do for this message.
            log.warning("job %s: no record; message dropped", job_id)
            raise
        except LeaseHeldError as err:
            # Look again once the other worker's lease would have run out: by then it has
            # finished the job (this delivery then ends as a duplicate) or died (this one
            # takes over).
            _retry_later(task, err, settings.lease_ttl_s)
        except WAIT_FOR_REDIS as err:
            if attempt == settings.task_max_retries:
                return _give_up(task, app, job_id, err)
            # Wait here, holding the message: a retry would publish to a broker that may be
            # down (or full) too, and Celery drops the message when that publish fails.
            delay = settings.task_retry_backoff_s * 2 ** attempt
            log.warning("job %s: Redis unavailable (%s); again in %.1f s", job_id, err, delay)
            time.sleep(delay)
    # Only the lease path gets here: every attempt met another worker's lease and could not
    # publish its retry (the broker is down). The lease holder reports the job's end; if it
    # dies, the lease sweep re-sends the job. Ignore acks this message without an end event.
    log.warning("job %s: still held by another worker and no retry could be published; "
                "leaving it to the lease holder", job_id)
    raise Ignore()


def _retry_later(task: Any, err: LeaseHeldError, countdown: float) -> None:
    """A Celery retry in ``countdown`` s; when publishing it fails, wait here and look again."""
    try:
        raise task.retry(exc=err, countdown=countdown)  # unbounded: see register_tasks
    except Reject:
        log.warning("job %s: could not publish a retry; looking again in %.1f s",
                    err.job_id, countdown)
        time.sleep(countdown)


def _give_up(task: Any, app: CompactorCelery, job_id: str, err: BaseException) -> dict[str, Any]:
    """Retries exhausted: end the job ``failed`` (which frees the session's single-flight key).
    Still no Redis: the record stays, and the lease sweep of a live worker acts on it later."""
    settings = app.compactor_settings
    error = f"Redis unavailable after {settings.task_max_retries} retries: {err}"
    log.warning("job %s: giving up: %s", job_id, error)
    jobs = app.runtime().jobs
    try:
        # Give Redis one lease period more to take the failure (a job never stays running).
        ended = ride_out_until(time.monotonic() + settings.lease_ttl_s, job_id, "give up",
                               lambda: jobs.finish(job_id, JobState.FAILED, error=error),
                               until_memory=True)
    except WAIT_FOR_REDIS as again:
        log.error("job %s: %s; the record could not be updated either (%s)", job_id, error, again)
        raise JobFailedError(f"{error} (record not updated)", job_id=job_id) from again
    if not ended:  # another delivery ended it meanwhile: report that end
        return _report(task, app, JobOutcome(job_id, "duplicate"))
    log.error("job %s: %s; ended as failed", job_id, error)
    raise JobFailedError(error, job_id=job_id)


def _report(task: Any, app: CompactorCelery, outcome: JobOutcome) -> dict[str, Any]:
    """Return (SUCCESS) or raise what tells Celery how the job ended."""
    state, error = outcome.state, outcome.error
    if state == "duplicate":
        record = app.runtime().jobs.get(outcome.job_id)
        state, error = record.state.value, record.error
    if state == JobState.FAILED:
        raise JobFailedError(error or "job failed", job_id=outcome.job_id)
    if state == JobState.CANCELLED:
        # Celery has no "cancelled by the task" end; REVOKED is what Flower shows for it, with
        # the delivery's run time (Celery's own revoked event carries none).
        task.send_event("task-revoked", terminated=False, signum=None, expired=False,
                        runtime=_runtime(task))
        raise Ignore()  # acks the message; no task-succeeded/-failed event follows
    if state == "abandoned":
        raise Ignore()  # the worker now holding the lease reports this job's end
    return outcome.to_json()


def _runtime(task: Any) -> float | None:
    started = getattr(task.request, "compactor_started", None)
    return None if started is None else round(time.monotonic() - started, 6)


class JobRequest(Request):  # type: ignore[misc]
    """Celery's request, with the run time on a failed delivery's event: Celery sends it only
    with task-succeeded, so Flower showed no runtime for failed jobs."""

    def send_event(self, type: str, **fields: Any) -> None:
        if type == "task-failed" and "runtime" not in fields and self.time_start:
            fields["runtime"] = max(0.0, time.time() - self.time_start)
        super().send_event(type, **fields)


def register_tasks(app: CompactorCelery) -> None:
    """One task per job kind, under the client's task names (the record says what to do)."""
    for name in TASK_NAMES.values():
        # max_retries=None: a delivery that meets another worker's lease retries until that
        # worker finishes or dies (Celery's default of 3 turned a long model call into a
        # FAILURE of the waiting duplicate; retry(max_retries=None) means "the default").
        app.task(name=name, bind=True, shared=False, acks_late=True, max_retries=None,
                 reject_on_worker_lost=True, throws=EXPECTED_FAILURES,
                 Request=JobRequest)(_task_body(name))
    app.task(name=TASK_DRAFT_APPLIED, bind=True, shared=False)(_draft_applied)


def _draft_applied(task: Any, job_id: object) -> dict[str, Any]:
    """A client applied a draft: run the session_compact hooks (worker.service._speculative)."""
    from worker.service._speculative import run_draft_applied

    try:
        split_job_id(job_id)
    except InvalidIdError as err:
        return {"jobId": repr(job_id), "state": "rejected", "error": str(err)}
    assert isinstance(job_id, str)
    try:
        return run_draft_applied(task.app.runtime(), job_id)
    except JobNotFoundError:
        return {"jobId": job_id, "state": "missing", "error": "job record not found"}


def _task_body(name: str) -> Any:
    def body(self: Any, job_id: object) -> dict[str, Any]:
        return run_task(self, job_id)

    body.__name__ = body.__qualname__ = name.rpartition(".")[2]
    return body
