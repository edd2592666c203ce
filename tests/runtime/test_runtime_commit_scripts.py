"""The worker's conditional commits (Lua) against a real Redis, table-driven."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from api_client import CompactionClient, JobState
from worker.store import CommitStatus, CommitStore
from worker.store.job_lifecycle import JobStore

Mutation = Callable[[CompactionClient, str, list[str]], None]


def msg(text: str, role: str = "user") -> dict[str, object]:
    return {"role": role, "content": [{"type": "text", "text": text}], "timestamp": 1}


@pytest.fixture
def client(redis_url: str) -> Iterator[CompactionClient]:
    with CompactionClient(redis_url) as c:
        yield c


@pytest.fixture
def setup(client: CompactionClient) -> tuple[str, list[str], str, CommitStore]:
    """A session of four messages and a running compaction job on it."""
    sid = client.sessions.create("s1")
    ids = [client.sessions.append(sid, msg(f"m{i}")) for i in range(4)]
    job = client.jobs.enqueue(sid, "compact", reason="manual").job_id
    assert JobStore(client.redis, client.settings, client.layout).mark_running(job) == 1
    return sid, ids, job, CommitStore(client.redis, client.layout)


def _effect(c: CompactionClient, job: str) -> str | None:
    """The job's exactly-once marker: its record's ``effect`` (None: not committed)."""
    return c.jobs.get(job).effect


def _nothing(c: CompactionClient, sid: str, ids: list[str]) -> None:
    return None


def _append_two(c: CompactionClient, sid: str, ids: list[str]) -> None:
    c.sessions.append(sid, msg("agent 1"))
    c.sessions.append(sid, msg("agent 2", "assistant"))


def _append_compaction(c: CompactionClient, sid: str, ids: list[str]) -> None:
    c.sessions.append(sid, {"type": "compaction", "summary": "x", "firstKeptEntryId": ids[2],
                            "tokensBefore": 1})


def _other_branch(c: CompactionClient, sid: str, ids: list[str]) -> None:
    c.sessions.navigate(sid, ids[1])
    c.sessions.append(sid, msg("edited question"))


def _reset(c: CompactionClient, sid: str, ids: list[str]) -> None:
    c.sessions.navigate(sid, None)


def _cancel(c: CompactionClient, sid: str, ids: list[str]) -> None:
    job = c.redis.get(c.layout.session(sid).inflight("compact"))
    assert c.jobs.request_cancel(str(job)) is JobState.RUNNING


def _finished(c: CompactionClient, sid: str, ids: list[str]) -> None:
    job = c.redis.get(c.layout.session(sid).inflight("compact"))
    assert c.jobs.finish(str(job), "failed", error="elsewhere")


def _descendant(c: CompactionClient, sid: str, ids: list[str]) -> None:
    # The snapshot leaf had a child already (the agent had navigated back); going there is fine.
    c.sessions.navigate(sid, ids[3])


@pytest.mark.parametrize(("mutate", "snapshot_at", "expected", "parent_is_new_leaf"), [
    (_nothing, 3, CommitStatus.COMMITTED, True),
    (_append_two, 3, CommitStatus.COMMITTED, True),
    (_descendant, 2, CommitStatus.COMMITTED, True),
    (_append_compaction, 3, CommitStatus.STALE, False),
    (_other_branch, 3, CommitStatus.STALE, False),
    (_reset, 3, CommitStatus.STALE, False),
    (_cancel, 3, CommitStatus.CANCELLED, False),
    (_finished, 3, CommitStatus.FINISHED, False),
])
def test_append_entry_is_conditional(client: CompactionClient,
                                     setup: tuple[str, list[str], str, CommitStore],
                                     mutate: Mutation, snapshot_at: int, expected: CommitStatus,
                                     parent_is_new_leaf: bool) -> None:
    sid, ids, job, commits = setup
    mutate(client, sid, ids)
    before_rev, before_text = client.sessions.revision(sid), client.sessions.export_jsonl(sid)
    leaf_before = client.sessions.load(sid).leaf_id
    entry = {"type": "compaction", "timestamp": "2025-01-01T00:00:00.000Z", "summary": "S",
             "firstKeptEntryId": ids[2], "tokensBefore": 5, "fromExtension": False}
    outcome = commits.append_entry(job, ids[snapshot_at], entry, {"k": 1})
    assert outcome.status is expected
    after = client.sessions.load(sid)
    if expected is CommitStatus.COMMITTED:
        assert outcome.entry is not None and outcome.entry["parentId"] == leaf_before
        assert after.leaf_id == outcome.entry_id and after.revision == before_rev + 1
        assert client.sessions.export_jsonl(sid).startswith(before_text)  # nothing lost
        assert _effect(client, job) == outcome.entry_id
        assert parent_is_new_leaf
    else:
        assert after.revision == before_rev
        assert client.sessions.export_jsonl(sid) == before_text
        assert _effect(client, job) is None


def test_second_commit_of_a_job_returns_the_first_entry(
        setup: tuple[str, list[str], str, CommitStore], client: CompactionClient) -> None:
    sid, ids, job, commits = setup
    entry = {"type": "compaction", "timestamp": "t", "summary": "S", "firstKeptEntryId": ids[1],
             "tokensBefore": 5}
    first = commits.append_entry(job, ids[3], entry, {})
    text = client.sessions.export_jsonl(sid)
    second = commits.append_entry(job, first.entry_id, {**entry, "summary": "other"}, {})
    assert (first.status, second.status) == (CommitStatus.COMMITTED, CommitStatus.DUPLICATE)
    assert second.entry_id == first.entry_id
    assert client.sessions.export_jsonl(sid) == text


def test_the_marker_is_written_in_the_record_and_nothing_else_of_the_session(
        setup: tuple[str, list[str], str, CommitStore], client: CompactionClient) -> None:
    """A first attempt's commit writes its marker in the record, with its result: no
    ``effects`` hash nor ``effects:at`` set of the session (older versions' marker)."""
    sid, ids, job, commits = setup
    entry = {"type": "compaction", "timestamp": "t", "summary": "S", "firstKeptEntryId": ids[1],
             "tokensBefore": 5}
    done = commits.append_entry(job, ids[3], entry, {"k": 1})
    record = client.redis.hgetall(client.layout.job(job).record)
    assert record["effect"] == done.entry_id and record["result"] == '{"k":1}'
    k = client.layout.session(sid)
    assert client.redis.exists(k.effects, k.effects_at) == 0


def test_an_older_versions_marker_is_read_on_a_redelivery_only(
        setup: tuple[str, list[str], str, CommitStore], client: CompactionClient) -> None:
    """A worker of an older version kept the marker in the session's ``effects`` hash: a
    redelivery (attempts > 1) of a job it committed is a duplicate; a first attempt, which no
    delivery can have committed before, does not read it."""
    sid, ids, job, commits = setup
    k = client.layout.session(sid)
    client.redis.hset(k.effects, job, ids[3])  # as an older worker's commit left it
    entry = {"type": "compaction", "timestamp": "t", "summary": "S", "firstKeptEntryId": ids[1],
             "tokensBefore": 5}
    jobs = JobStore(client.redis, client.settings, client.layout)
    assert jobs.mark_running(job) == 2
    again = commits.append_entry(job, ids[3], entry, {})
    assert (again.status, again.entry_id) == (CommitStatus.DUPLICATE, ids[3])
    assert client.sessions.load(sid).leaf_id == ids[3]
    assert jobs.mark_running(job, attempt=1) == 1
    first = commits.append_entry(job, ids[3], entry, {})
    assert first.status is CommitStatus.COMMITTED


def test_walk_limit_makes_a_long_walk_stale(client: CompactionClient,
                                            setup: tuple[str, list[str], str, CommitStore]) -> None:
    sid, ids, job, _ = setup
    _append_two(client, sid, ids)
    short = CommitStore(client.redis, client.layout, walk_limit=1)
    entry = {"type": "compaction", "timestamp": "t", "summary": "S", "firstKeptEntryId": ids[1],
             "tokensBefore": 5}
    assert short.append_entry(job, ids[3], entry, {}).status is CommitStatus.STALE


def _lines(client: CompactionClient, sid: str, ids: list[str]) -> list[str]:
    return [str(line) for line in client.redis.hmget(client.layout.session(sid).entries, ids)]


def _rewrites_counter(client: CompactionClient, sid: str) -> int:
    return int(client.redis.get(client.layout.session(sid).rewrites) or 0)


@pytest.mark.parametrize("tamper", [None, "another prune", "an import"])
def test_rewrite_is_all_or_nothing(client: CompactionClient,
                                   setup: tuple[str, list[str], str, CommitStore],
                                   tamper: str | None) -> None:
    sid, ids, job, commits = setup
    targets = ids[:2]
    seen = _rewrites_counter(client, sid)  # what the plan read the lines at
    rewrites = [(i, line.replace('"text":"m', '"text":"pruned m'))
                for i, line in zip(targets, _lines(client, sid, targets), strict=True)]
    if tamper == "another prune":  # another job rewrote a line after the plan read it
        other = client.jobs.enqueue(sid, "prune").job_id
        assert JobStore(client.redis, client.settings, client.layout).mark_running(other) == 1
        edited = [(ids[1], _lines(client, sid, ids[1:2])[0].replace("m1", "other"))]
        assert commits.rewrite(other, edited, {}, rewrites_seen=seen).applied
    elif tamper == "an import":  # the session replaced by the same ids and lines
        client.sessions.import_jsonl(client.sessions.export_jsonl(sid), session_id=sid,
                                     replace=True)
    before = client.sessions.export_jsonl(sid)
    outcome = commits.rewrite(job, rewrites, {"prunedEntryIds": targets, "tokensSaved": 1},
                              rewrites_seen=seen, pruned_through=targets[-1])
    after = client.sessions.export_jsonl(sid)
    k = client.layout.session(sid)
    if tamper is None:
        assert outcome.status is CommitStatus.COMMITTED
        assert after.count('"pruned m') == 2 and _effect(client, job) == ""
        assert client.redis.get(k.pruned) == targets[-1]
        assert _rewrites_counter(client, sid) == seen + 1
    else:
        assert outcome.status is CommitStatus.STALE and after == before
        assert _effect(client, job) is None and client.redis.get(k.pruned) is None


def test_a_large_rewrite_goes_in_steps_that_apply_as_one(
        client: CompactionClient, setup: tuple[str, list[str], str, CommitStore],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Many lines go in bounded steps; meanwhile the rewriting marker turns other rewrites
    away (busy: nothing written), and a step that finds the marker gone stops (stale)."""
    from worker.store import _commits

    sid, ids, job, commits = setup
    monkeypatch.setattr(_commits, "REWRITE_STEP_LINES", 1)
    k = client.layout.session(sid)
    seen = _rewrites_counter(client, sid)
    rewrites = [(i, line.replace('"text":"m', '"text":"pruned m'))
                for i, line in zip(ids, _lines(client, sid, ids), strict=True)]
    other = client.jobs.enqueue(sid, "prune").job_id
    assert JobStore(client.redis, client.settings, client.layout).mark_running(other) == 1
    calls: list[str] = []
    run = commits._call_script

    def step(script: object, keys: list[str], args: list[str]) -> object:
        calls.append(args[3])
        if args[3] == "more" and calls.count("more") == 1:  # half-way: another job tries
            busy = commits.rewrite(other, rewrites[:1], {}, rewrites_seen=seen + 1)
            assert busy.status is CommitStatus.BUSY
            assert client.redis.get(k.rewriting) == job
        return run(script, keys, args)

    monkeypatch.setattr(commits, "_call_script", step)
    outcome = commits.rewrite(job, rewrites, {"prunedEntryIds": ids, "tokensSaved": 1},
                              rewrites_seen=seen, pruned_through=ids[-1])
    assert outcome.status is CommitStatus.COMMITTED
    assert [c for c in calls if c != "all"] == ["begin", "more", "more", "end"]
    assert client.sessions.export_jsonl(sid).count('"pruned m') == 4
    assert client.redis.get(k.rewriting) is None and client.redis.get(k.pruned) == ids[-1]
    assert _effect(client, job) == "" and _effect(client, other) is None

    # A step that finds the marker gone (its TTL lapsed, the session replaced) stops there.
    def lapsed(script: object, keys: list[str], args: list[str]) -> object:
        if args[3] == "more":
            client.redis.delete(k.rewriting)
        return run(script, keys, args)

    monkeypatch.setattr(commits, "_call_script", lapsed)
    assert commits.rewrite(other, rewrites, {}, rewrites_seen=seen + 1).status is (
        CommitStatus.STALE)
    assert _effect(client, other) is None


def test_branch_commit_requires_the_snapshot_leaf(
        client: CompactionClient, setup: tuple[str, list[str], str, CommitStore]) -> None:
    sid, ids, job, commits = setup
    entry = {"type": "branch_summary", "timestamp": "t", "fromId": ids[1], "summary": "B"}
    client.sessions.append(sid, msg("late"))
    text = client.sessions.export_jsonl(sid)
    assert commits.branch(job, ids[3], ids[1], entry, {}).status is CommitStatus.STALE
    assert client.sessions.export_jsonl(sid) == text
    leaf = client.sessions.load(sid).leaf_id
    done = commits.branch(job, leaf, ids[1], entry, {})
    assert done.status is CommitStatus.COMMITTED and done.entry is not None
    assert done.entry["parentId"] == ids[1]
    assert client.sessions.load(sid).leaf_id == done.entry_id
