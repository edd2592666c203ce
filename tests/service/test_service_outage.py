"""Riding out a Redis outage (worker/service/_outage.py) on the job's own clock: the deadline
is a time of ``JobControl.clock``, so the backoff is measured and waited on that clock too.
A real clock's reading against a test's (or any injected) clock retried for ever when the
injected one was ahead and not at all when it was behind."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import cast

import pytest
import redis
from service.service_fakes import FakeClock

from worker.service._control import JobControl
from worker.service._outage import ride_out


@dataclass
class _Control:
    """What ``ride_out`` reads of a job's control."""

    clock: FakeClock
    deadline: float
    job_id: str = "s:job"


def _control(ahead_s: float, deadline_s: float) -> _Control:
    clock = FakeClock()
    clock.now = time.monotonic() + ahead_s
    return _Control(clock, clock.now + deadline_s)


def _failing(times: int) -> tuple[list[int], object]:
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise redis.ConnectionError("gone")
        return "done"

    return calls, call


# (the job's clock against the real one, s): far ahead (a real reading never reaches the
# deadline) and far behind (a real reading is past it from the start)
CLOCKS = [pytest.param(1e6, id="ahead"), pytest.param(-1e6, id="behind")]


@pytest.mark.timeout(10)
@pytest.mark.parametrize("ahead_s", CLOCKS)
def test_a_blip_is_ridden_out_on_the_jobs_clock(ahead_s: float) -> None:
    control = _control(ahead_s, deadline_s=60)
    calls, call = _failing(2)
    started = control.clock.now
    assert ride_out(cast(JobControl, control), "commit", call) == "done"
    assert len(calls) == 3
    assert control.clock.now - started == pytest.approx(0.2 + 0.4)  # the backoff, waited


@pytest.mark.timeout(10)
@pytest.mark.parametrize("ahead_s", CLOCKS)
def test_an_outage_past_the_jobs_deadline_gives_up(ahead_s: float) -> None:
    control = _control(ahead_s, deadline_s=5)
    calls, call = _failing(10**6)
    with pytest.raises(redis.ConnectionError):
        ride_out(cast(JobControl, control), "commit", call)
    assert 3 <= len(calls) < 10  # 0.2 + 0.4 + 0.8 + 1.6 + 2 (capped) ... up to the 5 s
    assert control.clock.now <= control.deadline
