"""Where the client's flows run: one Redis (and maybe a separate broker), sync or asyncio.

A flow (:mod:`api_client.contract.redis_flows`) yields Redis calls; a transport runs them. Two
more calls exist only on the client: :class:`OnBroker` (a pipeline for a Redis broker that is
not the sessions' Redis) and :class:`Publish` (a task sent through kombu, for RabbitMQ). The
handles, readers and the client hold a transport, never the client itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar
from urllib.parse import urlsplit

import redis
import redis.asyncio

from api_client.client.producer import TaskProducer
from api_client.contract.keys import KeyLayout
from api_client.contract.redis_conn import make_async_redis, make_redis, redis_db, same_redis
from api_client.contract.redis_flows import (
    AsyncShell,
    Call,
    Pipeline,
    Script,
    SyncShell,
    drive,
    drive_async,
)
from api_client.contract.routing import Route
from api_client.contract.settings import REDIS_SCHEMES, ClientSettings

__all__ = [
    "AsyncTransport", "BrokerMode", "ClientCall", "ClientFlow", "OnBroker", "Publish",
    "SyncTransport",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Publish:
    """Send the task by name through kombu (RabbitMQ); only the job id travels."""

    job_id: str
    route: Route
    resend: bool = False


@dataclass(frozen=True, slots=True)
class OnBroker:
    """A pipeline or script (``place.lua``) for the Redis broker when it is not the sessions'
    Redis."""

    call: Pipeline | Script


@dataclass(frozen=True, slots=True)
class BrokerMode:
    """How a new job's task message travels (docs/storage.md "Enqueue"): ``inline`` (placed by
    the enqueue script: the broker is the sessions' Redis), ``redis`` (``place.lua`` on a Redis
    broker of its own, after the enqueue script), ``kombu`` (published to RabbitMQ after it) or
    ``inbox`` (none: the enqueue script puts the job in the tenant's inbox, the workers admit
    and send it)."""

    name: str
    db: int | None  # the Redis broker's database (None: kombu)

    @classmethod
    def of(cls, settings: ClientSettings) -> BrokerMode:
        if settings.tenant_inbox:  # the tenant's inbox: the workers admit and send
            return cls("inbox", None)
        broker = settings.resolved_broker_url
        if same_redis(settings.redis_url, broker):
            return cls("inline", redis_db(broker))
        if urlsplit(broker).scheme in REDIS_SCHEMES:
            return cls("redis", redis_db(broker))
        return cls("kombu", None)

    @property
    def inline_db(self) -> int | None:
        """The database the enqueue script pushes to itself (None: it does not)."""
        return self.db if self.name == "inline" else None


# What the client's flows yield: the contract's Redis calls and the two above.
ClientCall: TypeAlias = Call | Publish | OnBroker
ClientFlow: TypeAlias = Generator[ClientCall, Any, T]


class _Transport:
    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        self.layout = KeyLayout(settings.key_prefix, settings.tenant)
        self.broker = BrokerMode.of(settings)
        self.producer = TaskProducer(settings)


class SyncTransport(_Transport):
    def __init__(self, settings: ClientSettings) -> None:
        super().__init__(settings)
        self.redis = make_redis(settings)
        self._blocking: redis.Redis[str] | None = None
        self.io = SyncShell(self.redis, self.blocking_redis)
        self._broker_redis: redis.Redis[str] | None = None
        self.broker_io = self.io
        if self.broker.name == "redis":
            self._broker_redis = make_redis(settings, url=settings.resolved_broker_url)
            self.broker_io = SyncShell(self._broker_redis)

    def run(self, flow: ClientFlow[T]) -> T:
        return drive(flow, self.execute)

    def execute(self, call: ClientCall) -> Any:
        if isinstance(call, Publish):
            return self.producer.send(call.job_id, call.route, resend=call.resend)
        if isinstance(call, OnBroker):
            return self.broker_io.execute(call.call)
        return self.io.execute(call)

    def blocking_redis(self) -> redis.Redis[str]:
        """A second connection pool without a read timeout, for XREAD BLOCK."""
        if self._blocking is None:
            self._blocking = make_redis(self.settings, blocking=True)
        return self._blocking

    def close(self) -> None:
        self.producer.close()
        for client in (self.redis, self._broker_redis, self._blocking):
            if client is not None:
                client.close()


class AsyncTransport(_Transport):
    def __init__(self, settings: ClientSettings) -> None:
        super().__init__(settings)
        self.redis = make_async_redis(settings)
        self._blocking: redis.asyncio.Redis[str] | None = None
        self.io = AsyncShell(self.redis, self.blocking_redis)
        self._broker_redis: redis.asyncio.Redis[str] | None = None
        self.broker_io = self.io
        if self.broker.name == "redis":
            self._broker_redis = make_async_redis(settings, url=settings.resolved_broker_url)
            self.broker_io = AsyncShell(self._broker_redis)

    async def run(self, flow: ClientFlow[T]) -> T:
        return await drive_async(flow, self.execute)

    async def execute(self, call: ClientCall) -> Any:
        if isinstance(call, Publish):  # kombu's publish blocks: off the event loop
            return await asyncio.to_thread(self.producer.send, call.job_id, call.route,
                                           resend=call.resend)
        if isinstance(call, OnBroker):
            return await self.broker_io.execute(call.call)
        return await self.io.execute(call)

    def blocking_redis(self) -> redis.asyncio.Redis[str]:
        if self._blocking is None:
            self._blocking = make_async_redis(self.settings, blocking=True)
        return self._blocking

    async def aclose(self) -> None:
        self.producer.close()
        for client in (self.redis, self._broker_redis, self._blocking):
            if client is not None:
                await client.aclose()  # type: ignore[attr-defined]
