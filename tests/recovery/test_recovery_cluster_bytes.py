"""The stored-bytes count and quota on a real 3-master Redis Cluster: the tenant's hash lies in
another slot than the sessions, so the client and the worker keep it with commands apart, and
the reconcile finds the hashes on every primary (api_client/contract/stored_bytes.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from recovery.recovery_support import RedisClusterServers, RedisServer

from api_client import ClientSettings, CompactionClient, QuotaExceededError
from api_client.contract.keys import KeyLayout
from api_client.contract.stored_bytes import BYTES_TOTAL
from worker.service import worker_redis
from worker.settings import WorkerSettings
from worker.store import CommitStatus, CommitStore
from worker.store.job_lifecycle import JobStore
from worker.store.tenant_bytes import BytesReconciler


def msg(text: str) -> dict[str, object]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def _check(c: CompactionClient, *sids: str) -> dict[str, int]:
    found = {k: int(v) for k, v in c.redis.hgetall(c.layout.tenant_bytes("acme")).items()}
    for sid in sids:
        lines = c.redis.hvals(c.layout.session(sid).entries)
        header = len((c.redis.get(c.layout.session(sid).header) or "").encode())  # counts too
        assert found[sid] == header + sum(len(line.encode()) for line in lines), sid
    assert found[BYTES_TOTAL] == sum(v for k, v in found.items() if k != BYTES_TOTAL)
    return found


def test_stored_bytes_on_a_redis_cluster(redis_cluster: RedisClusterServers,
                                         tmp_path: Path) -> None:
    broker = RedisServer(tmp_path / "broker", aof=False).start()
    try:
        settings = ClientSettings(redis_url=redis_cluster.url, redis_cluster=True,
                                  broker_url=broker.url, tenant="acme")
        with CompactionClient(settings) as acme, \
                CompactionClient(settings.model_copy(update={"session_ttl_s": 1})) as brief:
            acme.redis.delete(acme.layout.tenant_bytes("acme"), acme.layout.tenant_quota("acme"))
            for sid in ("k1", "k2", "k3"):  # spread over the slots
                acme.sessions.create(sid)
                acme.sessions.append_many(sid, [msg(f"{sid} ✓ " * 40), msg("more")])
            _check(acme, "k1", "k2", "k3")
            assert acme.sessions.delete("k3")
            assert "k3" not in _check(acme, "k1", "k2")
            # The worker's commit: a command after its script.
            workers = WorkerSettings(redis_url=redis_cluster.url, redis_cluster=True,
                                     broker_url=broker.url)
            worker_client = worker_redis(workers)
            commits = CommitStore(worker_client, KeyLayout(workers.client.key_prefix, None))
            job = acme.jobs.enqueue("k1", "compact", reason="manual").job_id
            assert JobStore(worker_client, workers.client, commits.layout).mark_running(job) == 1
            leaf = acme.sessions.load("k1").leaf_id
            entry = {"type": "compaction", "timestamp": "t", "summary": "S" * 300,
                     "firstKeptEntryId": leaf, "tokensBefore": 9}
            assert commits.append_entry(job, leaf, entry, {}).status is CommitStatus.COMMITTED
            found = _check(acme, "k1", "k2")
            # The quota, read before the write.
            acme.redis.hset(acme.layout.tenant_quota("acme"), "stored_bytes_max",
                            found[BYTES_TOTAL] + 20)
            revision = acme.sessions.revision("k2")
            with pytest.raises(QuotaExceededError):
                acme.sessions.append("k2", msg("x" * 200))
            assert acme.sessions.revision("k2") == revision
            acme.redis.hdel(acme.layout.tenant_quota("acme"), "stored_bytes_max")
            # An expired session's count is dropped by the reconcile.
            brief.sessions.create("gone")
            brief.sessions.append("gone", msg("y" * 100))
            deadline = time.monotonic() + 5
            while brief.sessions.exists("gone") and time.monotonic() < deadline:
                time.sleep(0.1)
            assert "gone" in _check(acme, "k1", "k2")
            reconciler = BytesReconciler(worker_client, workers.client.key_prefix)
            assert "acme" in reconciler.tenants() and reconciler.run_pass() == 1
            assert set(_check(acme, "k1", "k2")) == {"k1", "k2", BYTES_TOTAL}
            worker_client.close()
    finally:
        broker.stop()
