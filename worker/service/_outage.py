"""Riding out a Redis outage once a job's model work is done.

A summary that is ready must not be lost to a Redis blip: failing the delivery would run the
model again on the next one. The commit, the events after it and ``finish`` are retried with
backoff until Redis answers again (bounded by the job's deadline). Re-sending is safe: every
commit script writes at most once per job (the effect marker) and ``finish`` ends a job once.
A full Redis (``until_memory``) is waited out the same way by the job's end, never by a commit:
a commit it refuses ends the job failed with that cause.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from worker.service._control import JobControl
from worker.service._job_stops import TRANSIENT, WAIT_FOR_REDIS
from worker.service.ports import SYSTEM_CLOCK, Clock

__all__ = ["ride_out", "ride_out_until"]

log = logging.getLogger("worker.service")

T = TypeVar("T")

_FIRST_S = 0.2
_CAP_S = 2.0


def ride_out(control: JobControl, what: str, call: Callable[[], T], *,
             until_memory: bool = False) -> T:
    """``call()``, again and again while Redis is unreachable (or, ``until_memory``, full),
    until the job's deadline."""
    return ride_out_until(control.deadline, control.job_id, what, call,
                          until_memory=until_memory, clock=control.clock)


def ride_out_until(deadline: float, job_id: str, what: str, call: Callable[[], T], *,
                   until_memory: bool = False, clock: Clock = SYSTEM_CLOCK) -> T:
    """``call()`` until it gets through to Redis or ``deadline`` comes: a time of ``clock``'s
    ``monotonic``, the clock the deadline was set by (a job's: ``JobControl.clock``)."""
    waited = WAIT_FOR_REDIS if until_memory else TRANSIENT
    delay = _FIRST_S
    while True:
        try:
            return call()
        except waited as err:
            if clock.monotonic() + delay >= deadline:
                raise
            log.warning("job %s: %s: waiting for Redis (%s); again in %.1f s",
                        job_id, what, err, delay)
        clock.sleep(delay)
        delay = min(delay * 2, _CAP_S)
