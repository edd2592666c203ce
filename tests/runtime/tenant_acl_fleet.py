"""A real redis-server with the docs' ACL users (docs/deploying.md "Redis ACL and TLS" for the
fleet, docs/tenants.md "A Redis ACL user per tenant" for each tenant), a worker process on the
fleet's user and a loopback model: the fleet of the tenant-ACL tests."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis
from recovery.recovery_support import RedisServer, WorkerProcess, model_env, worker_env
from runtime.runtime_model_server import ModelServer

from api_client import ClientSettings, CompactionClient
from api_client.contract.keys import KeyLayout
from api_client.contract.wire import JobRecord
from helpers.doc_facts import acl_rules

LAYOUT = KeyLayout("compactor", None)


@dataclass
class Fleet:
    server: RedisServer
    admin: redis.Redis[str]
    worker: WorkerProcess
    model: ModelServer

    def url(self, user: str) -> str:
        return f"redis://{user}:pw-{user}@127.0.0.1:{self.server.port}/0"

    def raw(self, user: str) -> redis.Redis[str]:
        return redis.Redis.from_url(self.url(user), decode_responses=True)

    def client(self, user: str, tenant: str, *, inbox: bool) -> CompactionClient:
        return CompactionClient(ClientSettings(redis_url=self.url(user), tenant_inbox=inbox),
                                tenant=tenant)

    def record(self, job_id: str) -> JobRecord:
        return JobRecord.from_redis(self.admin.hgetall(LAYOUT.job(job_id).record))


def acl_user(admin: redis.Redis[str], name: str, rules: str) -> None:
    admin.execute_command("ACL", "SETUSER", name, "on", f">pw-{name}", *rules.split())


@contextmanager
def running_fleet(folder: Path, model: ModelServer, tenants: tuple[str, ...],
                  users: Mapping[str, str] | None = None) -> Iterator[Fleet]:
    """The fleet's user ``compactor``, each tenant's user (the docs' line of ``acme``, renamed)
    and ``users`` (name → rules); the worker stays alive to the end."""
    server = RedisServer(folder / "redis", aof=False).start()
    admin: redis.Redis[str] = redis.Redis.from_url(server.url, decode_responses=True)
    acl_user(admin, "compactor", acl_rules("compactor"))
    for tenant in tenants:
        acl_user(admin, tenant, acl_rules("acme").replace("acme", tenant))
    for name, rules in (users or {}).items():
        acl_user(admin, name, rules)
    env = worker_env(f"redis://compactor:pw-compactor@127.0.0.1:{server.port}/0",
                     COMPACTOR_MODELS=model_env(model.base_url))
    worker = WorkerProcess(env, "acl", folder)
    try:
        worker.wait_ready()
        yield Fleet(server, admin, worker, model)
        assert worker.alive(), worker.log()[-3000:]
    finally:
        worker.stop()
        server.stop()
