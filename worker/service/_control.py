"""Per-job control: deadline, cancel flag and lease, behind the model layer's ``CancelToken``.

The threads pool cannot interrupt a task, so a job stops itself: the service calls
:meth:`JobControl.check` between steps, and the summarizer polls :meth:`is_cancelled` (the model
layer aborts waits and calls when it turns true; its own httpx timeouts bound each request).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType

from api_client.contract.errors import CompactorError
from worker.service._job_stops import (
    DeadlineExceededError,
    JobCancelled,
    JobStopped,
    LeaseLostError,
)
from worker.service.ports import SYSTEM_CLOCK, CancelFlags, Clock, Heartbeats, JobLeases
from worker.store.leases import LeaseOutcome

__all__ = ["CancelWatch", "JobControl", "LeaseHeartbeats"]

log = logging.getLogger("worker.service")

_POLL_S = 0.2  # the cancel flag is read at most this often
_DROP_WAIT_S = 2.0  # a job's end waits this long at most for its running beat


class JobControl:
    """Cancel token + lease heartbeat for one delivery of one job (a context manager)."""

    def __init__(self, jobs: JobLeases, job_id: str, worker_id: str, *, deadline_s: float,
                 lease_ttl_s: float, clock: Clock = SYSTEM_CLOCK,
                 flags: CancelFlags | None = None, cancel_requested: bool = False,
                 heartbeats: Heartbeats | None = None) -> None:
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
        # None: this job's own (one thread for it alone), made on entry.
        self._heartbeats = heartbeats
        self._own_heartbeats: LeaseHeartbeats | None = None
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
        if self._heartbeats is None:
            self._heartbeats = self._own_heartbeats = LeaseHeartbeats()
        self._heartbeats.keep(self, self.lease_ttl_s / 3, self._beat)
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._flags is not None:
            self._flags.forget(self.job_id)
        if self._heartbeats is not None:
            self._heartbeats.drop(self)
        if self._own_heartbeats is not None:
            self._own_heartbeats.close()

    def _beat(self) -> bool:
        """Renew the lease; False once it is lost (the job stops at its next check)."""
        try:
            if self.jobs.renew_lease(self.job_id, self.worker_id, self.lease_ttl_s):
                return True
            # Expired (a long pause): take it back unless another worker already has.
            outcome = self.jobs.acquire_lease(self.job_id, self.worker_id, self.lease_ttl_s)
            if outcome is not LeaseOutcome.ACQUIRED:
                self._stop = LeaseLostError()
                return False
        except CompactorError as err:
            log.warning("job %s: lease renewal failed: %s", self.job_id, err)
        return True


class LeaseHeartbeats:
    """The lease renewals of every running job of a process, on one daemon thread.

    Each job used to start a thread of its own for its heartbeat and join it at its end: on a
    busy threads-pool worker that start and join cost more CPU than the renewals (a job shorter
    than a third of the lease renews nothing), and each waited for the GIL. A job's beat runs
    every ``period_s`` from its start, as its own thread ran it; beats run one at a time, outside
    the lock. :meth:`drop` returns once no beat of the job is running, so none follows the job's
    end. The thread sleeps while no job runs.
    """

    def __init__(self) -> None:
        self._due: dict[object, tuple[float, float, Callable[[], bool]]] = {}
        self._changed = threading.Condition()
        self._beating: object | None = None
        self._closed = False
        self._thread: threading.Thread | None = None

    def keep(self, key: object, period_s: float, beat: Callable[[], bool]) -> None:
        """Call ``beat`` every ``period_s`` until :meth:`drop` or it returns False."""
        with self._changed:
            self._due[key] = (time.monotonic() + period_s, period_s, beat)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="lease-heartbeats",
                                                daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def drop(self, key: object) -> None:
        with self._changed:
            self._due.pop(key, None)
            self._changed.wait_for(lambda: self._beating is not key, timeout=_DROP_WAIT_S)

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def _loop(self) -> None:
        while True:
            with self._changed:
                key, beat = self._next()
                if beat is None:
                    return
                self._beating = key
            try:
                again = beat()
            except Exception:  # a bug in one job's beat must not stop the others'
                log.exception("lease heartbeat failed")
                again = True
            with self._changed:
                self._beating = None
                if not again:
                    self._due.pop(key, None)
                self._changed.notify_all()

    def _next(self) -> tuple[object, Callable[[], bool] | None]:
        """The next beat due (rescheduled a period on), waited for under the lock; no beat
        once closed."""
        while not self._closed:
            if not self._due:
                self._changed.wait()
                continue
            key, (due, period, beat) = min(self._due.items(), key=lambda item: item[1][0])
            wait = due - time.monotonic()
            if wait > 0:
                self._changed.wait(wait)
                continue
            self._due[key] = (max(due + period, time.monotonic()), period, beat)
            return key, beat
        return None, None


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
