"""A model-budget reservation never leaks (issue 39 M5): a worker SIGKILLed mid-call, whose job
runs again on another worker, leaves nothing reserved once the job is done.

Before: each call's estimate was added to ``reserved_tokens`` of the tenant's day with no
owner; the killed delivery never gave its share back, so admission counted it as spent for the
rest of the day. Now the job's reservation is a field of its own (job id, owner, end): the next
delivery's calls replace the dead one's and the job's end gives it back
(api_client/contract/reservations.py).
"""

from __future__ import annotations

import time
from pathlib import Path

from recovery.recovery_support import RedisServer, kill_and_recover, model_env, worker_env
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import new_session

from api_client import CompactionClient


def test_a_killed_workers_reservation_is_given_back_when_its_job_ends(
        aof_redis: RedisServer, model: ModelServer, demo_text: str, tmp_path: Path) -> None:
    env = worker_env(aof_redis.url, COMPACTOR_MODELS=model_env(model.base_url),
                     COMPACTOR_TOKENS_PER_DAY="10000000")
    with CompactionClient(aof_redis.url) as client:
        layout, raw = client.layout, client.redis
        kill_and_recover(client, env, model, new_session(client, demo_text), tmp_path)
        usage = raw.hgetall(layout.tenant_usage("default", time.strftime("%Y-%m-%d",
                                                                         time.gmtime())))
        held = raw.hgetall(layout.tenant_reserved("default"))
    print(f"after the job: usage {usage}, reservations {held}")
    assert int(usage.get("input_tokens", 0)) > 0  # the survivor's call was counted
    assert int(usage.get("reserved_tokens", 0)) == 0, usage  # before: the killed call's share
    assert held == {}
