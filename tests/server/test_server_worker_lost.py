"""``workerLost`` (docs/recovery.md "Worker liveness") is not said of a job that ended between
the read of its record and the read of its lease: its worker released the lease as it finished.
Said, the pi extension gave up on a finished compaction and pi's built-in ran again (seen once
in bench_pi: a stall far longer than Compactor's job had taken)."""

from __future__ import annotations

import asyncio

from api_client import AsyncCompactionClient
from api_client.contract.job_enums import JobKind, JobState
from api_client.contract.wire import JobRecord
from api_client.server.worker_routes import worker_lost


def test_a_job_that_ended_since_its_record_was_read_is_not_lost(redis_url: str) -> None:
    async def scenario() -> tuple[bool, bool]:
        async with AsyncCompactionClient(redis_url) as client:
            sid = await client.sessions.create()
            job_id = client.layout.new_job_id(sid)
            running = JobRecord(id=job_id, kind=JobKind.COMPACT, session_id=sid,
                                state=JobState.RUNNING)
            key = client.layout.job(job_id).record
            await client.redis.hset(key, mapping=running.to_redis())  # type: ignore[misc]
            still_running = await worker_lost(client, running)  # no lease, still running
            ended = running.model_copy(update={"state": JobState.SUCCEEDED})
            await client.redis.hset(key, mapping=ended.to_redis())  # type: ignore[misc]
            # the record as read before it ended, the lease released since
            return still_running, await worker_lost(client, running)

    still_running, ended = asyncio.run(scenario())
    assert still_running is True
    assert ended is False
