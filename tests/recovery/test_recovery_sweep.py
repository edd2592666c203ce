"""The sweep (in-process worker): a queued job without a message is sent again; a running job
that lost its worker too often ends failed with a record and an event; stale index entries go."""

from __future__ import annotations

import threading

from recovery.recovery_support import wait_until
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import completions, new_session, running_worker, runtime_settings

from api_client import CompactionClient
from api_client.contract.routing import queue_list
from worker.service._sweeper import Sweeper
from worker.store.job_lifecycle import JobStore


def test_a_queued_job_whose_message_is_lost_is_sent_again(
        redis_url: str, model: ModelServer, demo_text: str) -> None:
    settings = runtime_settings(redis_url, models=[model.candidate()], requeue_after_s=1.0,
                                sweep_interval_s=0.5)
    with CompactionClient(settings.client) as client, running_worker(settings):
        sid = new_session(client, demo_text)
        # The record and the index entry, but no message: a client that died after enqueue.
        job = client.jobs.enqueue(sid, "compact", reason="threshold")
        handle = client.job(job.job_id)
        assert isinstance(handle.wait(30), dict)
        assert handle.record().state.value == "succeeded"
        assert len(completions(client, sid, job.job_id)) == 1
        wait_until(lambda: client.redis.zscore(client.layout.jobs_due, job.job_id) is None, 10,
                   "the ended job to leave the index")


def test_a_job_that_keeps_losing_its_worker_ends_failed(redis_url: str, demo_text: str) -> None:
    settings = runtime_settings(redis_url, sweep_interval_s=0.5, max_deliveries=2)
    with CompactionClient(redis_url) as client:
        sid = new_session(client, demo_text)
        job = client.jobs.enqueue(sid, "compact", reason="threshold")
        worker_side = JobStore(client.redis, client.settings, client.layout)
        for _ in range(2):  # two deliveries whose workers died (their leases lapse at once)
            worker_side.acquire_lease(job.job_id, "dead-worker", 0.001)
            worker_side.mark_running(job.job_id)
        with running_worker(settings):
            wait_until(lambda: client.job(job.job_id).record().state.value == "failed", 20,
                       "the sweep to end the job")
        record = client.job(job.job_id).record()
        assert "worker was lost during 2 attempts" in (record.error or "")
        assert [e.state.value for e in completions(client, sid, job.job_id)
                if e.state] == ["failed"]
        assert client.redis.get(client.layout.session(sid).inflight("compact")) is None


def test_index_entries_without_a_record_are_dropped(redis_url: str) -> None:
    settings = runtime_settings(redis_url, sweep_interval_s=0.3)
    with CompactionClient(redis_url) as client:
        ghost = "s-ghost:0123456789abcdef"
        client.redis.zadd(client.layout.jobs_due, {ghost: 0})
        with running_worker(settings):
            wait_until(lambda: client.redis.zscore(client.layout.jobs_due, ghost) is None, 10,
                       "the ghost entry to go")
    # The worker's stop ends its sweep too.
    assert not [t for t in threading.enumerate() if t.name == "compactor-sweep"]


def test_a_queued_job_whose_message_still_waits_is_not_sent_again(redis_url: str,
                                                                  demo_text: str) -> None:
    """A long queue (a flood the fair order put behind other tenants) is no lost message: the
    sweep looks again later and sends nothing; once the message is gone, it sends it again."""
    settings = runtime_settings(redis_url, requeue_after_s=0.01)
    sent: list[str] = []
    with CompactionClient(redis_url) as client:
        waiting = client.compact(new_session(client, demo_text))  # its message is queued
        lost = client.jobs.enqueue(new_session(client, demo_text), "compact")  # no message
        sweeper = Sweeper(settings, client.redis, lambda job_id, route, task: sent.append(job_id))
        client.redis.zadd(client.layout.jobs_due, {waiting.id: 0, lost.job_id: 0})
        assert sweeper.sweep() == 1 and sent == [lost.job_id]
        assert client.redis.zscore(client.layout.jobs_due, waiting.id) is not None
        # lost was sent (the callback took it): due again requeue_after_s later, which may have
        # passed by the next sweep on a loaded machine; that sweep is about waiting alone.
        client.redis.zrem(client.layout.jobs_due, lost.job_id)
        client.redis.delete(queue_list("compactor.compact", 6, client.layout.broker))
        client.redis.zadd(client.layout.jobs_due, {waiting.id: 0})
        assert sweeper.sweep() == 1 and sent[-1] == waiting.id
