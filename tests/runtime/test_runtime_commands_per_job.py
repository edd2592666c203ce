"""Redis does what a job needs (docs/benchmarks.md, "Redis commands per job"): the commands one
manual compaction costs end to end (the client's enqueue and wait, the worker's claim, reads,
events, commit and finish, the broker's messages), counted by ``INFO commandstats`` on the
module's own Redis (commands inside scripts included), less what the idle worker sends in the
same time; and no command that walks a whole session on the job path."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import pytest
import redis
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import new_session, runtime_settings

from api_client import CompactionClient
from api_client.contract.keys import KeyLayout
from api_client.contract.session import Entry
from helpers.sessions import assistant, turns_jsonl, user
from helpers.waits import wait_until
from worker.settings import WorkerSettings
from worker.store import paths
from worker.store.paths import PathStore

JOBS = 4
# Was ~300, then 147, 106-108 at issue 42's earlier rounds; 90-91 measured now (docs/benchmarks.md,
# "Redis commands per job", by phase: the job's start, load and end one script each on one
# Redis, the exactly-once marker in the record, a record read with its entry in one script).
# The goal is 60: not reached. The bound leaves ~7 % for the idle worker's polls, which
# are estimated and subtracted, not counted (a loaded machine makes the jobs and so that
# estimate longer).
MOST_COMMANDS = 97


@pytest.fixture(scope="module")
def worker_settings(module_redis: str, model: ModelServer) -> WorkerSettings:
    return runtime_settings(module_redis, models=[model.candidate()])


def turns(count: int = 40) -> str:
    """A session of plain user/assistant turns (80 entries, no tools)."""
    return turns_jsonl("cmds", [f"turn {i} " + "the parser splits amounts by locale " * 12
                                for i in range(2 * count)])


def commandstats(raw: redis.Redis[str]) -> dict[str, int]:
    return {name: int(v["calls"]) for name, v in raw.info("commandstats").items()}


def calls(raw: redis.Redis[str]) -> int:
    return sum(commandstats(raw).values())


def settled(raw: redis.Redis[str], layout: KeyLayout) -> Callable[[], bool]:
    """No task message left unacknowledged: the worker is done with every job."""
    return lambda: raw.hlen(f"{layout.broker}unacked") == 0


def idle_rate(raw: redis.Redis[str], seconds: float) -> float:
    """Commands a second the idle worker (heartbeat, broker polls) and this measuring send."""
    before, started = calls(raw), time.monotonic()
    deadline = started + seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)
    return (calls(raw) - before) / (time.monotonic() - started)


def test_one_compaction_job_costs_at_most_its_commands(
        client: CompactionClient, module_redis: str) -> None:
    raw = redis.Redis.from_url(module_redis, decode_responses=True)
    text = turns()
    warm = new_session(client, text)
    client.compact(warm, reason="manual").wait(60)  # scripts loaded, pools and models warm
    sids = [new_session(client, text) for _ in range(JOBS)]
    wait_until(settled(raw, client.layout), what="the warm-up job acknowledged")
    idle = idle_rate(raw, 1.0)
    before, stats, started = calls(raw), commandstats(raw), time.monotonic()
    for sid in sids:
        handle = client.compact(sid, reason="manual")
        handle.wait(60)
        assert handle.record().state.value == "succeeded"
    wait_until(settled(raw, client.layout), what="every job acknowledged")
    elapsed = time.monotonic() - started
    per_job = (calls(raw) - before - idle * elapsed) / JOBS
    after = commandstats(raw)
    grown = {name: after[name] - stats.get(name, 0) for name in after
             if after[name] != stats.get(name, 0)}
    print(f"commands per compaction job: {per_job:.1f} (idle {idle:.1f}/s): {grown}")
    assert per_job <= MOST_COMMANDS, grown
    # nothing on the job path reads a whole session in one command
    assert "cmdstat_memory" not in grown
    assert grown.get("cmdstat_hget", 0) < 10 * JOBS  # not one HGET an entry of the path
    # the retention looks only at the keys a write may have made (the header's instant, the
    # enqueue, the first event, the commit and the end): not every key of the session
    assert grown.get("cmdstat_pttl", 0) <= 7 * JOBS, grown


def _never(path: Sequence[Entry], pruned: str | None) -> bool:
    return False


def _path_read(client: CompactionClient, raw: redis.Redis[str],
               sid: str) -> tuple[list[str], list[str], int]:
    """(the path a job reads, the path a full load gives, commands the read cost)."""
    before = calls(raw)
    snap = PathStore(client.redis, client.layout).load_path(sid, _never)
    spent = calls(raw) - before - 1  # INFO's own
    full = client.sessions.load(sid)
    expected = full.session.tree().path_to(full.leaf_id)
    assert snap.complete and snap.leaf_id == full.leaf_id
    return [e.id for e in snap.path], [e.id for e in expected], spent


def test_a_path_without_branches_is_read_in_a_few_commands(
        client: CompactionClient, module_redis: str, monkeypatch: pytest.MonkeyPatch) -> None:
    raw = redis.Redis.from_url(module_redis, decode_responses=True)
    sid = client.sessions.create()
    client.sessions.append_many(sid, [m for n in range(300) for m in (user(f"q{n}"),
                                                                      assistant(f"a{n}"))])
    read, expected, spent = _path_read(client, raw, sid)
    assert read == expected and len(read) == 600
    # 2 pages (500 lines a page): runs of 16, 64, 256, ... lines, two commands a run,
    # and the MGET of the leaf: not one HGET an entry
    print(f"path of {len(read)} entries read in {spent} commands")
    assert spent <= 30, spent
    monkeypatch.setattr(paths, "PAGE_BYTES", 2_000)  # many small pages: still the same path
    read, expected, _ = _path_read(client, raw, sid)
    assert read == expected


def test_a_branched_path_leaves_the_order_list_and_is_still_the_path(
        client: CompactionClient, module_redis: str) -> None:
    raw = redis.Redis.from_url(module_redis, decode_responses=True)
    sid = client.sessions.create()
    ids = client.sessions.append_many(sid, [m for n in range(20) for m in (user(f"q{n}"),
                                                                           assistant(f"a{n}"))])
    client.sessions.navigate(sid, ids[9])  # a fork: the new entries' parent is entry 9
    client.sessions.append_many(sid, [user("other"), assistant("branch")])
    read, expected, _ = _path_read(client, raw, sid)
    assert read == expected == [*ids[:10], *read[10:]] and len(read) == 12
    client.sessions.navigate(sid, ids[30])  # the leaf is no longer order's last entry
    read, expected, _ = _path_read(client, raw, sid)
    assert read == expected == ids[:31]
