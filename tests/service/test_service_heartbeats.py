"""The lease renewals of a process's running jobs on one thread (``LeaseHeartbeats``).

Each job used to renew its lease on a thread of its own, started and joined once per job. The
shared thread must keep what those threads did: a job's beat every period from its start, none
after the job's end (``drop`` waits for a beat in flight), none after a beat said the lease is
lost, and one job's slow or failing beat does not stop the others'.
"""

from __future__ import annotations

import threading
import time

from service.service_fakes import JOB_ID

from helpers.waits import wait_until
from worker.service._control import JobControl, LeaseHeartbeats
from worker.service._job_stops import LeaseLostError
from worker.store.leases import LeaseOutcome


class Beats:
    """A job's beat: counts its calls; may block until released, fail, or say lost."""

    def __init__(self, answer: bool = True) -> None:
        self.calls = 0
        self.answer = answer
        self.hold: threading.Event | None = None
        self.entered = threading.Event()
        self.fail = False

    def __call__(self) -> bool:
        self.calls += 1
        self.entered.set()
        if self.hold is not None:
            self.hold.wait(10)
        if self.fail:
            raise RuntimeError("a bug in one beat")
        return self.answer


def _threads() -> int:
    return sum(t.name == "lease-heartbeats" for t in threading.enumerate())


def test_one_thread_beats_every_job_at_its_own_period_until_it_is_dropped() -> None:
    before = _threads()
    heartbeats = LeaseHeartbeats()
    fast, slow = Beats(), Beats()
    try:
        started = time.monotonic()
        heartbeats.keep("fast", 0.02, fast)
        heartbeats.keep("slow", 0.5, slow)
        assert _threads() == before + 1
        wait_until(lambda: fast.calls >= 5, 10, "five fast beats")
        # Its own period, not the other job's: a beat a period from its start, no sooner.
        assert slow.calls <= (time.monotonic() - started) // 0.5
        heartbeats.drop("fast")
        calls = fast.calls
        wait_until(lambda: slow.calls >= 2, 10, "the slow job's beats going on")
        assert fast.calls == calls
    finally:
        heartbeats.close()


def test_a_job_end_waits_for_its_beat_in_flight_and_no_beat_follows() -> None:
    heartbeats = LeaseHeartbeats()
    beats = Beats()
    beats.hold = threading.Event()
    try:
        heartbeats.keep("job", 0.01, beats)
        assert beats.entered.wait(10)
        dropped = threading.Thread(target=heartbeats.drop, args=("job",))
        dropped.start()
        dropped.join(0.2)
        assert dropped.is_alive()  # the renewal is still running
        beats.hold.set()
        dropped.join(10)
        assert not dropped.is_alive()
        calls = beats.calls
        other = Beats()
        heartbeats.keep("other", 0.01, other)  # the thread still beats, just not for "job"
        wait_until(lambda: other.calls >= 3, 10, "another job's beats")
        assert beats.calls == calls
    finally:
        beats.hold.set()
        heartbeats.close()


def test_a_lost_lease_and_a_failing_beat() -> None:
    heartbeats = LeaseHeartbeats()
    lost, failing, healthy = Beats(answer=False), Beats(), Beats()
    failing.fail = True
    try:
        heartbeats.keep("lost", 0.01, lost)
        heartbeats.keep("failing", 0.01, failing)
        heartbeats.keep("healthy", 0.01, healthy)
        wait_until(lambda: healthy.calls >= 5 and failing.calls >= 5, 10, "beats go on")
        assert lost.calls == 1  # lost: never beaten again
    finally:
        heartbeats.close()


class TakenLease:
    """A job's lease that expired and another worker took: renewals and the take-back fail."""

    def __init__(self) -> None:
        self.renewals = 0

    def renew_lease(self, job_id: str, worker_id: str, ttl_s: float) -> bool:
        self.renewals += 1
        return False

    def acquire_lease(self, job_id: str, worker_id: str, ttl_s: float) -> LeaseOutcome:
        return LeaseOutcome.HELD

    def is_cancel_requested(self, job_id: str) -> bool:
        return False


def test_a_job_stops_once_its_heartbeat_finds_the_lease_taken() -> None:
    heartbeats = LeaseHeartbeats()
    jobs = TakenLease()
    try:
        with JobControl(jobs, JOB_ID, "w1/1", deadline_s=60,  # type: ignore[arg-type]
                        lease_ttl_s=0.03, heartbeats=heartbeats) as control:
            wait_until(control.is_cancelled, 10, "the lost lease")
            assert isinstance(control.stop_reason, LeaseLostError)
        assert jobs.renewals == 1  # then no more beats for it
        # Without shared heartbeats a job beats on a thread of its own, ended with the job.
        with JobControl(jobs, JOB_ID, "w1/2", deadline_s=60,  # type: ignore[arg-type]
                        lease_ttl_s=0.03) as control:
            wait_until(control.is_cancelled, 10, "the lost lease")
            own = control._own_heartbeats
        assert own is not None and own._thread is not None
        wait_until(lambda: not own._thread.is_alive(), 10, "the job's own thread ending")
    finally:
        heartbeats.close()
    assert heartbeats._thread is not None
    wait_until(lambda: not heartbeats._thread.is_alive(), 10, "the shared thread ending")
