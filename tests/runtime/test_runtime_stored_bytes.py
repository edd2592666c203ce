"""The stored-bytes quota from the worker's and the operator's side, on a real Redis: the
worker's commits keep the tenant's count (and are never refused by the quota), the reconcile
drops the counts of sessions that expired, and ``compactor tenant quota|show`` sets and shows
the overrides the client then obeys."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

import pytest
import redis

from api_client import ClientSettings, CompactionClient, QuotaExceededError
from api_client.contract.keys import KeyLayout
from api_client.contract.lua_scripts import lua
from api_client.contract.stored_bytes import BYTES_TOTAL
from worker.cli import main
from worker.store import CommitStatus, CommitStore, _commits
from worker.store.job_lifecycle import JobStore
from worker.store.tenant_bytes import BytesReconciler


def msg(text: str, role: str = "user") -> dict[str, object]:
    return {"role": role, "content": [{"type": "text", "text": text}], "timestamp": 1}


def held(c: CompactionClient, sid: str) -> int:
    """Bytes of the session's lines as Redis holds them, its header's included."""
    keys = c.layout.session(sid)
    header = len((c.redis.get(keys.header) or "").encode())
    return header + sum(len(line.encode()) for line in c.redis.hvals(keys.entries))


def counts(r: redis.Redis[str], layout: KeyLayout, tenant: str) -> dict[str, int]:
    return {k: int(v) for k, v in r.hgetall(layout.tenant_bytes(tenant)).items()}


def counted(c: CompactionClient, sid: str) -> int:
    """The session's count, checked against what Redis holds and against the total."""
    found = counts(c.redis, c.layout, "acme")
    assert found[BYTES_TOTAL] == sum(v for k, v in found.items() if k != BYTES_TOTAL)
    assert found[sid] == held(c, sid)
    return found[sid]


@pytest.fixture
def acme(redis_url: str) -> Iterator[CompactionClient]:
    with CompactionClient(redis_url, tenant="acme") as c:
        yield c


def _pruned(line: str | None) -> str:
    entry = json.loads(line or "{}")
    entry["message"]["content"][0]["text"] = "[pruned]"
    return json.dumps(entry, separators=(",", ":"))


def _running_job(c: CompactionClient, sid: str, kind: str = "compact") -> str:
    job = c.jobs.enqueue(sid, kind, reason="manual" if kind == "compact" else None).job_id
    assert JobStore(c.redis, c.settings, c.layout).mark_running(job) == 1
    return job


@pytest.mark.parametrize("cluster", [False, True], ids=["in the script", "a command apart"])
def test_the_worker_commits_keep_the_count_over_the_quota(
        acme: CompactionClient, cluster: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    worker_layout = KeyLayout(acme.settings.key_prefix, None)  # the worker's: every tenant
    # cluster: the count as on a Cluster, by stored_bytes.lua after each commit
    commits = CommitStore(acme.redis, worker_layout, cluster=cluster)
    sid = acme.sessions.create("w1")
    ids = acme.sessions.append_many(sid, [msg(f"tool output {i} " * 30) for i in range(4)])
    start = counted(acme, sid)
    acme.redis.hset(acme.layout.tenant_quota("acme"), "stored_bytes_max", 1)  # far over it
    job = _running_job(acme, sid)
    entry = {"type": "compaction", "timestamp": "t", "summary": "S" * 500,
             "firstKeptEntryId": ids[2], "tokensBefore": 9}
    outcome = commits.append_entry(job, ids[-1], entry, {})
    assert outcome.status is CommitStatus.COMMITTED
    assert counted(acme, sid) > start + 500
    again = commits.append_entry(job, ids[-1], entry, {})  # a duplicate delivery: no change
    assert again.status is CommitStatus.DUPLICATE
    grown = counted(acme, sid)
    # A prune in steps, one line each: each step counts its new lines less the old.
    monkeypatch.setattr(_commits, "REWRITE_STEP_LINES", 1)
    prune = _running_job(acme, sid, "prune")
    rewrites = [(i, _pruned(acme.redis.hget(acme.layout.session(sid).entries, i)))
                for i in ids[:3]]
    seen = int(acme.redis.get(acme.layout.session(sid).rewrites) or 0)
    assert commits.rewrite(prune, rewrites, {}, rewrites_seen=seen).applied
    assert counted(acme, sid) < grown
    with pytest.raises(QuotaExceededError):  # the client's appends are still refused
        acme.sessions.append(sid, msg("agent"))


def test_a_branch_summary_commit_counts_its_entry(acme: CompactionClient) -> None:
    commits = CommitStore(acme.redis, KeyLayout(acme.settings.key_prefix, None))
    sid = acme.sessions.create("b1")
    ids = acme.sessions.append_many(sid, [msg("a"), msg("b", "assistant"), msg("c")])
    job = acme.jobs.enqueue(sid, "branch_summary", target_id=ids[0]).job_id
    assert JobStore(acme.redis, acme.settings, acme.layout).mark_running(job) == 1
    before = counted(acme, sid)
    entry = {"type": "branch_summary", "timestamp": "t", "fromId": ids[2], "summary": "B" * 300}
    assert commits.branch(job, ids[2], ids[0], entry, {}).status is CommitStatus.COMMITTED
    assert counted(acme, sid) > before + 300


def test_the_reconcile_drops_the_counts_of_expired_sessions(redis_url: str) -> None:
    short = ClientSettings(redis_url=redis_url, tenant="acme", session_ttl_s=1)
    with CompactionClient(short) as fleeting, CompactionClient(redis_url, tenant="acme") as acme:
        fleeting.sessions.create("gone")
        fleeting.sessions.append("gone", msg("x" * 300))
        acme.sessions.create("kept")
        acme.sessions.append("kept", msg("y" * 100))
        header = acme.layout.session("gone").header
        deadline = time.monotonic() + 5
        while acme.redis.exists(header) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not acme.redis.exists(header)  # expired (retention), not deleted by a script
        assert set(counts(acme.redis, acme.layout, "acme")) == {"gone", "kept", BYTES_TOTAL}
        reconciler = BytesReconciler(acme.redis, acme.settings.key_prefix)
        assert reconciler.tenants() == ["acme"]
        assert reconciler.run_pass() == 1
        assert counts(acme.redis, acme.layout, "acme") == {
            "kept": held(acme, "kept"), BYTES_TOTAL: held(acme, "kept")}
        assert reconciler.run_pass() == 0


def test_a_count_that_changed_since_the_pass_read_it_stays(acme: CompactionClient) -> None:
    key = acme.layout.tenant_bytes("acme")
    acme.sessions.create("again")  # made again after the pass saw it gone
    acme.sessions.append("again", msg("z"))
    now = str(counts(acme.redis, acme.layout, "acme")["again"])
    drop = acme.redis.register_script(lua("stored_bytes"))
    assert drop(keys=[key], args=["drop", "again", "7"]) == 0  # the value the pass read
    assert counts(acme.redis, acme.layout, "acme")["again"] == int(now)
    assert drop(keys=[key], args=["drop", "again", now]) == 1
    assert counts(acme.redis, acme.layout, "acme") == {BYTES_TOTAL: 0}


Cli = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(redis_url: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> Iterator[Cli]:
    for name in ("COMPACTOR_REDIS_URL", "COMPACTOR_KEY_PREFIX", "COMPACTOR_STORED_BYTES_MAX",
                 "COMPACTOR_QUEUED_JOBS_MAX", "COMPACTOR_WEIGHT"):
        monkeypatch.delenv(name, raising=False)

    def run(*argv: str) -> tuple[int, str, str]:
        try:
            code = main([*argv, "--redis-url", redis_url])
        except SystemExit as exited:  # argparse refusing a value
            code = int(exited.code or 0)
        out, err = capsys.readouterr()
        return code, out, err

    yield run


def test_a_quota_set_by_the_cli_takes_effect(cli: Cli, acme: CompactionClient) -> None:
    acme.sessions.create("c1")
    acme.sessions.append("c1", msg("x" * 200))
    stored = held(acme, "c1")
    code, out, err = cli("tenant", "quota", "acme", "--stored-bytes", str(stored + 10),
                         "--weight", "2.5", "--queued-jobs", "3")
    assert (code, err) == (0, "")
    assert f"stored_bytes_max {stored + 10} (override; default 0)" in out.splitlines()
    with pytest.raises(QuotaExceededError) as refused:
        acme.sessions.append("c1", msg("y" * 100))
    assert refused.value.limit == stored + 10
    acme.compact("c1", reason="manual")  # one queued job
    code, out, _ = cli("tenant", "show", "acme", "--json")
    shown = json.loads(out)
    assert code == 0 and shown["storedBytes"] == stored and shown["queuedJobs"] == 1
    assert shown["quotas"]["weight"] == {"effective": 2.5, "override": 2.5, "default": 1.0}
    assert shown["quotas"]["tokens_per_day"] == {"effective": 0, "override": None, "default": 0}
    code, out, _ = cli("tenant", "quota", "acme", "--clear", "stored-bytes", "--clear",
                       "queued_jobs_max")
    assert code == 0 and "stored_bytes_max 0 (default)" in out.splitlines()
    assert acme.redis.hgetall(acme.layout.tenant_quota("acme")) == {"weight": "2.5"}
    acme.sessions.append("c1", msg("y" * 100))  # no limit again
    assert json.loads(cli("tenant", "show", "globex", "--json")[1])["storedBytes"] == 0


@pytest.mark.parametrize("argv", [
    ["--stored-bytes", "-1"], ["--queued-jobs", "2.5"], ["--usd-per-day", "nan"],
    ["--weight", "0"], ["--tokens-per-day", "many"], ["--clear", "colour"],
])
def test_the_cli_refuses_bad_values(cli: Cli, redis_url: str, argv: list[str]) -> None:
    code, _, err = cli("tenant", "quota", "acme", *argv)
    assert code == 2 and "error" in err
    assert redis.Redis.from_url(redis_url).exists("compactor:tenants:{acme}:quota") == 0


def test_the_cli_refuses_a_bad_tenant_and_a_set_and_clear(cli: Cli) -> None:
    assert cli("tenant", "show", "Acme!")[0] == 2
    code, _, err = cli("tenant", "quota", "acme", "--weight", "2", "--clear", "weight")
    assert code == 2 and err.startswith("compactor: error: --clear weight")
