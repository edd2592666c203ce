"""Issue 39, the stored-bytes quota of a tenant on its own Redis ACL user (``tenant_inbox``):
its writes go straight to Redis and cannot be refused, but the workers measure the session of
each job they admit from its inbox (``worker/store/inbox_bytes.py``) and refuse the job,
``quota_exceeded`` ``stored_bytes``, while its measured sessions are over its
``stored_bytes_max``; a session it deletes stops counting (docs/tenants.md, docs/security.md
"Redis").

A real redis-server with the docs' ACL users, a worker process on the fleet's user, a loopback
model (``runtime/tenant_acl_fleet.py``), and the admitter's store in this process on the same
Redis for what the worker's own passes do (the measure when there is no limit, the reconcile).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
import redis
from runtime.runtime_model_server import ModelServer
from runtime.tenant_acl_fleet import LAYOUT, Fleet, running_fleet

from api_client import CompactionClient
from api_client.contract.errors import JobFailedError, QuotaExceededError
from api_client.contract.job_enums import CompactReason, JobKind, JobState
from api_client.contract.routing import route_for
from api_client.contract.wire import JobRecord, now_iso
from worker.settings import WorkerSettings
from worker.store.inbox import InboxStore
from worker.store.tenant_bytes import BytesReconciler

TENANT = "hoard"
MEASURED = LAYOUT.tenant_measured(TENANT)
QUOTA = LAYOUT.tenant_quota(TENANT)
MANUAL = route_for(JobKind.COMPACT, CompactReason.MANUAL)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, model: ModelServer) -> Iterator[Fleet]:
    with running_fleet(tmp_path_factory.mktemp("inbox-bytes"), model, (TENANT,)) as started:
        yield started


@pytest.fixture
def hoard(fleet: Fleet) -> Iterator[CompactionClient]:
    """The tenant's client on its own user; its quota and measured hash afresh each test."""
    fleet.admin.delete(QUOTA, MEASURED)
    with fleet.client(TENANT, TENANT, inbox=True) as client:
        yield client
    fleet.admin.delete(QUOTA, MEASURED)


def _session(client: CompactionClient, text: str) -> str:
    return client.sessions.import_jsonl(text, f"s-{uuid.uuid4().hex[:10]}")


def _measured(fleet: Fleet, sid: str) -> int:
    return int(fleet.admin.hget(MEASURED, sid) or 0)


def _refused(fleet: Fleet, client: CompactionClient, sid: str) -> JobRecord:
    """A compaction of the session ends failed with the stored-bytes quota's error, never
    started, no model call; its completion event says so to the tenant."""
    calls = fleet.model.requests
    job = client.compact(sid)
    with pytest.raises(JobFailedError, match="stored_bytes"):
        job.wait(60)
    record = fleet.record(job.id)
    assert record.state is JobState.FAILED and record.started_at is None
    assert fleet.model.requests == calls
    ends = [e for e in client.events(session_id=sid, follow=False) if e.job_id == job.id]
    assert [e.state for e in ends] == [JobState.FAILED]
    assert "stored_bytes" in str(ends[0].error)
    return record


def test_over_its_quota_by_direct_writes_its_jobs_are_refused_until_it_deletes(
        fleet: Fleet, hoard: CompactionClient, demo_text: str) -> None:
    """Under the quota a compaction runs (its session measured); the tenant's user writes four
    times that session's size into another session's keys directly: its compaction is refused with
    quota_exceeded, and so is a small one's; once it deletes the bloated session, the next
    compaction runs again."""
    first = _session(hoard, demo_text)
    fleet.admin.hset(QUOTA, "stored_bytes_max", "10000000")
    assert hoard.compact(first).wait(60)["type"] == "compaction"
    size = _measured(fleet, first)
    assert size > len(demo_text.encode())  # every key of the session, Redis's overhead too
    fleet.admin.hset(QUOTA, "stored_bytes_max", str(size * 4))

    bloated = _session(hoard, demo_text)
    raw = fleet.raw(TENANT)
    raw.set(LAYOUT.session(f"{TENANT}~{bloated}").draft, "x" * size * 4)  # straight to Redis
    record = _refused(fleet, hoard, bloated)
    assert _measured(fleet, bloated) > size * 4
    assert "stored_bytes" in str(record.error) and f"{size * 4:,}" in str(record.error)
    small = _session(hoard, demo_text)
    _refused(fleet, hoard, small)

    assert hoard.sessions.delete(bloated)
    assert hoard.compact(small).wait(60)["type"] == "compaction"
    assert fleet.admin.hexists(MEASURED, bloated) is False
    assert int(fleet.admin.hget(MEASURED, "*") or 0) < size * 4


def test_the_tenants_user_cannot_reach_the_measured_hash(fleet: Fleet,
                                                        hoard: CompactionClient) -> None:
    """Outside its ACL patterns: it can neither lift nor read its measured bytes."""
    fleet.admin.hset(MEASURED, mapping={"s1": "900", "*": "900"})
    raw = fleet.raw(TENANT)
    for attempt in (lambda: raw.hset(MEASURED, "*", "-100000"), lambda: raw.delete(MEASURED),
                    lambda: raw.hdel(MEASURED, "s1"), lambda: raw.hgetall(MEASURED)):
        with pytest.raises(redis.exceptions.NoPermissionError):
            attempt()
    assert fleet.admin.hget(MEASURED, "*") == "900"


def _store(fleet: Fleet, stored_bytes_max: int = 0) -> InboxStore:
    """The admitter's store as a worker makes it, on the fleet's user."""
    client = fleet.raw("compactor")
    settings = WorkerSettings(redis_url=fleet.url("compactor"), stored_bytes_max=stored_bytes_max)
    return InboxStore(client, client, LAYOUT, settings)


def _queued(fleet: Fleet, sid: str) -> JobRecord:
    job_id = f"{TENANT}~{sid}:{uuid.uuid4().hex[:16]}"
    fields = {"id": job_id, "kind": "compact", "sessionId": f"{TENANT}~{sid}", "state": "queued",
              "reason": "manual", "attempts": "0", "createdAt": now_iso(),
              "cancelRequested": "0"}
    fleet.admin.hset(LAYOUT.job(job_id).record, mapping=fields)
    return JobRecord.from_redis(fields)


def test_without_a_limit_a_tenant_is_measured_once(fleet: Fleet, hoard: CompactionClient,
                                                   demo_text: str) -> None:
    """No stored_bytes_max: the first admission measures and learns it; the next ones within
    LIMIT_FRESH_S do not (no MEMORY USAGE on the job path); a limit set meanwhile still holds
    against what was measured."""
    store = _store(fleet)
    one, two, three = (_session(hoard, demo_text) for _ in range(3))
    store.admit(_queued(fleet, one), MANUAL)
    store.admit(_queued(fleet, two), MANUAL)
    assert _measured(fleet, one) > 0 and not fleet.admin.hexists(MEASURED, two)
    fleet.admin.hset(QUOTA, "stored_bytes_max", "10")
    with pytest.raises(QuotaExceededError, match="stored_bytes"):
        store.admit(_queued(fleet, three), MANUAL)


def test_the_reconcile_drops_deleted_sessions_and_measures_changed_ones(
        fleet: Fleet, hoard: CompactionClient, demo_text: str) -> None:
    """The workers' reconcile pass walks the measured hashes: a deleted session's count
    leaves, a grown one's is measured anew, whether or not the tenant asks for jobs."""
    store = _store(fleet, stored_bytes_max=100_000_000)
    gone, grown = _session(hoard, demo_text), _session(hoard, demo_text)
    for sid in (gone, grown):
        store.admit(_queued(fleet, sid), MANUAL)
    before = _measured(fleet, grown)
    hoard.sessions.delete(gone)
    fleet.raw(TENANT).set(LAYOUT.session(f"{TENANT}~{grown}").pace, "y" * 50_000)
    started = time.perf_counter()
    assert BytesReconciler(fleet.raw("compactor"), "compactor").run_pass() >= 1
    print(f"\nreconcile pass: {(time.perf_counter() - started) * 1000:.1f} ms")
    assert not fleet.admin.hexists(MEASURED, gone)
    assert _measured(fleet, grown) > before + 50_000
    assert int(fleet.admin.hget(MEASURED, "*") or 0) == _measured(fleet, grown)
