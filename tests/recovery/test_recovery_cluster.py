"""Session data on a real 3-master Redis Cluster, the broker on a separate Redis: jobs of every
kind, the sweep's index and the asyncio client work without a cross-slot call."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
import redis
from recovery.recovery_support import RedisClusterServers, RedisServer
from redis.crc import key_slot
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import completions, running_worker, runtime_settings

from api_client import AsyncCompactionClient, ClientSettings, CompactionClient, ConfigurationError
from worker.celery_app import create_app


def test_jobs_on_a_redis_cluster(redis_cluster: RedisClusterServers, model: ModelServer,
                                 demo_text: str, tmp_path: Path) -> None:
    broker = RedisServer(tmp_path / "broker", aof=False).start()
    try:
        settings = runtime_settings(redis_cluster.url, redis_cluster=True, broker_url=broker.url,
                                    models=[model.candidate()], requeue_after_s=1.0,
                                    sweep_interval_s=0.5)
        with CompactionClient(settings.client) as client, running_worker(settings):
            client.warm()  # its probe compactions run on a cluster too, and write nothing
            assert not list(client.redis.scan_iter(match="*warm-probe*"))
            sids = [client.sessions.import_jsonl(demo_text, sid) for sid in _spread_ids(6)]
            handles = [client.compact(sid, reason="threshold") for sid in sids[:4]]
            handles.append(client.prune(sids[4]))
            # A job whose message never went out: the sweep re-sends it (global index key).
            lost = client.jobs.enqueue(sids[5], "compact", reason="manual").job_id
            handles.append(client.job(lost))
            for handle in handles:
                handle.wait(60)
                assert handle.record().state.value == "succeeded"
                assert len(completions(client, handle.session_id, handle.id)) == 1
            async_entry = asyncio.run(_async_compact(settings.client, sids[4]))
            assert isinstance(async_entry, dict)
            for sid in sids:  # retention (issue 30): the scripts reach every key of the slot
                k = client.layout.session(sid)
                assert all(0 < client.redis.ttl(key) <= settings.client.session_ttl_s
                           for key in (k.header, k.entries, k.order, k.leaf, k.rev))
                assert not client.redis.exists(k.effects)  # the marker is the job record's
        # The sessions really are spread over the masters.
        owners = {_owner(redis_cluster, client.layout.session(sid).header) for sid in sids}
        assert len(owners) >= 2
    finally:
        broker.stop()


async def _async_compact(settings: ClientSettings, sid: str) -> object:
    async with AsyncCompactionClient(settings) as client:
        await client.warm()
        return await (await client.compact(sid, reason="manual")).wait(60)


def _spread_ids(count: int) -> list[str]:
    """Session ids whose hash slots fall in each third of the slot space in turn: the ranges
    `redis-cli --cluster create` gives three masters, so the sessions land on all of them
    (random ids put all six on one master now and then)."""
    ids: list[str] = []
    while len(ids) < count:
        sid = f"s-{uuid.uuid4().hex[:10]}"
        if key_slot(sid.encode()) * 3 // 16384 == len(ids) % 3:
            ids.append(sid)
    return ids


def _owner(cluster: RedisClusterServers, key: str) -> int:
    for node in cluster.nodes:
        try:
            if redis.Redis(port=node.port).exists(key):
                return node.port
        except redis.exceptions.MovedError:
            continue  # the key's slot belongs to another master
    raise AssertionError(f"{key} is on no node")


def test_a_cluster_needs_a_separate_broker(redis_cluster: RedisClusterServers) -> None:
    settings = runtime_settings(redis_cluster.url, redis_cluster=True)
    with pytest.raises(ConfigurationError, match="cannot be a Redis Cluster"):
        create_app(settings)
