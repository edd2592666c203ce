"""What counting a job's spend sends to Redis (worker/store/tenant_usage.py,
api_client/contract/usage.py): the counters every time; the day's TTL and the tenant's name in
the tenants set once an hour per process, not once a job; no increment of 0 USD."""

from __future__ import annotations

import time

import redis

from api_client.contract.keys import KeyLayout
from api_client.contract.usage import USAGE_TTL_S, utc_day
from worker.store.tenant_usage import TenantUsageStore


def test_a_jobs_spend_keeps_the_day_and_names_the_tenant_once_an_hour(redis_url: str) -> None:
    raw = redis.Redis.from_url(redis_url, decode_responses=True)
    layout = KeyLayout()
    store, at = TenantUsageStore(raw, layout), time.time()
    key = layout.tenant_usage("acme", utc_day(at))
    raw.config_resetstat()
    for _ in range(3):
        store.add("acme", at, input_tokens=10, output_tokens=2, usd=0.0, draft=False,
                  ended=True)
    stats = raw.info("commandstats")
    assert stats["cmdstat_expire"]["calls"] == 1 and stats["cmdstat_sadd"]["calls"] == 1
    assert "cmdstat_hincrbyfloat" not in stats  # 0 USD adds nothing
    assert raw.hgetall(key) == {"jobs": "3", "input_tokens": "30", "output_tokens": "6"}
    assert 0 < raw.ttl(key) <= USAGE_TTL_S and raw.smembers(layout.tenants) == {"acme"}
    store.add("acme", at, input_tokens=1, output_tokens=1, usd=0.25, draft=False, ended=True)
    assert raw.hget(key, "usd") == "0.25"
    TenantUsageStore(raw, layout).add("acme", at, input_tokens=1, output_tokens=1, usd=0.0,
                                      draft=False, ended=False)  # another process
    assert raw.info("commandstats")["cmdstat_expire"]["calls"] == 2
    raw.close()


def test_a_jobs_spend_and_its_reservation_change_in_one_step(redis_url: str) -> None:
    """The job's end counts its spend and gives back what it held in one MULTI: before, the
    spend came first and the reservation a round trip later, and an admission in between saw
    the job's tokens twice (a summary that fit was refused: test_server_budget_reservations).
    Another job's reservation stays."""
    raw = redis.Redis.from_url(redis_url, decode_responses=True)
    layout = KeyLayout()
    store, at = TenantUsageStore(raw, layout), time.time()
    reserved = layout.tenant_reserved("acme")
    raw.hset(reserved, mapping={"acme:job-1": "20 99999999999999 owner",
                                "acme:job-2": "20 99999999999999 -"})
    raw.config_resetstat()
    store.add("acme", at, input_tokens=15, output_tokens=5, usd=0.0, draft=False, ended=True,
              release_job="acme:job-1")
    stats = raw.info("commandstats")
    assert stats["cmdstat_multi"]["calls"] == 1 and stats["cmdstat_exec"]["calls"] == 1
    assert stats["cmdstat_hdel"]["calls"] == 1  # inside the script, inside the MULTI
    assert raw.hkeys(reserved) == ["acme:job-2"]
    assert raw.hget(layout.tenant_usage("acme", utc_day(at)), "input_tokens") == "15"
    raw.close()
