"""What a compaction or branch summary reserves of its tenant's model budget at admission
(``lua/_admit.lua``, api_client/contract/reservations.py), read from the reserved hash of a
real Redis with no worker (nothing replaces the admission's estimate).

Before: a flat 2 048 tokens whatever the session. Now the session's stored bytes / 4 (its
field of the tenant's bytes count, one read in the admission's step: the session is not
walked), at most the request's context window (else 128 000), plus a summary's output budget
(13 107); a session its tenant's count does not know (an inbox tenant's) still the flat 2 048.
Only a tenant with a daily budget reserves: with none nothing would read the reservation.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from api_client import ClientSettings, CompactionClient
from api_client.contract.reservations import (
    COMPACTION_ESTIMATE_TOKENS,
    COMPACTION_WINDOW_DEFAULT,
    SUMMARY_OUTPUT_DEFAULT,
)

TEXT = "x" * 40_000  # one entry of ~40 kB
BUDGET = 10_000_000  # tokens a day: far more than any job here reserves


@pytest.fixture
def acme(redis_url: str, raw: redis.Redis[str]) -> Iterator[CompactionClient]:
    """Tenant acme, with a daily budget (what reservations are for)."""
    with CompactionClient(ClientSettings(redis_url=redis_url, send_sent_event=False),
                          tenant="acme") as client:
        raw.hset(client.layout.tenant_quota("acme"), "tokens_per_day", BUDGET)
        yield client


def _session(client: CompactionClient, name: str, entries: int) -> str:
    sid = client.sessions.create(name)
    for i in range(entries):
        client.sessions.append(sid, {"role": "user", "content": f"{i} {TEXT}", "timestamp": 1})
    return sid


def _first_entry(client: CompactionClient, sid: str) -> str:
    return str(client.sessions.load(sid).session.entries[0].id)


def _reserved(raw: redis.Redis[str], client: CompactionClient, job_id: str) -> int:
    field = raw.hget(client.layout.tenant_reserved("acme"), job_id)
    assert field is not None, "nothing reserved"
    return int(field.split()[0])


def _stored(raw: redis.Redis[str], client: CompactionClient, sid: str) -> int:
    return int(raw.hget(client.layout.tenant_bytes("acme"), sid) or 0)


def test_a_compaction_reserves_its_sessions_span_and_its_output(
        acme: CompactionClient, raw: redis.Redis[str]) -> None:
    sid = _session(acme, "small", 3)
    stored = _stored(raw, acme, sid)
    assert 120_000 < stored < 130_000
    job = acme.compact(sid)
    assert _reserved(raw, acme, job.id) == -(-stored // 4) + SUMMARY_OUTPUT_DEFAULT
    branch = acme.branch_summary(sid, _first_entry(acme, sid))
    assert _reserved(raw, acme, branch.id) == -(-stored // 4) + SUMMARY_OUTPUT_DEFAULT


def test_the_span_is_at_most_the_window(acme: CompactionClient, raw: redis.Redis[str]) -> None:
    sid = _session(acme, "long", 14)  # ~560 kB: ~140 000 tokens by the estimate
    assert _stored(raw, acme, sid) // 4 > COMPACTION_WINDOW_DEFAULT
    job = acme.compact(sid)
    assert _reserved(raw, acme, job.id) == COMPACTION_WINDOW_DEFAULT + SUMMARY_OUTPUT_DEFAULT
    job.cancel()
    narrow = acme.compact(sid, context_window=32_000)
    assert _reserved(raw, acme, narrow.id) == 32_000 + SUMMARY_OUTPUT_DEFAULT


def test_a_broker_of_its_own_admits_with_the_same_estimate(
        redis_url: str, raw: redis.Redis[str], own_redis: Any) -> None:
    """admit.lua (the broker elsewhere) reads the same count as the enqueue script."""
    settings = ClientSettings(redis_url=redis_url, broker_url=own_redis.url,
                              send_sent_event=False)
    with CompactionClient(settings, tenant="acme") as client:
        raw.hset(client.layout.tenant_quota("acme"), "tokens_per_day", BUDGET)
        sid = _session(client, "elsewhere", 2)
        job = client.compact(sid)
        assert _reserved(raw, client, job.id) == (-(-_stored(raw, client, sid) // 4)
                                                  + SUMMARY_OUTPUT_DEFAULT)


def test_a_session_the_count_does_not_know_reserves_the_flat_estimate(
        acme: CompactionClient, raw: redis.Redis[str]) -> None:
    sid = _session(acme, "uncounted", 1)
    raw.hdel(acme.layout.tenant_bytes("acme"), sid)  # as an inbox tenant's: never counted
    job = acme.compact(sid)
    assert _reserved(raw, acme, job.id) == COMPACTION_ESTIMATE_TOKENS


def _hgetalls(raw: redis.Redis[str]) -> int:
    stats = raw.info("commandstats").get("cmdstat_hgetall")
    return int(stats["calls"]) if stats else 0


def test_with_a_budget_an_admission_reads_the_reservations_once(
        acme: CompactionClient, raw: redis.Redis[str]) -> None:
    """A tenant with 200 jobs' reservations held: its next admission reads them once (what the
    budget counts as spent), drops the expired ones and writes its own."""
    reserved = acme.layout.tenant_reserved("acme")
    raw.hset(reserved, mapping={f"acme:job-{i}": f"100 {2 ** 50} -" for i in range(200)})
    raw.hset(reserved, "acme:lost", "100 1 -")  # a job lost before its end: its time is up
    sid = _session(acme, "walk", 1)
    before = _hgetalls(raw)
    job = acme.compact(sid)
    assert _hgetalls(raw) - before == 1
    assert _reserved(raw, acme, job.id) == -(-_stored(raw, acme, sid) // 4) \
        + SUMMARY_OUTPUT_DEFAULT
    assert not raw.hexists(reserved, "acme:lost") and raw.hlen(reserved) == 201


def test_with_no_budget_an_admission_reserves_nothing_and_reads_nothing_of_them(
        redis_url: str, raw: redis.Redis[str]) -> None:
    """No daily budget: nothing would read a reservation, so none is written and the tenant's
    held ones (a flood's, or left from a budget since removed) are not looked at: 4 commands
    an enqueue less, and no walk however many are held."""
    settings = ClientSettings(redis_url=redis_url, send_sent_event=False)
    with CompactionClient(settings, tenant="acme") as client:
        reserved = client.layout.tenant_reserved("acme")
        held: dict[str | bytes, str] = {f"acme:job-{i}": f"100 {2 ** 50} -" for i in range(200)}
        raw.hset(reserved, mapping={**held, "acme:lost": "100 1 -"})
        sid = _session(client, "free", 1)
        before = raw.info("commandstats")
        job = client.compact(sid)
        after = raw.info("commandstats")
    touched = {name: after[name]["calls"] - before.get(name, {"calls": 0})["calls"]
               for name in ("cmdstat_hgetall", "cmdstat_hrandfield", "cmdstat_hscan")
               if name in after}
    assert not any(touched.values()), touched
    assert not raw.hexists(reserved, job.id) and raw.hlen(reserved) == 201
