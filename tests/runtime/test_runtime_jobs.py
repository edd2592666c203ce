"""Jobs end to end through the thin client and a real worker (threads pool, extractive model)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from runtime.runtime_support import (
    DELIVERIES,
    completions,
    entries_of_type,
    new_session,
    session_events,
)

from api_client import CompactionClient, JobFailedError, PruneResult, SessionNotFoundError
from api_client.contract.routing import TASK_COMPACT, route_for
from helpers.sessions import turns_jsonl
from worker.celery_app import CompactorCelery
from worker.compaction import get_tokenizer, plan_prune
from worker.store import CommitStore
from worker.store.job_lifecycle import JobStore


def test_threshold_compaction_round_trip(client: CompactionClient, demo_text: str) -> None:
    sid = new_session(client, demo_text)
    leaf = client.sessions.load(sid).leaf_id
    handle = client.compact(sid, reason="threshold")
    entry = handle.wait(30)
    assert isinstance(entry, dict) and entry["type"] == "compaction"
    assert entry["parentId"] == leaf and entry["fromExtension"] is False
    snap = client.sessions.load(sid)
    path_ids = [e.id for e in snap.session.tree().path_to(snap.leaf_id)]
    assert snap.leaf_id == entry["id"] and entry["firstKeptEntryId"] in path_ids
    record = handle.record()
    assert (record.state.value, record.attempts, record.model) == ("succeeded", 1, "extractive")
    assert record.result is not None and len(record.result["prunedEntryIds"]) == 2  # prune first
    assert record.result["tokensAfter"] < record.result["tokensBefore"]
    done = completions(client, sid, handle.id)
    assert [(e.type.value, e.entry["id"] if e.entry else None) for e in done] == [
        ("compaction_end", entry["id"])]
    types = [e.type.value for e in session_events(client, sid) if e.job_id == handle.id]
    assert types == ["compaction_start", "session_compact", "compaction_end"]


def test_manual_compaction_does_not_prune(client: CompactionClient, demo_text: str) -> None:
    sid = new_session(client, demo_text)
    handle = client.compact(sid, reason="manual", instructions="Focus on the importer.")
    handle.wait(30)
    assert handle.record().result["prunedEntryIds"] == []  # type: ignore[index]
    assert '"prunedAt"' not in client.sessions.export_jsonl(sid)


def test_prune_rewrites_only_the_planned_entries(client: CompactionClient, demo_text: str) -> None:
    sid = new_session(client, demo_text)
    snap = client.sessions.load(sid)
    plan = plan_prune(snap.session.tree().path_to(snap.leaf_id), get_tokenizer("tiktoken"))
    assert plan.pruned_entry_ids  # the sample session is built to have work here
    before = client.sessions.export_jsonl(sid).splitlines()
    result = client.prune(sid).wait(30)
    assert isinstance(result, PruneResult)
    assert tuple(result.pruned_entry_ids) == plan.pruned_entry_ids
    after = client.sessions.export_jsonl(sid).splitlines()
    assert len(after) == len(before) and client.sessions.revision(sid) == snap.revision + 1
    for old, new in zip(before, after, strict=True):
        old_entry, new_entry = json.loads(old), json.loads(new)
        if old_entry.get("id") not in plan.pruned_entry_ids:
            assert new == old
            continue
        message = new_entry.pop("message")
        assert new_entry == {k: v for k, v in old_entry.items() if k != "message"}
        tokens = plan.token_counts[old_entry["id"]]
        assert message["content"] == [{"type": "text",
                                       "text": f"[Output truncated - {tokens} tokens]"}]
        assert isinstance(message["prunedAt"], int)
        assert {k: v for k, v in message.items() if k not in ("content", "prunedAt")} == {
            k: v for k, v in old_entry["message"].items() if k != "content"}
    again = client.prune(sid).wait(30)
    assert isinstance(again, PruneResult) and again.pruned_entry_ids == []
    assert client.sessions.revision(sid) == snap.revision + 1


def _targets(client: CompactionClient, sid: str) -> dict[str, tuple[str, str | None]]:
    """target kind -> (target id, expected destination)."""
    snap = client.sessions.load(sid)
    tree = snap.session.tree()
    path = tree.path_to(snap.leaf_id)
    on_path = {e.id for e in path}
    other_leaf = [e for e in snap.session.entries if e.id not in on_path][-1]
    user = [e for e in path if e.raw.get("message", {}).get("role") == "user"][-2]
    return {"other-branch": (other_leaf.id, other_leaf.id),
            "user-message": (user.id, user.parent_id)}


@pytest.mark.parametrize("kind", ["other-branch", "user-message"])
def test_branch_summary_moves_the_leaf(client: CompactionClient, demo_text: str, kind: str) -> None:
    sid = new_session(client, demo_text)
    old_leaf = client.sessions.load(sid).leaf_id
    target, destination = _targets(client, sid)[kind]
    handle = client.branch_summary(sid, target)
    entry = handle.wait(30)
    assert isinstance(entry, dict) and entry["type"] == "branch_summary"
    assert entry["parentId"] == destination and entry["fromId"] == (destination or "root")
    assert entry["summary"].startswith("Earlier, the user") or entry["summary"]
    snap = client.sessions.load(sid)
    assert snap.leaf_id == entry["id"]
    assert old_leaf in {e.id for e in snap.session.entries}  # the abandoned branch stays stored
    [end] = completions(client, sid, handle.id)
    assert (end.type.value, end.old_leaf_id, end.new_leaf_id) == (
        "session_tree", old_leaf, entry["id"])


def test_branch_summary_to_the_leaf_changes_nothing(client: CompactionClient,
                                                    demo_text: str) -> None:
    sid = new_session(client, demo_text)
    snap = client.sessions.load(sid)
    assert client.branch_summary(sid, str(snap.leaf_id)).wait(30) is None
    assert client.sessions.revision(sid) == snap.revision


def _corrupt_json(client: CompactionClient, sid: str, ids: list[str]) -> None:
    client.redis.hset(client.layout.session(sid).entries, ids[1], '{"type":"message",')


def _cycle(client: CompactionClient, sid: str, ids: list[str]) -> None:
    key = client.layout.session(sid).entries
    first = json.loads(str(client.redis.hget(key, ids[0])))
    client.redis.hset(key, ids[0], json.dumps({**first, "parentId": ids[2]}))


def _dangling(client: CompactionClient, sid: str, ids: list[str]) -> None:
    key = client.layout.session(sid).entries
    entry = json.loads(str(client.redis.hget(key, ids[2])))
    client.redis.hset(key, ids[2], json.dumps({**entry, "parentId": "gone0000"}))


@pytest.mark.parametrize(("damage", "reason", "expected"), [
    (_corrupt_json, "manual", r"redis:{sid}:3: stored JSON is corrupt \("),
    (_cycle, "threshold",
     r"Auto-compaction failed: redis:{sid}:\d+: parentId cycle through entry "),
    (_dangling, "overflow",
     r"Context overflow recovery failed: redis:{sid}:\d+: entry \w+ has parentId 'gone0000'"),
])
def test_bad_session_fails_the_job_and_changes_nothing(
        client: CompactionClient, demo_text: str, damage: Any, reason: str, expected: str) -> None:
    sid = new_session(client, demo_text)
    ids = [e.id for e in client.sessions.load(sid).session.entries]
    if damage is None:
        client.sessions.delete(sid)
    else:
        damage(client, sid, ids)
    rev = client.sessions.revision(sid)
    text = client.sessions.export_jsonl(sid) if damage else None
    handle = client.compact(sid, reason=reason)
    with pytest.raises(JobFailedError) as failure:
        handle.wait(30)
    assert re.match(expected.format(sid=sid), str(failure.value)), str(failure.value)
    assert client.sessions.revision(sid) == rev
    if damage:
        assert client.sessions.export_jsonl(sid) == text
    [end] = completions(client, sid, handle.id)
    assert end.state is not None and end.state.value == "failed" and end.error == str(failure.value)


def test_a_missing_session_is_refused_at_enqueue(client: CompactionClient, demo_text: str) -> None:
    sid = new_session(client, demo_text)
    client.sessions.delete(sid)
    for call in (lambda: client.compact(sid, reason="manual"), lambda: client.prune(sid)):
        with pytest.raises(SessionNotFoundError, match=f"Session {sid} not found$"):
            call()
    assert client.redis.keys(f"*{{{sid}}}*") == []  # no record, no event stream left behind


def test_a_second_delivery_does_nothing(app: CompactorCelery, client: CompactionClient,
                                        demo_text: str) -> None:
    sid = new_session(client, demo_text)
    handle = client.compact(sid, reason="manual")
    # Deliver the same job twice more at once: with two worker threads they may overlap.
    route = route_for(handle.kind)
    extra = [app.send_task(TASK_COMPACT, args=[handle.id], queue=route.queue,
                           task_id=f"dup-{i}-{handle.id}")
             for i in range(2)]
    entry = handle.wait(30)
    # A duplicate that meets the running delivery's lease retries (RETRY) after lease_ttl_s
    # and then ends as a duplicate; one that comes before or after ends at once.
    ends = [DELIVERIES.final(r.id, timeout=30) for r in extra]
    assert [state for state, _ in ends] == ["SUCCESS", "SUCCESS"]
    outcomes = [retval["state"] for _, retval in ends]
    assert set(outcomes) <= {"succeeded", "duplicate"} and outcomes.count("succeeded") <= 1
    assert [e["id"] for e in entries_of_type(client, sid, "compaction")] == [
        entry["id"]]  # type: ignore[index]
    assert len(completions(client, sid, handle.id)) == 1


def test_redelivery_after_commit_finishes_with_the_committed_entry(
        app: CompactorCelery, client: CompactionClient, demo_text: str) -> None:
    """A worker that committed and died before finishing: the next delivery only finishes."""
    sid = new_session(client, demo_text)
    leaf = client.sessions.load(sid).leaf_id
    job = client.jobs.enqueue(sid, "compact", reason="manual").job_id
    JobStore(client.redis, client.settings, client.layout).mark_running(job)
    entry = {"type": "compaction", "timestamp": "2025-03-14T10:00:00.000Z",
             "summary": "from the dead",
             "firstKeptEntryId": str(leaf), "tokensBefore": 1, "fromExtension": False}
    committed = CommitStore(client.redis, client.layout).append_entry(job, leaf, entry,
                                                                      {"tokensBefore": 1})
    delivery = app.send_task(TASK_COMPACT, args=[job], queue="compactor.compact")
    celery_state, result = DELIVERIES.wait(delivery.id, timeout=30)
    assert (celery_state == "SUCCESS" and result["state"] == "succeeded"
            and result["entryId"] == committed.entry_id)
    record = client.jobs.get(job)
    assert record.attempts == 2 and record.entry is not None
    assert record.entry["summary"] == "from the dead"
    assert len(entries_of_type(client, sid, "compaction")) == 1
    assert len(completions(client, sid, job)) == 1


def test_metrics_count_jobs(client: CompactionClient, demo_text: str) -> None:
    import socket
    import time
    import urllib.request

    from worker.observability import metrics

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert metrics.start(port, address="127.0.0.1")
    sid = new_session(client, demo_text)
    client.prune(sid).wait(30)
    sample = 'compactor_jobs_total{kind="prune",outcome="succeeded",reason="none"}'
    deadline = time.monotonic() + 10  # the worker counts the job just after it ends it
    while True:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        if sample in text or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert sample in text


def test_automatic_compaction_with_nothing_to_do_ends_quietly(client: CompactionClient,
                                                             demo_text: str) -> None:
    sid = new_session(client, demo_text)
    client.compact(sid, reason="manual").wait(30)
    client.prune(sid).wait(30)
    rev = client.sessions.revision(sid)
    handle = client.compact(sid, reason="overflow")
    assert handle.wait(30) is None  # already compacted: no entry, no error
    [end] = completions(client, sid, handle.id)
    assert (end.state.value if end.state else None, end.will_retry, end.error) == (
        "succeeded", False, None)
    assert client.sessions.revision(sid) == rev


def large_session_text(turns: int = 40) -> str:
    """A JSONL session of well over PRIME_MIN_CHARS characters (a worker primes its counts)."""
    return turns_jsonl("big", [" ".join(f"word{i}x{j}" for j in range(400))
                               for i in range(2 * turns)])


def test_a_large_sessions_token_counts_are_stored_for_the_next_worker(
        client: CompactionClient) -> None:
    # The real worker's composition wires the shared counts (worker.store.token_counts): the
    # cold job of a session it has not seen writes what it tokenized, with the TTL.
    from worker.tokens import PRIME_MIN_CHARS
    from worker.tokens.cache import content_key

    text = large_session_text()
    assert len(text) > PRIME_MIN_CHARS
    sid = client.sessions.import_jsonl(text)
    client.compact(sid, reason="manual").wait(60)
    key = client.layout.session(sid).token_counts
    stored = client.redis.hgetall(key)
    assert len(stored) > 50 and 0 < client.redis.ttl(key) <= 7 * 86_400
    first_user = json.loads(text.splitlines()[1])["message"]["content"]
    counted = get_tokenizer("tiktoken").count_text(first_user)
    assert stored.get(content_key(first_user).hex()) == str(counted)
    client.sessions.delete(sid)
    assert not client.redis.exists(key)  # deleted with the session
