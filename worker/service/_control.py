"""Per-job control: deadline, cancel flag and lease, behind the model layer's ``CancelToken``.

The threads pool cannot interrupt a task, so a job stops itself: the service calls
:meth:`JobControl.check` between steps, and the summarizer polls :meth:`is_cancelled` (the model
layer aborts waits and calls when it turns true; its own httpx timeouts bound each request).
"""

from __future__ import annotations

import logging
import threading
from types import TracebackType

from api_client.errors import CompactorError
from worker.service._errors import DeadlineExceededError, JobCancelled, JobStopped, LeaseLostError
from worker.service.ports import SYSTEM_CLOCK, Clock, JobLeases
from worker.store.leases import LeaseOutcome

__all__ = ["JobControl"]

log = logging.getLogger("worker.service")

_POLL_S = 0.2  # the cancel flag is read at most this often


class JobControl:
    """Cancel token + lease heartbeat for one delivery of one job (a context manager)."""

    def __init__(self, jobs: JobLeases, job_id: str, worker_id: str, *, deadline_s: float,
                 lease_ttl_s: float, clock: Clock = SYSTEM_CLOCK) -> None:
        self.jobs = jobs
        self.clock = clock
        self.job_id = job_id
        self.worker_id = worker_id
        self.deadline_s = deadline_s
        self.lease_ttl_s = lease_ttl_s
        self.started = self.clock.monotonic()
        self.deadline = self.started + deadline_s
        self._stop: JobStopped | None = None
        self._next_poll = 0.0
        self._done = threading.Event()
        self._heartbeat: threading.Thread | None = None

    # -- CancelToken -------------------------------------------------------------------------
    def is_cancelled(self) -> bool:
        if self._stop is not None:
            return True
        now = self.clock.monotonic()
        if now >= self.deadline:
            self._stop = DeadlineExceededError(self.deadline_s)
        elif now >= self._next_poll:
            self._next_poll = now + _POLL_S
            try:
                if self.jobs.is_cancel_requested(self.job_id):
                    self._stop = JobCancelled()
            except CompactorError as err:  # Redis hiccup: the commit script checks again
                log.warning("job %s: cancel flag unreadable: %s", self.job_id, err)
        return self._stop is not None

    def check(self) -> None:
        """Raise the reason to stop, if there is one (between steps)."""
        self._next_poll = 0.0  # a step boundary always reads the flag
        if self.is_cancelled():
            assert self._stop is not None
            raise self._stop

    @property
    def stop_reason(self) -> JobStopped | None:
        return self._stop

    def elapsed_ms(self) -> int:
        return int((self.clock.monotonic() - self.started) * 1000)

    # -- lease heartbeat ---------------------------------------------------------------------
    def __enter__(self) -> JobControl:
        self._heartbeat = threading.Thread(target=self._beat, name=f"lease-{self.job_id}",
                                           daemon=True)
        self._heartbeat.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._done.set()
        if self._heartbeat is not None:
            self._heartbeat.join(timeout=2)

    def _beat(self) -> None:
        while not self._done.wait(self.lease_ttl_s / 3):
            try:
                if self.jobs.renew_lease(self.job_id, self.worker_id, self.lease_ttl_s):
                    continue
                # Expired (a long pause): take it back unless another worker already has.
                outcome = self.jobs.acquire_lease(self.job_id, self.worker_id, self.lease_ttl_s)
                if outcome is not LeaseOutcome.ACQUIRED:
                    self._stop = LeaseLostError()
                    return
            except CompactorError as err:
                log.warning("job %s: lease renewal failed: %s", self.job_id, err)
