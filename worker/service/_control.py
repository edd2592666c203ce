"""Per-job control: deadline, cancel flag and lease, behind the model layer's ``CancelToken``.

The threads pool cannot interrupt a task, so a job stops itself: the service calls
:meth:`JobControl.check` between steps, and the summarizer polls :meth:`is_cancelled` (the model
layer aborts waits and calls when it turns true; its own httpx timeouts bound each request).
"""

from __future__ import annotations

import logging
import threading
from types import TracebackType

from api_client.contract.errors import CompactorError
from worker.service._job_stops import (
    DeadlineExceededError,
    JobCancelled,
    JobStopped,
    LeaseLostError,
)
from worker.service.ports import SYSTEM_CLOCK, CancelFlags, Clock, JobLeases
from worker.store.leases import LeaseOutcome

__all__ = ["CancelWatch", "JobControl"]

log = logging.getLogger("worker.service")

_POLL_S = 0.2  # the cancel flag is read at most this often


class JobControl:
    """Cancel token + lease heartbeat for one delivery of one job (a context manager)."""

    def __init__(self, jobs: JobLeases, job_id: str, worker_id: str, *, deadline_s: float,
                 lease_ttl_s: float, clock: Clock = SYSTEM_CLOCK,
                 flags: CancelFlags | None = None, cancel_requested: bool = False) -> None:
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
        self._flags = flags
        self._cancel_seen = flags.watch(job_id) if flags is not None else None
        if cancel_requested:  # the record the start read says so already
            self._stop = JobCancelled()

    # -- CancelToken -------------------------------------------------------------------------
    def is_cancelled(self) -> bool:
        if self._stop is not None:
            return True
        now = self.clock.monotonic()
        if now >= self.deadline:
            self._stop = DeadlineExceededError(self.deadline_s)
        elif self._cancel_seen is not None:
            if self._cancel_seen.is_set():
                self._stop = JobCancelled()
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
        if self._flags is not None:
            self._flags.forget(self.job_id)
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


class CancelWatch:
    """The cancel flags of every running job of a process, read in one round trip per poll.

    Each job used to read its own flag every 0.2 s during its model call and again at every
    step: on a busy threads-pool worker (C = 8) those HGETs were ~10 % of the process's CPU
    (py-spy), and CPU is what keeps the other slots waiting for the GIL. One daemon thread now
    reads all flags at once; a job looks at its event. The thread sleeps while no job runs, and
    its first read comes ``poll_s`` after a job starts (the job's start read its flag with its
    record: a job shorter than that costs no read).
    """

    def __init__(self, jobs: JobLeases, poll_s: float = _POLL_S) -> None:
        self.jobs = jobs
        self.poll_s = poll_s
        self._seen: dict[str, threading.Event] = {}
        self._changed = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None

    def watch(self, job_id: str) -> threading.Event:
        with self._changed:
            event = self._seen.setdefault(job_id, threading.Event())
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="cancel-watch",
                                                daemon=True)
                self._thread.start()
            self._changed.notify()
            return event

    def forget(self, job_id: str) -> None:
        with self._changed:
            self._seen.pop(job_id, None)

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify()

    def _loop(self) -> None:
        while True:
            with self._changed:
                while not self._seen and not self._closed:
                    self._changed.wait()
                self._changed.wait_for(lambda: self._closed, timeout=self.poll_s)
                if self._closed:
                    return
                watched = dict(self._seen)
            if watched:
                self._read(watched)

    def _read(self, watched: dict[str, threading.Event]) -> None:
        try:
            cancelled = self.jobs.cancel_requested_among(list(watched))
        except CompactorError as err:  # Redis hiccup: the commit script checks again
            log.warning("cancel flags unreadable: %s", err)
            return
        for job_id in cancelled:
            watched[job_id].set()
