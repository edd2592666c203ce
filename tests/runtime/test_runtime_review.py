"""Review of the runtime's invariants: each test reproduces a path that broke one (real Redis,
real in-process worker, loopback model over HTTP)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import (
    DELIVERIES,
    completions,
    new_session,
    runtime_settings,
    session_events,
)

from api_client import ClientSettings, CompactionClient, PruneResult
from worker.celery_app import CompactorCelery
from worker.compaction import get_tokenizer, plan_prune
from worker.settings import WorkerSettings
from worker.store import CommitStatus, CommitStore
from worker.store.job_lifecycle import JobStore


@pytest.fixture(scope="module")
def worker_settings(module_redis: str, model: ModelServer) -> WorkerSettings:
    return runtime_settings(module_redis, models=[model.candidate()], lease_ttl_s=1.5)


@pytest.fixture
def client(client: CompactionClient, model: ModelServer) -> Iterator[CompactionClient]:
    yield client
    model.release()




def test_a_delivery_that_lost_its_lease_leaves_the_job_to_the_new_holder(
        app: CompactorCelery, client: CompactionClient, model: ModelServer, demo_text: str) -> None:
    """The heartbeat finds another worker's lease while a model call is in flight: the call is
    aborted, and this delivery must stop without ending the job the other worker now runs (it
    used to fail the job: 'lease lost to another worker')."""
    sid = new_session(client, demo_text)
    text = client.sessions.export_jsonl(sid)
    model.stall_next(1)
    handle = client.compact(sid, reason="manual")
    assert model.in_flight.wait(10)
    # This worker stalled past its lease and a second delivery took the job over.
    client.redis.set(client.layout.job(handle.id).lease, "other-worker", px=60_000)
    # The delivery stops without a task end of its own (the lease holder reports the job's).
    state, _ = DELIVERIES.wait(handle.id)
    assert state == "IGNORED"
    record = client.jobs.get(handle.id)
    assert (record.state.value, record.error) == ("running", None)
    assert completions(client, sid, handle.id) == []
    assert client.sessions.export_jsonl(sid) == text


def test_prune_planned_before_the_agent_rewound_is_replanned(
        app: CompactorCelery, client: CompactionClient, demo_text: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent navigates back between the prune plan and its commit: the planned results are
    now the newest on the path (protected: docs/compaction.md "Pruning"), so the plan must not be
    applied."""
    sid = new_session(client, demo_text)
    snap = client.sessions.load(sid)
    path = snap.session.tree().path_to(snap.leaf_id)
    tokenizer = get_tokenizer("tiktoken")
    planned = plan_prune(path, tokenizer).pruned_entry_ids
    rewind = max(i for i, e in enumerate(path) if e.id in planned) + 1
    while path[rewind].raw.get("message", {}).get("role") != "user":
        rewind += 1
    assert planned and plan_prune(path[:rewind], tokenizer).pruned_entry_ids == ()

    commits = app.runtime().commits
    rewrite = commits.rewrite

    def agent_rewinds_then_commit(job_id: str, *args: Any, **kwargs: Any) -> Any:
        if job_id.startswith(sid) and client.sessions.load(sid).leaf_id == snap.leaf_id:
            client.sessions.navigate(sid, path[rewind].parent_id)  # back to a user turn
        return rewrite(job_id, *args, **kwargs)

    monkeypatch.setattr(commits, "rewrite", agent_rewinds_then_commit)
    handle = client.prune(sid)
    result = handle.wait(30)
    assert isinstance(result, PruneResult) and result.pruned_entry_ids == []
    assert '"prunedAt"' not in client.sessions.export_jsonl(sid)
    events = [e.type.value for e in session_events(client, sid) if e.job_id == handle.id]
    assert events.count("stale") == 1


def _msg(text: str, role: str = "user") -> dict[str, object]:
    return {"role": role, "content": [{"type": "text", "text": text}], "timestamp": 1}


@pytest.mark.parametrize(("agent", "expected"), [
    ("appends", CommitStatus.COMMITTED),       # newer results only: the plan still holds
    ("compacts", CommitStatus.COMMITTED),      # a compaction on the path changes no protection
    ("rewinds", CommitStatus.STALE),           # the planned results are now the newest
    ("other branch", CommitStatus.STALE),
    ("resets", CommitStatus.STALE),
])
def test_prune_commit_needs_the_snapshot_leaf_on_the_path(redis_url: str, agent: str,
                                                          expected: CommitStatus) -> None:
    with CompactionClient(redis_url) as c:
        sid = c.sessions.create("s1")
        ids = [c.sessions.append(sid, _msg(f"m{i}")) for i in range(4)]
        job = c.jobs.enqueue(sid, "prune").job_id
        assert JobStore(c.redis, c.settings, c.layout).mark_running(job) == 1
        commits = CommitStore(c.redis, c.layout)
        k = c.layout.session(sid)
        line = str(c.redis.hget(k.entries, ids[0]))
        rewrites = [(ids[0], line.replace("m0", "pruned"))]
        seen = int(c.redis.get(k.rewrites) or 0)
        if agent == "appends":
            c.sessions.append(sid, _msg("later"))
        elif agent == "compacts":
            c.sessions.append(sid, {"type": "compaction", "summary": "x",
                                    "firstKeptEntryId": ids[2], "tokensBefore": 1})
        elif agent == "rewinds":
            c.sessions.navigate(sid, ids[1])
        elif agent == "other branch":
            c.sessions.navigate(sid, ids[1])
            c.sessions.append(sid, _msg("edited"))
        else:
            c.sessions.navigate(sid, None)
        before = c.sessions.export_jsonl(sid)
        outcome = commits.rewrite(job, rewrites, {"prunedEntryIds": ids[:1], "tokensSaved": 1},
                                  rewrites_seen=seen, snapshot_leaf=ids[3])
        assert outcome.status is expected
        after = c.sessions.export_jsonl(sid)
        assert (after != before) is (expected is CommitStatus.COMMITTED)
        # the exactly-once marker, in the job's record ('' = a change without an entry)
        effect = c.redis.hget(c.layout.job(job).record, "effect")
        assert effect == ("" if expected is CommitStatus.COMMITTED else None)


def test_a_job_that_waited_past_the_pending_ttl_keeps_its_record_while_it_runs(
        app: CompactorCelery, module_redis: str, model: ModelServer, demo_text: str) -> None:
    """The pending TTL bounds how long a job may wait in the queue; a started job used to lose
    its record mid-run (no commit, no completion event, waiters blocked for ever)."""
    settings = ClientSettings(redis_url=module_redis, job_pending_ttl_s=1)
    with CompactionClient(settings) as client:
        sid = new_session(client, demo_text)
        model.stall_next(1)
        handle = client.compact(sid, reason="manual")
        assert model.in_flight.wait(10)
        time.sleep(1.5)  # past the pending TTL while the model call runs
        model.release()
        entry = handle.wait(20)
        assert isinstance(entry, dict) and entry["type"] == "compaction"
        assert client.jobs.get(handle.id).state.value == "succeeded"
        assert len(completions(client, sid, handle.id)) == 1
