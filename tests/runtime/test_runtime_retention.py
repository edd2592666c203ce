"""Retention on the worker's side (issue 30): every commit and every other write a worker makes
to a session (progress events, token counts, the loop guard's count, drafts, a job's end)
refreshes the TTL of all the session's keys in the same step; with 0 they are kept forever.
First each store against Redis, then a real worker's compact, prune, branch summary,
speculative draft and automatic compaction."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from runtime.runtime_support import new_session, runtime_settings

from api_client import CompactionClient, JobEvent
from api_client.contract.job_enums import EventType
from api_client.contract.keys import ANY_TENANT, KeyLayout
from helpers.retention import SESSION_LONG, assert_retained, session_ttls
from worker.settings import WorkerSettings
from worker.store import CommitStatus, CommitStore
from worker.store.compaction_counter import CompactionCounter
from worker.store.draft_store import DraftStore
from worker.store.job_lifecycle import JobStore
from worker.store.token_counts import RedisTokenCounts

TTL = 1_800


def msg(text: str, role: str = "user") -> dict[str, object]:
    return {"role": role, "content": [{"type": "text", "text": text}], "timestamp": 1}


@pytest.fixture
def local(redis_url: str) -> Iterator[CompactionClient]:
    """A client of the run's Redis that writes without retention (the keys stay at -1 until a
    worker's write under test sets them)."""
    with CompactionClient(WorkerSettings(redis_url=redis_url, session_ttl_s=0).client) as c:
        yield c


def _running_job(client: CompactionClient, kind: str = "compact") -> tuple[str, list[str], str]:
    sid = client.sessions.create(f"w-{kind}-{uuid.uuid4().hex[:8]}")
    ids = client.sessions.append_many(sid, [msg(f"m{i}") for i in range(4)])
    job = client.jobs.enqueue(sid, kind, reason="manual" if kind == "compact" else None,
                              target_id=ids[1] if kind == "branch_summary" else None).job_id
    assert JobStore(client.redis, client.settings, client.layout).mark_running(job) == 1
    assert {session_ttls(client.redis, client.layout, sid)[n] for n in ("header", "entries")} \
        == {-1}  # written before: no retention yet
    return sid, ids, job


def _check(client: CompactionClient, sid: str, ttl: int = TTL) -> dict[str, int]:
    return assert_retained(client.redis, client.layout, sid, ttl)


def test_each_commit_refreshes_the_session(local: CompactionClient,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from worker.store import _commits

    commits = CommitStore(local.redis, local.layout, session_ttl_s=TTL)
    sid, ids, job = _running_job(local)
    entry = {"type": "compaction", "timestamp": "2025-01-01T00:00:00.000Z", "summary": "s",
             "firstKeptEntryId": ids[2], "tokensBefore": 10}
    assert commits.append_entry(job, ids[-1], entry, {}).status is CommitStatus.COMMITTED
    assert not {"effects", "effects:at"} & set(_check(local, sid))  # the record's marker

    sid, ids, job = _running_job(local, "branch_summary")
    summary = {"type": "branch_summary", "timestamp": "2025-01-01T00:00:00.000Z",
               "fromId": ids[-1], "summary": "left"}
    assert commits.branch(job, ids[-1], ids[1], summary, {}).status is CommitStatus.COMMITTED
    _check(local, sid)

    # A prune in steps: each step refreshes (the first one checked alone), the last too.
    monkeypatch.setattr(_commits, "REWRITE_STEP_LINES", 1)
    sid, ids, job = _running_job(local, "prune")
    k = local.layout.session(sid)
    lines = local.redis.hmget(k.entries, ids)
    rewrites = [(i, str(line)) for i, line in zip(ids, lines, strict=True)]
    run = commits._call_script
    steps: list[str] = []

    def step(script: object, keys: list[str], args: list[str]) -> object:
        reply = run(script, keys, args)
        steps.append(args[3])
        _check(local, sid)
        return reply

    monkeypatch.setattr(commits, "_call_script", step)
    seen = int(local.redis.get(k.rewrites) or 0)
    outcome = commits.rewrite(job, rewrites, {"prunedEntryIds": ids, "tokensSaved": 0},
                              rewrites_seen=seen, pruned_through=ids[-1])
    assert outcome.status is CommitStatus.COMMITTED and steps == ["begin", "more", "more", "end"]
    assert "pruned" in _check(local, sid)


def test_drafts_counts_events_guard_and_a_jobs_end(local: CompactionClient) -> None:
    sid, _, job = _running_job(local)
    layout, raw = local.layout, local.redis
    assert DraftStore(raw, layout, 900, TTL).save(job, '{"draft":1}') == "saved"
    assert 0 < _check(local, sid)["draft"] <= 900_000  # its own lifetime, shorter

    sid, _, job = _running_job(local)
    assert RedisTokenCounts(raw, layout, 7 * 86_400, TTL).save(sid, [(b"\x01" * 16, 3)]) == 1
    assert "tokens" in _check(local, sid)  # its week, capped at the retention

    sid, _, job = _running_job(local)
    CompactionCounter(raw, layout, TTL).count(sid, job, time.time(), 600)
    assert "compactions" in _check(local, sid)

    sid, _, job = _running_job(local)
    settings = local.settings.model_copy(update={"session_ttl_s": TTL})
    jobs = JobStore(raw, settings, layout)
    record = jobs.get(job)
    assert jobs.publish(JobEvent.for_record(record, EventType.COMPACTION_START))
    assert "events" in _check(local, sid)

    sid, _, job = _running_job(local)
    assert jobs.finish(job, "failed", error="gave up")  # finish.lua
    assert "events" in _check(local, sid)


def test_zero_keeps_what_a_worker_writes_forever(local: CompactionClient) -> None:
    sid, ids, job = _running_job(local)
    entry = {"type": "compaction", "timestamp": "2025-01-01T00:00:00.000Z", "summary": "s",
             "firstKeptEntryId": ids[2], "tokensBefore": 10}
    CommitStore(local.redis, local.layout, session_ttl_s=TTL).append_entry(
        job, ids[-1], entry, {})
    _check(local, sid)
    sid2, ids2, job2 = _running_job(local)
    forever = CommitStore(local.redis, local.layout, session_ttl_s=0)
    assert forever.append_entry(job2, ids2[-1], entry, {}).applied
    ttls = session_ttls(local.redis, local.layout, sid2)
    assert {ttls[name] for name in ttls if name in SESSION_LONG} == {-1}


# -- a real worker ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def worker_settings(module_redis: str) -> WorkerSettings:
    return runtime_settings(module_redis, session_ttl_s=TTL)


@pytest.fixture
def client(app: object, module_redis: str) -> Iterator[CompactionClient]:
    with CompactionClient(WorkerSettings(redis_url=module_redis, session_ttl_s=TTL).client) as c:
        yield c


def _ended(client: CompactionClient, sid: str) -> dict[str, int]:
    """The session after a job ended: retained, and no key of a finished job left behind."""
    ttls = _check(client, sid)
    assert not any(name.startswith("inflight:") for name in ttls)
    return ttls


def test_a_workers_jobs_keep_the_session_retained(client: CompactionClient,
                                                  demo_text: str) -> None:
    raw: redis.Redis[str] = client.redis
    sid = new_session(client, demo_text)
    for key in client.layout.session(sid).all():  # as if stored before retention
        raw.persist(key)
    client.compact(sid, reason="manual").wait(60)  # commit_entry.lua, events, token counts
    assert "events" in _ended(client, sid)
    client.prune(sid).wait(60)  # commit_prune.lua
    _ended(client, sid)
    first = client.sessions.load(sid).session.entries[1].id
    client.branch_summary(sid, first).wait(60)  # commit_branch.lua
    _ended(client, sid)
    # A draft that would keep everything is never stored (the branch left a short path): a
    # session with history to summarise.
    sid = new_session(client, demo_text)
    for key in client.layout.session(sid).all():
        raw.persist(key)
    client.compact(sid, reason="speculative").wait(60)  # save_draft.lua
    assert "draft" in _ended(client, sid)
    client.compact(sid, reason="threshold").wait(60)  # from the draft, or a job: counted
    assert "compactions" in _ended(client, sid)


# -- the stored-sessions gauges --------------------------------------------------------------
def _exact_bytes(raw: redis.Redis[str], client: CompactionClient, sid: str) -> int:
    return sum(int(raw.memory_usage(k, samples=0) or 0)
               for k in client.layout.session(sid).all())


def test_the_session_gauges_walk_the_sessions_over_scrapes(local: CompactionClient) -> None:
    from worker.observability.session_gauge import SessionGaugeCollector

    sids = [local.sessions.create(f"g-{i:02d}") for i in range(40)]
    for sid in sids:
        local.sessions.append_many(sid, [msg("x" * 500), msg("y" * 500, "assistant")])
    local.compact(sids[0]).cancel()  # job records and streams are no sessions
    exact = sum(_exact_bytes(local.redis, local, sid) for sid in sids)
    gauge = SessionGaugeCollector(local.redis, local.layout, scan_count=10, scans=1, measured=3)
    scrapes = [gauge.sample()]
    while gauge._last is None:  # a walk of ~50 keys, about 10 a scrape
        scrapes.append(gauge.sample())
        assert len(scrapes) < 100
    assert len(scrapes) > 2 and scrapes[0][0] < 40  # the figures so far until the walk ends
    sessions, size = scrapes[-1]  # the scrape that ended the walk shows its figures
    assert sessions == 40 and abs(size - exact) < 0.1 * exact  # 3 measured a scrape
    assert gauge.sample() == (sessions, size)  # the next walk shows only once it has ended
    families = {f.name: f.samples[0].value for f in gauge.collect()}
    assert families == {"compactor_sessions_stored": 40, "compactor_session_bytes": size}


def test_the_session_gauges_count_every_tenants_sessions(local: CompactionClient) -> None:
    """The workers' gauge (an any-tenant layout) walks the default tenant's sessions and every
    other tenant's; a tenant's own listing stays its own."""
    from worker.observability.session_gauge import SessionGaugeCollector

    with CompactionClient(local.settings, tenant="acme") as acme:
        for i in range(3):
            acme.sessions.append(acme.sessions.create(f"t-{i}"), msg("x" * 200))
        local.sessions.append(local.sessions.create("t-0"), msg("y" * 200))  # same id, default
        gauge = SessionGaugeCollector(local.redis, KeyLayout(tenant=ANY_TENANT))
        while gauge._last is None:
            gauge.sample()
        assert gauge.sample()[0] == 4
        assert sorted(acme.sessions.list(count=1000).session_ids) == ["t-0", "t-1", "t-2"]
        assert local.sessions.list(count=1000).session_ids == ["t-0"]


def test_the_session_gauges_answer_a_scrape_when_redis_does_not(local: CompactionClient) -> None:
    from worker.observability.session_gauge import SessionGaugeCollector

    dead = redis.Redis(port=1, socket_connect_timeout=0.2)
    assert list(SessionGaugeCollector(dead, local.layout).collect()) == []


def test_a_worker_serves_the_session_gauges(own_redis: Any, tmp_path: Path) -> None:
    from runtime.test_runtime_metrics import metrics_worker, scrape, value

    with CompactionClient(own_redis.url) as c:
        for i in range(3):
            c.sessions.append(c.sessions.create(f"m-{i}"), msg("hello"))
    with metrics_worker(own_redis.url, tmp_path) as port:
        samples = scrape(port)
    assert value(samples, "compactor_sessions_stored") == 3
    assert value(samples, "compactor_session_bytes") > 3 * 100


# -- the command line ------------------------------------------------------------------------
@pytest.fixture
def cli(redis_url: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> Iterator[Any]:
    from worker.cli import main

    for name in ("COMPACTOR_BROKER_URL", "COMPACTOR_RESULT_BACKEND", "COMPACTOR_KEY_PREFIX",
                 "COMPACTOR_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COMPACTOR_SESSION_TTL_S", str(TTL))

    def run(*argv: str) -> tuple[int, str, str]:
        code = main([*argv, "--redis-url", redis_url])  # the global option after the command
        out, err = capsys.readouterr()
        return code, out, err

    yield run


def test_session_list_and_delete(cli: Any, local: CompactionClient, demo_text: str,
                                 tmp_path: Path) -> None:
    for sid in ("cli-a1", "cli-a2", "cli-b1"):
        local.sessions.create(sid)
    demo = tmp_path / "demo.jsonl"
    demo.write_text(demo_text, encoding="utf-8")
    assert cli("session", "import", str(demo), "--session-id", "cli-c1")[0] == 0
    _check(local, "cli-c1")  # the CLI's writes take COMPACTOR_SESSION_TTL_S
    for sid in ("cli-0", "cli-z", "cli-m"):  # the text lines are sorted, as --json
        local.sessions.create(sid)
    code, out, _ = cli("session", "list", "--prefix", "cli-")
    assert code == 0 and out.split("\n") == [
        "cli-0", "cli-a1", "cli-a2", "cli-b1", "cli-c1", "cli-m", "cli-z", ""]
    code, out, _ = cli("session", "list", "--prefix", "cli-a", "--json")
    assert code == 0 and json.loads(out) == {"sessionIds": ["cli-a1", "cli-a2"], "count": 2}
    assert cli("session", "delete", "cli-a1") == (0, "deleted cli-a1\n", "")
    code, out, _ = cli("session", "delete", "cli-c1", "--json")
    assert code == 0 and json.loads(out) == {"sessionId": "cli-c1", "deleted": True}
    assert session_ttls(local.redis, local.layout, "cli-c1") == {}
    code, out, err = cli("session", "delete", "cli-a1")
    assert (code, out) == (2, "") and err == "compactor: error: Session cli-a1 not found\n"
    code, _, err = cli("session", "list", "--prefix", "a*")
    assert code == 2 and err.startswith("compactor: error: invalid session id prefix")
    assert cli("session", "list", "--prefix", "cli-a")[1] == "cli-a2\n"
