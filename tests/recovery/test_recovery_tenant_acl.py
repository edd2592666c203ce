"""A Redis ACL user restricted to one tenant's keys, as the docs/tenants.md writes it: the
tenant's client (``tenant_inbox``) does its own work through it (sessions, compactions,
events, a real worker doing the jobs) and nothing else: another tenant's and the default
tenant's sessions, the broker's queued messages, the all-tenants event stream and its own quota
are refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from recovery.recovery_support import RedisServer, WorkerProcess, model_env, worker_env
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import new_session

from api_client import ClientSettings, CompactionClient
from api_client.contract.errors import ConfigurationError
from helpers.doc_facts import acl_rules

# The documented ACL line of tenant "acme" (key prefix "compactor", database 0), read from the
# page that writes it (docs/tenants.md).
ACL = acl_rules("acme")


def test_a_tenants_acl_user_does_its_own_work_and_nothing_else(
        tmp_path: Path, model: ModelServer, demo_text: str) -> None:
    server = RedisServer(tmp_path / "redis", aof=False).start()
    admin: redis.Redis[str] = redis.Redis.from_url(server.url, decode_responses=True)
    admin.execute_command("ACL", "SETUSER", "acme", "on", ">s3cret", *ACL.split())
    url = f"redis://acme:s3cret@127.0.0.1:{server.port}/0"
    worker = WorkerProcess(worker_env(server.url, COMPACTOR_MODELS=model_env(model.base_url)),
                           "tenants", tmp_path)
    try:
        worker.wait_ready()
        with CompactionClient(server.url, tenant="globex") as globex:
            theirs = new_session(globex, demo_text)
        with CompactionClient(server.url) as default:
            default_sid = new_session(default, demo_text)
        with CompactionClient(ClientSettings(redis_url=url, tenant_inbox=True),
                              tenant="acme") as acme:
            acme.warm()
            sid = new_session(acme, demo_text)
            assert acme.compact(sid).wait(60)["type"] == "compaction"
            assert acme.prune(sid).wait(60) is not None
            assert acme.context(sid).messages
            assert [e.type for e in acme.events(session_id=sid, follow=False)]
            assert acme.events(follow=False) is not None
            admin.execute_command("ACL", "LOG", "RESET")
            # The same user as another tenant's client is refused, with a typed error.
            with CompactionClient(ClientSettings(redis_url=url), tenant="globex") as posing, \
                    pytest.raises(ConfigurationError, match="ACL"):
                posing.sessions.load(theirs)
            with CompactionClient(ClientSettings(redis_url=url)) as posing_default, \
                    pytest.raises(ConfigurationError, match="ACL"):
                posing_default.sessions.export_jsonl(default_sid)
        raw: redis.Redis[str] = redis.Redis.from_url(url, decode_responses=True)
        refused = [
            lambda: raw.hgetall(f"compactor:tenant:globex:session:{{{theirs}}}:entries"),
            lambda: raw.get(f"compactor:session:{{{default_sid}}}:header"),
            lambda: raw.lrange("compactor:broker:compactor.compact:6", 0, -1),
            lambda: raw.xrange("compactor:events"),
            lambda: raw.xrange("compactor:tenant:globex:events"),
            lambda: raw.hset("compactor:tenants:{acme}:quota", "tokens_per_day", "0"),
            lambda: raw.scan(0),
            lambda: raw.keys("*"),
        ]
        for probe in refused:
            with pytest.raises(redis.exceptions.NoPermissionError):
                probe()
        assert raw.hgetall("compactor:tenants:{acme}:quota") == {}  # its quota: read only
        assert worker.alive(), worker.log()[-3000:]
    finally:
        worker.stop()
        server.stop()
