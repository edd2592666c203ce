"""A pending ``wait()`` (sync and asyncio) rides out a Redis restart shorter than its timeout."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from recovery.recovery_support import RedisServer
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import new_session, running_worker, runtime_settings

from api_client import AsyncCompactionClient, CompactionClient


def _async_wait(url: str, job_id: str, out: dict[str, object]) -> None:
    async def scenario() -> object:
        async with AsyncCompactionClient(url) as client:
            handle = await client.job(job_id)
            return await handle.wait(30)

    try:
        out["result"] = asyncio.run(scenario())
    except Exception as err:
        out["result"] = err


def _sync_wait(url: str, job_id: str, out: dict[str, object]) -> None:
    with CompactionClient(url) as client:
        try:
            out["result"] = client.job(job_id).wait(30)
        except Exception as err:
            out["result"] = err


@pytest.mark.parametrize("waiter", [_sync_wait, _async_wait], ids=["sync", "async"])
def test_wait_rides_out_a_redis_restart(aof_redis: RedisServer, model: ModelServer,
                                        demo_text: str, waiter: object) -> None:
    out: dict[str, object] = {}
    with CompactionClient(aof_redis.url) as client:
        handle = client.compact(new_session(client, demo_text), reason="manual")
    thread = threading.Thread(target=waiter,  # type: ignore[arg-type]
                              args=(aof_redis.url, handle.id, out))
    thread.start()
    time.sleep(0.5)  # the waiter blocks in XREAD now
    aof_redis.restart(down_s=1.5)
    assert thread.is_alive(), f"wait() ended during the outage: {out}"
    settings = runtime_settings(aof_redis.url, models=[model.candidate()])
    with running_worker(settings):
        thread.join(40)
    assert isinstance(out.get("result"), dict), out
