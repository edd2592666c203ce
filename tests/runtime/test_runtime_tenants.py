"""Tenants through the client and a real worker: each tenant's sessions, jobs, drafts and events
are its own; the same id under another tenant is simply not found."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from runtime.runtime_support import new_session

from api_client import (
    CompactionClient,
    ConfigurationError,
    JobNotFoundError,
    SessionNotFoundError,
)
from worker.celery_app import CompactorCelery


@pytest.fixture
def tenants(app: CompactorCelery, module_redis: str) -> Iterator[dict[str, CompactionClient]]:
    clients = {name: CompactionClient(module_redis, tenant=name) for name in ("acme", "globex")}
    clients["default"] = CompactionClient(module_redis)
    yield clients
    for c in clients.values():
        c.close()


def test_a_tenant_compacts_its_own_session(tenants: dict[str, CompactionClient],
                                           demo_text: str) -> None:
    acme = tenants["acme"]
    sid = new_session(acme, demo_text)
    handle = acme.compact(sid, reason="manual")
    entry = handle.wait(30)
    assert entry["type"] == "compaction" and acme.sessions.load(sid).leaf_id == entry["id"]
    assert handle.id.startswith(f"acme~{sid}:")
    record = acme.job(handle.id).record()
    assert record.session_id == f"acme~{sid}" and record.state.value == "succeeded"
    # The qualified id the records show names the same session for its own tenant.
    assert acme.sessions.load(record.session_id).leaf_id == entry["id"]
    assert sid in acme.sessions.list(count=1000).session_ids
    types = [e.type.value for e in acme.events(session_id=sid, follow=False)]
    assert "compaction_end" in types
    # Its keys are under the tenant's root only.
    keys = acme.redis.keys(f"compactor:*{{{sid}}}*")
    assert keys and all(k.startswith("compactor:tenant:acme:session:{") for k in keys)


def test_the_same_id_under_another_tenant_is_not_found(tenants: dict[str, CompactionClient],
                                                      demo_text: str) -> None:
    acme, globex, default = tenants["acme"], tenants["globex"], tenants["default"]
    sid = new_session(acme, demo_text)
    job = acme.compact(sid, reason="manual")
    job.wait(30)
    for other in (globex, default):
        assert not other.sessions.exists(sid)
        with pytest.raises(SessionNotFoundError):
            other.sessions.load(sid)
        with pytest.raises(SessionNotFoundError):
            other.compact(sid, reason="manual")
        with pytest.raises(SessionNotFoundError):
            other.sessions.append(sid, {"type": "message", "message": {
                "role": "user", "content": "hi", "timestamp": 1}})
        with pytest.raises((SessionNotFoundError, ValueError)):
            other.sessions.load(f"acme~{sid}")  # naming the tenant does not open it
        for job_id in (job.id, job.id.removeprefix("acme~")):
            with pytest.raises(JobNotFoundError):
                other.job(job_id)
        assert sid not in other.sessions.list(count=1000).session_ids
        assert job.id not in {e.job_id for e in other.events(follow=False)}
    assert job.id in {e.job_id for e in acme.events(follow=False)}
    # The same id in another tenant is another session: both exist, neither sees the other's.
    globex.sessions.import_jsonl(demo_text, sid)
    globex.sessions.append(sid, {"type": "message", "message": {
        "role": "user", "content": "globex only", "timestamp": 1}})
    assert "globex only" in globex.sessions.export_jsonl(sid)
    assert "globex only" not in acme.sessions.export_jsonl(sid)


def test_a_tenant_name_is_checked() -> None:
    for bad in ("", "Acme", "a~b", "a:b", "x" * 64, "-a"):
        with pytest.raises(ConfigurationError):
            CompactionClient("redis://127.0.0.1:1/0", tenant=bad)
