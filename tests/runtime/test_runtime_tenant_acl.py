"""Issue 39, findings H1 and H2: a tenant's Redis ACL user touches only its own keys.

A real redis-server with the ACL users of the docs (docs/tenants.md "A Redis ACL user per
tenant" for the tenants, docs/deploying.md "Redis ACL and TLS" for the worker), a real worker
process and a loopback model. Each attack of the issue is run twice: as a user with the line
the docs gave before (:data:`BEFORE`: it works) and as a user with the line they give now
(refused, or it only hurts the attacker). The tenant's own work goes on through its inbox, and
another tenant's jobs are never held back while it attacks.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime

import pytest
import redis
from recovery.recovery_support import wait_until
from runtime.runtime_model_server import ModelServer
from runtime.tenant_acl_fleet import LAYOUT, Fleet, acl_user, running_fleet

from api_client import CompactionClient, JobHandle
from api_client.contract.errors import (
    JobCancelledError,
    JobFailedError,
    QuotaExceededError,
)
from api_client.contract.job_enums import CompactReason, JobKind, JobState
from api_client.contract.keys import KeyLayout
from api_client.contract.routing import Route, route_for
from api_client.contract.task_messages import task_push
from api_client.contract.wire import JobRecord, now_iso
from helpers.doc_facts import acl_rules

# The tenant's line docs/tenants.md gave before issue 39 (``{t}``: the tenant).
BEFORE = ("~compactor:tenant:{t}:* ~compactor:tenants:{{{t}}}:queued "
          "~compactor:tenants:{{{t}}}:bytes %R~compactor:tenants:{{{t}}}:quota "
          "%R~compactor:tenants:{{{t}}}:usage:* ~compactor:fair:* %W~compactor:broker:* "
          "%W~compactor:jobs:due resetchannels &compactor:broker:/0.celeryev/* "
          "+@all -@dangerous -scan")
MANUAL = route_for(JobKind.COMPACT, CompactReason.MANUAL)
SMALL = ('{"type":"session","version":3,"id":"x","timestamp":"2025-01-01T00:00:00.000Z",'
         '"cwd":"/w"}\n')


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, model: ModelServer) -> Iterator[Fleet]:
    with running_fleet(tmp_path_factory.mktemp("tenant-acl"), model, ("acme", "mallory"),
                       {"mallory-before": BEFORE.format(t="mallory")}) as started:
        yield started


def _session(client: CompactionClient, text: str) -> str:
    return client.sessions.import_jsonl(text, f"s-{uuid.uuid4().hex[:10]}")


def _pickup_ms(record: JobRecord) -> float:
    started = datetime.fromisoformat(str(record.started_at).replace("Z", "+00:00"))
    created = datetime.fromisoformat(record.created_at.replace("Z", "+00:00"))
    return (started - created).total_seconds() * 1000


def test_the_tenants_own_work_goes_through_its_inbox(fleet: Fleet, demo_text: str) -> None:
    """Sessions, compactions, prunes, summaries, cancels and events with the tenant's own
    user; the pickup (enqueue → a worker's start) beside the request path's."""
    inbox_ms: list[float] = []
    with fleet.client("acme", "acme", inbox=True) as acme:
        acme.warm()
        sid = _session(acme, demo_text)
        done = acme.compact(sid).wait(60)
        assert isinstance(done, dict) and done["type"] == "compaction"
        assert acme.prune(sid).wait(60) is not None
        assert acme.summarize("Summarize.", "The user asked about cats.").wait(60)
        assert acme.context(sid).messages
        assert JobKind.COMPACT.value in {e.kind for e in acme.events(session_id=sid,
                                                                      follow=False) if e.kind}
        for _ in range(10):
            job = acme.compact(_session(acme, demo_text))
            job.wait(60)
            inbox_ms.append(_pickup_ms(fleet.record(job.id)))
    request_ms: list[float] = []
    with CompactionClient(fleet.url("compactor"), tenant="globex") as globex:
        for _ in range(10):
            job = globex.compact(_session(globex, demo_text))
            job.wait(60)
            request_ms.append(_pickup_ms(fleet.record(job.id)))
    print(f"\npickup ms, median (max): inbox {statistics.median(inbox_ms):.1f} "
          f"({max(inbox_ms):.1f}), request path {statistics.median(request_ms):.1f} "
          f"({max(request_ms):.1f})")
    assert "NOPERM" not in fleet.worker.log()
    assert "polled instead" not in fleet.worker.log()  # the docs' worker user hears the inboxes


def _wait_running(fleet: Fleet, jobs: list[JobHandle]) -> None:
    """Until the jobs hold both of the worker's slots (COMPACTOR_CONCURRENCY=2) at the model."""
    wait_until(lambda: fleet.model.in_flight.is_set() and all(
        fleet.record(job.id).state is JobState.RUNNING for job in jobs), 60,
        "both slots to be busy")


def test_queued_jobs_are_cancelled_and_upgraded_with_the_tenants_user(
        fleet: Fleet, demo_text: str) -> None:
    """A queued job cancelled, and a queued manual compaction upgraded by an overflow request
    (the admitter sends it again at the overflow's priority)."""
    fleet.model.stall_next(100)  # both of the worker's slots hold: the next jobs stay queued
    try:
        with fleet.client("acme", "acme", inbox=True) as acme:
            running = [acme.compact(_session(acme, demo_text)) for _ in range(2)]
            _wait_running(fleet, running)
            queued = acme.compact(_session(acme, demo_text))
            assert queued.cancel() is JobState.CANCELLED
            sid = _session(acme, demo_text)
            manual = acme.compact(sid)
            queued_key = LAYOUT.tenant_queued("acme")
            wait_until(lambda: fleet.admin.zscore(queued_key, manual.id), 60, "the admission")
            upgraded = acme.compact(sid, reason="overflow")
            assert upgraded.id == manual.id
            overflow = route_for(JobKind.COMPACT, CompactReason.OVERFLOW).priority
            wait_until(lambda: (fleet.admin.zscore(queued_key, manual.id) or 10**14) // 10**13
                       == overflow, 60, "the upgrade")
    finally:
        fleet.model.release()
    for job in [*running, manual]:
        job.wait(60)
    assert fleet.record(manual.id).reason is CompactReason.OVERFLOW
    with pytest.raises(JobCancelledError):
        queued.wait(60)


# Each command of H1 and H2 as (what it does, the command): the before-user may, the new may not.
ATTACKS: list[tuple[str, list[str]]] = [
    ("delete the broker's list", ["DEL", f"compactor:broker:{MANUAL.queue}"]),
    ("delete the jobs-due index", ["DEL", "compactor:jobs:due"]),
    ("delete the fair index", ["DEL", f"compactor:fair:{MANUAL.queue}:{MANUAL.priority}:tags"]),
    ("push a message first in line", ["RPUSH", f"compactor:broker:{MANUAL.queue}", "x"]),
    ("index a forged job", ["ZADD", "compactor:jobs:due", "0", "mallory~s:0123456789abcdef"]),
    ("lift its stored bytes", ["HSET", "compactor:tenants:{mallory}:bytes", "*", "0"]),
    ("delete its queued jobs", ["DEL", "compactor:tenants:{mallory}:queued"]),
    ("read Celery's events", ["SUBSCRIBE", "compactor:broker:/0.celeryev/task.sent"]),
    ("forge Celery's events", ["PUBLISH", "compactor:broker:/0.celeryev/task.sent", "x"]),
]


def test_h1_h2_every_command_before_and_after(fleet: Fleet) -> None:
    """ACL DRYRUN of each attack: allowed by the line before, refused by the line now; then the
    new user runs each for real: NOPERM."""
    for what, command in ATTACKS:
        before = fleet.admin.execute_command("ACL", "DRYRUN", "mallory-before", *command)
        assert before == "OK", (what, before)
        after = fleet.admin.execute_command("ACL", "DRYRUN", "mallory", *command)
        assert after != "OK", (what, after)
    raw = fleet.raw("mallory")
    for _, command in ATTACKS:
        if command[0] == "SUBSCRIBE":
            listener = raw.pubsub()
            listener.subscribe(command[1])
            with pytest.raises(redis.exceptions.NoPermissionError):
                listener.get_message(timeout=10)  # the reply to SUBSCRIBE: refused
            listener.close()
            continue
        with pytest.raises(redis.exceptions.NoPermissionError):
            raw.execute_command(*command)
    for read in (lambda: raw.lrange(f"compactor:broker:{MANUAL.queue}", 0, -1),
                 lambda: raw.zrange("compactor:jobs:due", 0, -1),
                 lambda: raw.zrange("compactor:workers", 0, -1),
                 lambda: raw.hgetall("compactor:tenants:{mallory}:bytes"),
                 lambda: raw.randomkey(), lambda: raw.execute_command("PUBSUB", "CHANNELS"),
                 lambda: raw.script_flush(),
                 lambda: raw.hset("compactor:tenants:{mallory}:quota", "tokens_per_day", "0")):
        with pytest.raises(redis.exceptions.NoPermissionError):
            read()


def _forge(raw: redis.Redis[str], tenant: str, sid: str) -> str:
    """A hand-written record of a manual compaction (the priority and queue of an overflow)."""
    job_id = f"{tenant}~{sid}:{uuid.uuid4().hex[:16]}"
    raw.hset(LAYOUT.job(job_id).record, mapping={
        "id": job_id, "kind": "compact", "sessionId": f"{tenant}~{sid}", "state": "queued",
        "priority": "0", "queue": "compactor.overflow", "attempts": "0",
        "createdAt": now_iso(), "cancelRequested": "0", "reason": "manual"})
    return job_id


def test_h2_a_forged_job_over_the_budget(fleet: Fleet, demo_text: str) -> None:
    """Before: a record and an RPUSH put a paid manual compaction before the worker although
    the tenant is over tokens_per_day. Now: the admitter refuses it; no model call."""
    fleet.admin.hset("compactor:tenants:{mallory}:quota", "tokens_per_day", "10")
    fleet.admin.hset(LAYOUT.tenant_usage("mallory", time.strftime("%Y-%m-%d", time.gmtime())),
                     "input_tokens", "30")
    try:
        with fleet.client("mallory-before", "mallory", inbox=False) as before:
            sid = _session(before, demo_text)
            with pytest.raises(QuotaExceededError):
                before.compact(sid)  # refused on the request path ...
        raw = fleet.raw("mallory-before")
        job_id = _forge(raw, "mallory", sid)
        push = task_push(MANUAL.task, job_id, MANUAL.queue, MANUAL.priority, sent_event=False,
                         prefix=LAYOUT.broker)
        raw.rpush(push.queue_key, push.message)  # ... and taken by a worker all the same
        wait_until(lambda: fleet.record(job_id).started_at, 60, "the forged job to start")
        wait_until(lambda: fleet.record(job_id).state.terminal, 60, "the forged job to end")

        requests = fleet.model.requests
        with fleet.client("mallory", "mallory", inbox=True) as after:
            sid = _session(after, demo_text)
            with pytest.raises(JobFailedError, match="tokens_per_day"):
                after.compact(sid).wait(60)
        raw = fleet.raw("mallory")
        job_id = _forge(raw, "mallory", sid)
        inbox = LAYOUT.tenant_inbox("mallory")
        raw.zadd(inbox, {job_id: 0})
        raw.publish(inbox, job_id)
        record = wait_until(lambda: (r := fleet.record(job_id)).state.terminal and r, 60,
                            "the forged job to end")
        assert record.state is JobState.FAILED and "tokens_per_day" in str(record.error)
        assert record.started_at is None and fleet.model.requests == requests
    finally:
        fleet.admin.delete("compactor:tenants:{mallory}:quota")


def test_h2_the_queued_jobs_quota_holds(fleet: Fleet, demo_text: str) -> None:
    """Before: deleting its queued set let a job in over queued_jobs_max=1. Now: NOPERM, and
    the admitter refuses the job."""
    queued = LAYOUT.tenant_queued("mallory")
    fleet.admin.hset("compactor:tenants:{mallory}:quota", "queued_jobs_max", "1")

    def one_queued() -> None:
        score = MANUAL.priority * 10**13 + int(time.time() * 1000)
        fleet.admin.zadd(queued, {"mallory~held:0123456789abcdef": score})

    try:
        one_queued()
        with fleet.client("mallory-before", "mallory", inbox=False) as before:
            sid = _session(before, demo_text)
            with pytest.raises(QuotaExceededError):
                before.compact(sid)
            fleet.raw("mallory-before").delete(queued)
            before.compact(sid).wait(60)  # let in over the quota
        one_queued()
        with fleet.client("mallory", "mallory", inbox=True) as after:
            with pytest.raises(redis.exceptions.NoPermissionError):
                fleet.raw("mallory").delete(queued)
            with pytest.raises(JobFailedError, match="queued_jobs"):
                after.compact(_session(after, demo_text)).wait(60)
    finally:
        fleet.admin.delete("compactor:tenants:{mallory}:quota", queued)


def test_h2_the_stored_bytes_count_is_out_of_reach(fleet: Fleet) -> None:
    """Before: HSET on its bytes count stored past stored_bytes_max (1 000 here; each session
    is ~0.4 and ~0.9 kB). Now: NOPERM."""
    key = LAYOUT.tenant_bytes("mallory")
    fleet.admin.delete(key)  # the earlier tests' sessions aside
    fleet.admin.hset("compactor:tenants:{mallory}:quota", "stored_bytes_max", "1000")
    line = '{"type":"message","id":"%s","parentId":null,"timestamp":"2025-01-01T00:00:00.000Z",' \
           '"message":{"role":"user","content":"%s"}}\n'
    try:
        with fleet.client("mallory-before", "mallory", inbox=False) as before:
            sid = before.sessions.import_jsonl(SMALL + line % ("a1", "x" * 200), "bytes-1")
            with pytest.raises(QuotaExceededError):
                before.sessions.import_jsonl(SMALL + line % ("b1", "y" * 700), "bytes-2")
            fleet.raw("mallory-before").hset(key, "*", "-100000")
            before.sessions.import_jsonl(SMALL + line % ("b1", "y" * 700), "bytes-2")
            before.sessions.delete(sid)
        with pytest.raises(redis.exceptions.NoPermissionError):
            fleet.raw("mallory").hset(key, "*", "-100000")
    finally:
        fleet.admin.delete("compactor:tenants:{mallory}:quota", key)


def _hostile(raw: redis.Redis[str], stop: threading.Event, tried: list[str]) -> None:
    """Everything the new user may do to the fleet, in rounds of 50: its inbox full of ids that
    are no jobs, other tenants' ids, records that do not parse, each announced; each shared
    key's DEL (refused)."""
    inbox, n = LAYOUT.tenant_inbox("mallory"), 0
    while not stop.is_set():
        pipe = raw.pipeline(transaction=False)
        for _ in range(50):
            n += 1
            garbage = f"mallory~g{n}:{uuid.uuid4().hex[:16]}"
            pipe.hset(LAYOUT.job(garbage).record, mapping={"id": garbage, "state": "weird",
                                                           "kind": "??"})
            pipe.zadd(inbox, {garbage: 0, f"globex~x:{n:016x}": 0, "*": 0, "../../x" * 40: 0})
            pipe.publish(inbox, "x")
        pipe.execute()
        for _, command in ATTACKS[:3]:
            try:
                raw.execute_command(*command)
                tried.append(" ".join(command))
            except redis.exceptions.NoPermissionError:
                pass
        stop.wait(0.01)  # pacing: the test's own process shares the cores with the fleet


def test_another_tenant_is_never_held_back(fleet: Fleet, demo_text: str) -> None:
    """While the new user does its worst, another tenant's compactions run as usual."""
    stop, tried = threading.Event(), list[str]()
    attacker = threading.Thread(target=_hostile, args=(fleet.raw("mallory"), stop, tried))
    attacker.start()
    try:
        with CompactionClient(fleet.url("compactor"), tenant="globex") as globex:
            for _ in range(5):
                job = globex.compact(_session(globex, demo_text))
                job.wait(30)
                assert _pickup_ms(fleet.record(job.id)) < 5_000
            with fleet.client("acme", "acme", inbox=True) as acme:
                acme.compact(_session(acme, demo_text)).wait(30)
    finally:
        stop.set()
        attacker.join(10)
    assert tried == []
    assert fleet.worker.alive(), fleet.worker.log()[-3000:]



def test_a_record_changed_after_its_admission_runs_as_admitted(fleet: Fleet,
                                                                demo_text: str) -> None:
    """Over its budget, the tenant's prune is admitted (it calls no model); its record then says
    manual compaction: the worker runs the prune it admitted, no model call for it."""
    fleet.admin.hset("compactor:tenants:{mallory}:quota", "tokens_per_day", "10")
    fleet.admin.hset(LAYOUT.tenant_usage("mallory", time.strftime("%Y-%m-%d", time.gmtime())),
                     "input_tokens", "30")
    fleet.model.stall_next(100)  # both of the worker's slots hold: the prune stays queued
    try:
        with fleet.client("acme", "acme", inbox=True) as acme:
            busy = [acme.compact(_session(acme, demo_text)) for _ in range(2)]
            _wait_running(fleet, busy)
        with fleet.client("mallory", "mallory", inbox=True) as mallory:
            prune = mallory.prune(_session(mallory, demo_text))
            admitted = LAYOUT.tenant_admitted("mallory")
            wait_until(lambda: fleet.admin.hexists(admitted, prune.id), 60, "the admission")
            fleet.raw("mallory").hset(LAYOUT.job(prune.id).record,
                                      mapping={"kind": "compact", "reason": "manual"})
            fleet.model.release()
            for job in busy:
                job.wait(60)
            prune.wait(60)
        record = fleet.record(prune.id)
        assert record.state is JobState.SUCCEEDED and record.model is None
        assert record.entry is None or record.entry.get("type") != "compaction"
        usage = LAYOUT.tenant_usage("mallory", time.strftime("%Y-%m-%d", time.gmtime()))
        assert fleet.admin.hget(usage, "input_tokens") == "30"  # it spent nothing more
    finally:
        fleet.model.release()
        fleet.admin.delete("compactor:tenants:{mallory}:quota")


def test_the_sweep_goes_on_past_a_record_that_does_not_parse(fleet: Fleet) -> None:
    """A tenant's record the sweep cannot read is dropped from the index; the pass goes on to
    another tenant's job, sent again at the route of its kind and reason (not its record's)."""
    from worker.service import Sweeper
    from worker.settings import WorkerSettings

    layout = KeyLayout("swept", None)
    bad, good = f"mallory~s1:{'0' * 16}", f"globex~s2:{'1' * 16}"
    fleet.admin.hset(layout.job(bad).record, mapping={"id": bad, "state": "weird", "kind": "?"})
    fleet.admin.hset(layout.job(good).record, mapping={
        "id": good, "kind": "compact", "sessionId": "globex~s2", "state": "queued",
        "reason": "manual", "priority": "0", "queue": "compactor.overflow"})
    fleet.admin.zadd(layout.jobs_due, {bad: 1, good: 2})
    sent: list[tuple[str, Route]] = []
    settings = WorkerSettings(redis_url=fleet.server.url, key_prefix="swept")
    sweeper = Sweeper(settings, redis.Redis.from_url(fleet.server.url, decode_responses=True),
                      lambda job_id, route, _task_id: sent.append((job_id, route)))
    assert sweeper.sweep() == 1
    assert sent == [(good, MANUAL)]
    assert fleet.admin.zscore(layout.jobs_due, bad) is None


def test_a_worker_user_without_the_inbox_channel_polls(fleet: Fleet) -> None:
    """The fleet's user from before this channel: the admitter says so once and polls."""
    from worker.service._admitter import Admitter
    from worker.settings import WorkerSettings
    from worker.store.inbox import InboxStore
    from worker.store.job_lifecycle import JobStore

    rules = acl_rules("compactor").replace(" &compactor:tenant:*:inbox", "")
    acl_user(fleet.admin, "old-fleet", rules)
    client = fleet.raw("old-fleet")
    settings = WorkerSettings(redis_url=fleet.url("old-fleet"))
    admitter = Admitter(InboxStore(client, client, LAYOUT, settings),
                        JobStore(client, settings.client, LAYOUT), lambda *_: None)
    admitter._pubsub = admitter._subscribe()
    assert admitter._announced(10.0) == set()
    assert admitter._pubsub is None and not admitter.may_subscribe
    assert admitter._subscribe() is None
