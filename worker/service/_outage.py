"""Riding out a Redis outage once a job's model work is done.

A summary that is ready must not be lost to a Redis blip: failing the delivery would run the
model again on the next one. The commit, the events after it and ``finish`` are retried with
backoff until Redis answers again (bounded by the job's deadline). Re-sending is safe: every
commit script writes at most once per job (the effect marker) and ``finish`` ends a job once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from worker.service._control import JobControl
from worker.service._job_stops import TRANSIENT

__all__ = ["ride_out", "ride_out_until"]

log = logging.getLogger("worker.service")

T = TypeVar("T")

_FIRST_S = 0.2
_CAP_S = 2.0


def ride_out(control: JobControl, what: str, call: Callable[[], T]) -> T:
    """``call()``, again and again while Redis is unreachable, until the job's deadline."""
    return ride_out_until(control.deadline, control.job_id, what, call)


def ride_out_until(deadline: float, job_id: str, what: str, call: Callable[[], T]) -> T:
    """``call()`` until it gets through to Redis or ``deadline`` (monotonic) comes."""
    delay = _FIRST_S
    while True:
        try:
            return call()
        except TRANSIENT as err:
            if time.monotonic() + delay >= deadline:
                raise
            log.warning("job %s: %s: Redis unavailable (%s); again in %.1f s",
                        job_id, what, err, delay)
        time.sleep(delay)
        delay = min(delay * 2, _CAP_S)
